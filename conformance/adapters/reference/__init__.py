"""The reference engine's in-env plan adapter."""
