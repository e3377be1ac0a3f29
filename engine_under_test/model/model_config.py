"""Model configs read from a checkpoint directory's config.json.

Contract: `TargetModelConfig.from_dir(path)` / `DraftModelConfig.from_dir(path)` return frozen
dataclasses with the fields the layers need; a missing or ill-typed key raises ValueError
naming the file and the JSON key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_under_test.config_file import read_config
from engine_under_test.shapes import ATTN_OUTPUT_GATE_DEFAULT


def _read_json(path: Path) -> dict[str, Any]:
    return read_config(path / "config.json" if path.is_dir() else path)


def _get(raw: dict[str, Any], key: str, kind: type, file: str, default: Any = ...) -> Any:
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is not ...:
                return default
            raise ValueError(f"{file}: missing key $.{key}")
        node = node[part]
    if kind is float and isinstance(node, int):
        node = float(node)
    if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
        raise ValueError(f"{file}: $.{key} must be {kind.__name__}, got {node!r}")
    return node


@dataclass(frozen=True)
class TargetModelConfig:
    """Qwen3_5ForCausalLM text config (model_type qwen3_5_text)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_conv_kernel_dim: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    layer_types: tuple[str, ...]
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    attn_output_gate: bool
    tie_word_embeddings: bool
    eos_token_id: int | None

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_head_dim * self.linear_num_key_heads + self.linear_value_head_dim * self.linear_num_value_heads

    @classmethod
    def from_dir(cls, path: str | Path) -> "TargetModelConfig":
        path = Path(path)
        raw = _read_json(path)
        f = str(path / "config.json" if path.is_dir() else path)
        if "text_config" in raw:  # the multimodal wrapper's layout
            raw = raw["text_config"]
        layer_types = tuple(_get(raw, "layer_types", list, f))
        for i, lt in enumerate(layer_types):
            if lt not in ("linear_attention", "full_attention"):
                raise ValueError(f"{f}: $.layer_types[{i}] must be linear_attention or full_attention, got {lt!r}")
        n = _get(raw, "num_hidden_layers", int, f)
        if len(layer_types) != n:
            raise ValueError(f"{f}: $.layer_types has {len(layer_types)} entries, num_hidden_layers is {n}")
        if not _get(raw, "attn_output_gate", bool, f, ATTN_OUTPUT_GATE_DEFAULT):
            raise ValueError(f"{f}: $.attn_output_gate false is not supported by this engine")
        eos = raw.get("eos_token_id")
        return cls(
            vocab_size=_get(raw, "vocab_size", int, f),
            hidden_size=_get(raw, "hidden_size", int, f),
            intermediate_size=_get(raw, "intermediate_size", int, f),
            num_hidden_layers=n,
            num_attention_heads=_get(raw, "num_attention_heads", int, f),
            num_key_value_heads=_get(raw, "num_key_value_heads", int, f),
            head_dim=_get(raw, "head_dim", int, f),
            linear_conv_kernel_dim=_get(raw, "linear_conv_kernel_dim", int, f),
            linear_key_head_dim=_get(raw, "linear_key_head_dim", int, f),
            linear_value_head_dim=_get(raw, "linear_value_head_dim", int, f),
            linear_num_key_heads=_get(raw, "linear_num_key_heads", int, f),
            linear_num_value_heads=_get(raw, "linear_num_value_heads", int, f),
            layer_types=layer_types,
            rms_norm_eps=_get(raw, "rms_norm_eps", float, f),
            rope_theta=_get(raw, "rope_parameters.rope_theta", float, f),
            partial_rotary_factor=_get(raw, "rope_parameters.partial_rotary_factor", float, f, 1.0),
            attn_output_gate=True,
            tie_word_embeddings=_get(raw, "tie_word_embeddings", bool, f, False),
            eos_token_id=eos if isinstance(eos, int) else None,
        )


@dataclass(frozen=True)
class DraftModelConfig:
    """DFlash drafter config (architectures DFlashDraftModel, model_type qwen3)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    target_hidden_size: int

    @classmethod
    def from_dir(cls, path: str | Path, target_hidden_size: int | None = None) -> "DraftModelConfig":
        path = Path(path)
        raw = _read_json(path)
        f = str(path / "config.json" if path.is_dir() else path)
        hidden = _get(raw, "hidden_size", int, f)
        ids = _get(raw, "dflash_config.target_layer_ids", list, f)
        if not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise ValueError(f"{f}: $.dflash_config.target_layer_ids must be a non-empty list of layer indices")
        theta = raw.get("rope_theta", (raw.get("rope_parameters") or {}).get("rope_theta", 1_000_000.0))
        return cls(
            vocab_size=_get(raw, "vocab_size", int, f),
            hidden_size=hidden,
            intermediate_size=_get(raw, "intermediate_size", int, f),
            num_hidden_layers=_get(raw, "num_hidden_layers", int, f),
            num_attention_heads=_get(raw, "num_attention_heads", int, f),
            num_key_value_heads=_get(raw, "num_key_value_heads", int, f),
            head_dim=_get(raw, "head_dim", int, f),
            rms_norm_eps=_get(raw, "rms_norm_eps", float, f),
            rope_theta=float(theta),
            block_size=_get(raw, "block_size", int, f),
            mask_token_id=_get(raw, "dflash_config.mask_token_id", int, f),
            target_layer_ids=tuple(ids),
            target_hidden_size=int(raw.get("target_hidden_size") or target_hidden_size or hidden),
        )
