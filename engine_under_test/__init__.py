"""The reference engine: a Qwen3.5-style hybrid target with a DFlash drafter on one unified pool.

    from engine_under_test import LLM, SamplingParams      # as vLLM users write it

`LLM` and `SamplingParams` load on first use (importing the package for its version needs no torch).
"""
__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str):
    if name == "LLM":
        from engine_under_test.llm import LLM

        return LLM
    if name == "SamplingParams":
        from engine_under_test.sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'engine_under_test' has no attribute {name!r}")
