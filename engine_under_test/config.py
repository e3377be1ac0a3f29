"""Engine configuration, with vLLM's knob names.

Contract: `EngineConfig(...)` is frozen and validated in `__post_init__`; a bad value raises
`ValueError` naming the field. Exactly one memory bound applies: `kv_cache_memory_bytes` (what
the unified pool gets, as vLLM's flag) or `gpu_memory_utilization` x `device_memory_bytes`
(weights + activations + workspace + pool must all fit inside it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SPECULATIVE_METHODS = ("dflash", "eagle3", "p-eagle", "dspark", "mtp", "ngram", "draft_model", "pard")
STATE_DTYPES = ("float32", "bfloat16", "float16")
KV_DTYPES = ("bfloat16", "float16", "fp8", "float32")
DEFAULT_BLOCK_SIZE_TOKENS = 16      # vLLM's CacheConfig default; grows for hybrid models
FLASH_ATTN_KERNEL_BLOCK_TOKENS = 16  # smallest kernel block of the attention backend (FLASH_ATTN: MultipleOf(16))


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    model: Path | None = None   # the drafter's model dir (methods with a separate draft)

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative_config.method: unknown {self.method!r} (known: {', '.join(SPECULATIVE_METHODS)})")
        if not isinstance(self.num_speculative_tokens, int) or self.num_speculative_tokens < 1:
            raise ValueError(f"speculative_config.num_speculative_tokens: must be an integer >= 1, got {self.num_speculative_tokens!r}")


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    model: Path
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    speculative_config: SpeculativeConfig | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    device_memory_bytes: int | None = None    # capacity the utilization applies to
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = True
    async_scheduling: bool = False            # schedule step N+1 before step N's output (vLLM's GPU default)
    gdn_prefill_checkpoints: bool = False     # the GDN prefill kernel writes align-mode checkpoints (see memory.specs)
    mamba_ssm_cache_dtype: str = "float32"
    mamba_cache_dtype: str = "auto"           # conv state dtype; auto = the model's dtype
    kv_cache_dtype: str = "bfloat16"
    block_size: int = DEFAULT_BLOCK_SIZE_TOKENS
    device: str = "cpu"
    # None: decode / verify steps, and prompt chunks of up to 512 tokens (one request's, or up to 16
    # new prompts'), run as CUDA graphs on CUDA (runtime/decode_graphs.py, prefill_graphs.py), eagerly elsewhere; False: the
    # fixed-shape graph path everywhere (on a CPU its bodies run eagerly: for tests); True: eager
    enforce_eager: bool | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "block_size"):
            _positive_int(name, getattr(self, name))
        if (self.kv_cache_memory_bytes is None) == (self.gpu_memory_utilization is None):
            raise ValueError("kv_cache_memory_bytes / gpu_memory_utilization: set exactly one memory bound")
        if self.kv_cache_memory_bytes is not None:
            _positive_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes)
        if self.gpu_memory_utilization is not None:
            u = self.gpu_memory_utilization
            if not isinstance(u, (int, float)) or isinstance(u, bool) or not 0 < u <= 1:
                raise ValueError(f"gpu_memory_utilization: must be in (0, 1], got {u!r}")
            if self.device_memory_bytes is None:
                raise ValueError("device_memory_bytes: needed with gpu_memory_utilization (the capacity it applies to)")
            _positive_int("device_memory_bytes", self.device_memory_bytes)
        if self.num_gpu_blocks_override is not None:
            _positive_int("num_gpu_blocks_override", self.num_gpu_blocks_override)
        if self.mamba_ssm_cache_dtype not in STATE_DTYPES:
            raise ValueError(f"mamba_ssm_cache_dtype: unknown {self.mamba_ssm_cache_dtype!r} (known: {', '.join(STATE_DTYPES)})")
        if self.mamba_cache_dtype != "auto" and self.mamba_cache_dtype not in STATE_DTYPES:
            raise ValueError(f"mamba_cache_dtype: unknown {self.mamba_cache_dtype!r} (known: auto, {', '.join(STATE_DTYPES)})")
        if self.kv_cache_dtype not in KV_DTYPES:
            raise ValueError(f"kv_cache_dtype: unknown {self.kv_cache_dtype!r} (known: {', '.join(KV_DTYPES)})")
        if self.enforce_eager not in (None, True, False):
            raise ValueError(f"enforce_eager: must be true, false or null, got {self.enforce_eager!r}")
        if self.speculative_config is not None and not isinstance(self.speculative_config, SpeculativeConfig):
            raise ValueError("speculative_config: must be a SpeculativeConfig")

    @property
    def num_speculative_tokens(self) -> int:
        return self.speculative_config.num_speculative_tokens if self.speculative_config else 0

    @property
    def mamba_cache_mode(self) -> str:
        """vLLM's mamba cache mode: "align" with prefix caching on a hybrid model, else "none"."""
        return "align" if self.enable_prefix_caching else "none"
