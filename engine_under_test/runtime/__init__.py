"""The reference engine's runtime: runs scheduler outputs on the unified pool."""
