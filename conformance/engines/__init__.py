"""Engines: engine files and the registry, the shipped engines and their roles, environments (venvs, oracle packs), live manifests."""
