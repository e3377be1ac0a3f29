"""The reference engine: a Qwen3.5-style hybrid target with a DFlash drafter on one unified pool."""
__version__ = "0.1.0"
