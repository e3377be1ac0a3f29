"""Per-layer cache specs and the page-size unification of a hybrid model.

Contract: `build_layer_specs(cfg, target, draft)` returns {layer_name: spec} for every layer
that keeps cache in the pool, with ONE page size for all of them: the attention block size
grows (in multiples of the kernel block) until one attention page holds a recurrent-state page,
and the state page is padded up to the attention page (vLLM's `_align_hybrid_block_size`).
Layer names: "target.layers.{i}" and "draft.layers.{i}" (i = the layer's index in its model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from engine_under_test.config import FLASH_ATTN_KERNEL_BLOCK_TOKENS, EngineConfig
from engine_under_test.shapes import DTYPE_SIZE_BYTES, AttentionShape, DraftShape, GdnShape, TargetShape


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AttentionLayerSpec:
    """Full attention: one page = block_size_tokens x (K + V) of one layer. `is_draft` does not
    take part in equality, so target and draft layers of one geometry share a group."""

    block_size_tokens: int
    num_kv_heads: int
    head_dim: int
    dtype: str

    @property
    def page_size_bytes(self) -> int:
        return self.block_size_tokens * 2 * self.num_kv_heads * self.head_dim * DTYPE_SIZE_BYTES[self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * DTYPE_SIZE_BYTES[self.dtype]


@dataclass(frozen=True)
class StateLayerSpec:
    """Gated-DeltaNet recurrent state: one page = one state slot (conv + SSM), padded to the
    unified page size."""

    conv_shape: tuple[int, int]
    conv_dtype: str
    ssm_shape: tuple[int, int, int]
    ssm_dtype: str
    page_size_bytes: int

    @property
    def conv_bytes(self) -> int:
        return self.conv_shape[0] * self.conv_shape[1] * DTYPE_SIZE_BYTES[self.conv_dtype]

    @property
    def ssm_bytes(self) -> int:
        s = self.ssm_shape
        return s[0] * s[1] * s[2] * DTYPE_SIZE_BYTES[self.ssm_dtype]

    @property
    def state_bytes(self) -> int:
        """Unpadded bytes of one slot."""
        return self.conv_bytes + self.ssm_bytes


LayerSpec = AttentionLayerSpec | StateLayerSpec


def target_layer_name(i: int) -> str:
    return f"target.layers.{i}"


def draft_layer_name(i: int) -> str:
    return f"draft.layers.{i}"


def conv_dtype(cfg: EngineConfig, target: TargetShape) -> str:
    return target.dtype if cfg.mamba_cache_dtype == "auto" else cfg.mamba_cache_dtype


GDN_PREFILL_CHECKPOINT_ALIGNMENT_TOKENS = 64


def device_writes_gdn_prefill_checkpoints(device_capability: tuple[int, int], target: TargetShape) -> bool:
    """NOTE: vLLM 0.33 runs FlashInfer's GDN prefill (which emits mid-prefill states every 64 tokens)
    on SM90, and on SM10x / SM12x when head_k_dim is 128 (CUDA 13 runtime); with prefix caching on,
    the state groups then hold one prefill checkpoint block per request."""
    major = device_capability[0]
    return target.gdn is not None and (major == 9 or (major in (10, 12) and target.gdn.head_k_dim == 128))


def gdn_prefill_checkpoint_alignment_tokens(cfg: EngineConfig) -> int | None:
    if not cfg.gdn_prefill_checkpoints or cfg.mamba_cache_mode != "align":
        return None
    return GDN_PREFILL_CHECKPOINT_ALIGNMENT_TOKENS


def unified_block_size_tokens(cfg: EngineConfig, target: TargetShape) -> int:
    """The attention block size after hybrid alignment (vLLM `Platform._align_hybrid_block_size`
    with the FLASH_ATTN kernel block; in align mode the GDN prefill checkpoint alignment enters
    the lcm)."""
    if target.gdn is None:
        return cfg.block_size
    state_bytes = target.gdn.state_bytes(cfg.num_speculative_tokens, conv_dtype(cfg, target), cfg.mamba_ssm_cache_dtype)
    per_token = target.attention.kv_bytes_per_token(cfg.kv_cache_dtype)
    align = max(FLASH_ATTN_KERNEL_BLOCK_TOKENS, cfg.block_size)
    checkpoint = gdn_prefill_checkpoint_alignment_tokens(cfg)
    if checkpoint is not None:
        align = math.lcm(align, checkpoint)
    block = align * cdiv(state_bytes, align * per_token)
    block = FLASH_ATTN_KERNEL_BLOCK_TOKENS * cdiv(block, FLASH_ATTN_KERNEL_BLOCK_TOKENS)
    return max(cfg.block_size, block)


def build_layer_specs(cfg: EngineConfig, target: TargetShape, draft: DraftShape | None) -> dict[str, LayerSpec]:
    block = unified_block_size_tokens(cfg, target)

    def attn(shape: AttentionShape) -> AttentionLayerSpec:
        return AttentionLayerSpec(block_size_tokens=block, num_kv_heads=shape.num_kv_heads,
                                  head_dim=shape.head_dim, dtype=cfg.kv_cache_dtype)

    target_attn = attn(target.attention)
    page = target_attn.page_size_bytes
    specs: dict[str, LayerSpec] = {}
    gdn: GdnShape | None = target.gdn
    for i in range(target.num_layers):
        if i in target.attention_layer_ids:
            specs[target_layer_name(i)] = target_attn
        elif gdn is not None:
            k = cfg.num_speculative_tokens
            st = StateLayerSpec(conv_shape=gdn.conv_shape(k), conv_dtype=conv_dtype(cfg, target),
                                ssm_shape=gdn.ssm_shape(), ssm_dtype=cfg.mamba_ssm_cache_dtype, page_size_bytes=page)
            if st.state_bytes > page:
                raise ValueError(f"block_size: a state page ({st.state_bytes} bytes) exceeds the attention page ({page} bytes)")
            specs[target_layer_name(i)] = st
    if draft is not None:
        draft_attn = attn(draft.attention)
        if draft_attn.page_size_bytes != page:
            raise ValueError(
                f"speculative_config.model: draft attention page ({draft_attn.page_size_bytes} bytes at "
                f"{block} tokens) differs from the target's ({page} bytes): one unified page size is required")
        for i in range(draft.num_layers):
            specs[draft_layer_name(i)] = draft_attn
    elif cfg.speculative_config is not None and cfg.speculative_config.method == "mtp":
        # NOTE: mtp drafts with the target's own MTP layers; vLLM 0.33 plans their KV as draft
        # attention layers of the target's geometry, in the pool like every other layer.
        for i in range(target.mtp_num_hidden_layers):
            specs[draft_layer_name(i)] = target_attn
    return specs
