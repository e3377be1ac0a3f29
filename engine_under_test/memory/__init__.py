"""Memory planning: per-layer cache specs, page unification, grouping, the ledger and the bound."""
