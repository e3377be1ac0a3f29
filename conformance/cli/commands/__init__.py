"""Subcommands of the `conformance` CLI, one module each."""
