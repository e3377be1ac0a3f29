"""Model shapes read from a config.json: what the planner and the pool need to size memory.

Contract: `read_target_shape(dir)` / `read_draft_shape(dir)` return frozen dataclasses or raise
`ValueError` naming the file and the key: sizes and head counts are integers >= 1, layer counts at
most `MAX_NUM_LAYERS`, flags booleans; config.json is read by `config_file.read_config` (regular
file, size and nesting checked first). Nothing here touches weights; parameter counts are
computed from the architecture (Qwen3.5 hybrid target, DFlash Qwen3-style drafter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_under_test.config_file import read_config

DTYPE_SIZE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}

# Qwen3.5's gated attention is on unless config.json says otherwise (the one default both readers use:
# this module and model.model_config).
ATTN_OUTPUT_GATE_DEFAULT = True


@dataclass(frozen=True)
class AttentionShape:
    """One full-attention layer's KV geometry (all layers of a model share it)."""

    num_kv_heads: int
    head_dim: int

    def kv_bytes_per_token(self, kv_dtype: str) -> int:
        """K and V for one token of one layer."""
        return 2 * self.num_kv_heads * self.head_dim * DTYPE_SIZE_BYTES[kv_dtype]


@dataclass(frozen=True)
class GdnShape:
    """One Gated-DeltaNet layer's recurrent state geometry."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel_size: int

    @property
    def conv_dim(self) -> int:
        return self.head_k_dim * self.num_k_heads * 2 + self.head_v_dim * self.num_v_heads

    def conv_state_len_tokens(self, num_speculative_tokens: int) -> int:
        """Rows of the conv state: kernel - 1, widened by k so a verify step can roll back."""
        return self.conv_kernel_size - 1 + num_speculative_tokens

    def conv_shape(self, num_speculative_tokens: int) -> tuple[int, int]:
        """(conv_dim, state_len): the "DS" layout, dim first."""
        return (self.conv_dim, self.conv_state_len_tokens(num_speculative_tokens))

    def ssm_shape(self) -> tuple[int, int, int]:
        return (self.num_v_heads, self.head_v_dim, self.head_k_dim)

    def state_bytes(self, num_speculative_tokens: int, conv_dtype: str, ssm_dtype: str) -> int:
        """Bytes of one state slot: conv + SSM."""
        c = self.conv_shape(num_speculative_tokens)
        s = self.ssm_shape()
        return c[0] * c[1] * DTYPE_SIZE_BYTES[conv_dtype] + s[0] * s[1] * s[2] * DTYPE_SIZE_BYTES[ssm_dtype]


@dataclass(frozen=True)
class TargetShape:
    config_path: Path
    num_layers: int
    attention_layer_ids: tuple[int, ...]
    gdn_layer_ids: tuple[int, ...]
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    attention: AttentionShape
    gdn: GdnShape | None
    dtype: str
    tie_word_embeddings: bool
    attn_output_gate: bool
    max_position_embeddings: int | None = None
    mtp_num_hidden_layers: int = 0   # multi-token-prediction layers (the mtp method drafts with them)

    @property
    def num_params(self) -> int:
        """Parameters of the target, from the architecture (embedding, layers, norm, head)."""
        h, a = self.hidden_size, self.attention
        q_out = self.num_attention_heads * a.head_dim * (2 if self.attn_output_gate else 1)
        attn = h * q_out + 2 * h * a.num_kv_heads * a.head_dim + self.num_attention_heads * a.head_dim * h + 2 * a.head_dim
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h
        total = len(self.attention_layer_ids) * (attn + mlp + norms)
        if self.gdn is not None:
            g = self.gdn
            qkvz = h * (2 * g.num_k_heads * g.head_k_dim + 2 * g.num_v_heads * g.head_v_dim)
            ba = h * 2 * g.num_v_heads
            conv = g.conv_dim * g.conv_kernel_size
            gdn = qkvz + ba + conv + 2 * g.num_v_heads + g.head_v_dim + g.num_v_heads * g.head_v_dim * h
            total += len(self.gdn_layer_ids) * (gdn + mlp + norms)
        embed = self.vocab_size * h
        return total + embed + (0 if self.tie_word_embeddings else embed) + h


@dataclass(frozen=True)
class DraftShape:
    config_path: Path
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    attention: AttentionShape
    num_target_features: int   # target layers whose hidden states feed the drafter
    dtype: str
    block_size_tokens: int | None = None   # DFlash: tokens per drafted block (anchor + block - 1 drafts)

    def num_params(self, target_hidden_size: int) -> int:
        """Drafter parameters: its layers plus the feature projection; it shares the target's
        embedding and LM head (DFlash), so those are not counted here."""
        h, a = self.hidden_size, self.attention
        attn = h * self.num_attention_heads * a.head_dim * 2 + 2 * h * a.num_kv_heads * a.head_dim + 2 * a.head_dim
        mlp = 3 * h * self.intermediate_size
        fc = self.num_target_features * target_hidden_size * h
        return self.num_layers * (attn + mlp + 2 * h) + fc + 2 * h


MAX_NUM_LAYERS = 4096   # no real model has more; planning cost grows with the count


def _load(model_dir: Path | str) -> tuple[Path, dict[str, Any]]:
    path = Path(model_dir) / "config.json"
    return path, read_config(path)


def _get(data: dict[str, Any], key: str, path: Path, kind: type = int, minimum: int = 1,
         maximum: int | None = None) -> Any:
    """An integer key >= `minimum` (sizes and head counts are >= 1), <= `maximum` when given."""
    if key not in data:
        raise ValueError(f"{path}: {key}: missing")
    return _int(data[key], key, path, minimum, maximum)


def _int(value: Any, key: str, path: Path, minimum: int = 1, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (maximum is not None and value > maximum):
        bound = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise ValueError(f"{path}: {key}: expected {bound}, got {value!r}")
    return value


def _bool(data: dict[str, Any], key: str, path: Path, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{path}: {key}: expected true or false, got {value!r}")
    return value


def _optional_int(data: dict[str, Any], key: str, path: Path, minimum: int = 1) -> int | None:
    value = data.get(key)
    return None if value is None else _int(value, key, path, minimum)


def _dtype(data: dict[str, Any], path: Path) -> str:
    dtype = data.get("torch_dtype") or data.get("dtype") or "bfloat16"
    if dtype not in DTYPE_SIZE_BYTES:
        raise ValueError(f"{path}: torch_dtype: unsupported {dtype!r} (known: {', '.join(DTYPE_SIZE_BYTES)})")
    return dtype


def _attention(data: dict[str, Any], path: Path) -> AttentionShape:
    heads = _get(data, "num_attention_heads", path)
    if data.get("head_dim") is not None:
        head_dim = _get(data, "head_dim", path)
    else:
        head_dim = _int(_get(data, "hidden_size", path) // heads, "hidden_size / num_attention_heads", path)
    return AttentionShape(num_kv_heads=_get(data, "num_key_value_heads", path), head_dim=head_dim)


def read_target_shape(model_dir: Path | str) -> TargetShape:
    path, data = _load(model_dir)
    n = _get(data, "num_hidden_layers", path, maximum=MAX_NUM_LAYERS)
    types = data.get("layer_types") or ["full_attention"] * n
    if not isinstance(types, list):
        raise ValueError(f"{path}: layer_types: expected a list, got {types!r}"[:300])
    if len(types) != n:
        raise ValueError(f"{path}: layer_types: {len(types)} entries for num_hidden_layers {n}")
    unknown = sorted({repr(t) for t in types} - {"'full_attention'", "'linear_attention'"})
    if unknown:
        raise ValueError(f"{path}: layer_types: unsupported layer types {unknown}")
    gdn_ids = tuple(i for i, t in enumerate(types) if t == "linear_attention")
    gdn = None
    if gdn_ids:
        gdn = GdnShape(
            num_k_heads=_get(data, "linear_num_key_heads", path), num_v_heads=_get(data, "linear_num_value_heads", path),
            head_k_dim=_get(data, "linear_key_head_dim", path), head_v_dim=_get(data, "linear_value_head_dim", path),
            conv_kernel_size=_get(data, "linear_conv_kernel_dim", path))
    return TargetShape(
        config_path=path, num_layers=n,
        attention_layer_ids=tuple(i for i, t in enumerate(types) if t == "full_attention"), gdn_layer_ids=gdn_ids,
        hidden_size=_get(data, "hidden_size", path), intermediate_size=_get(data, "intermediate_size", path),
        vocab_size=_get(data, "vocab_size", path), num_attention_heads=_get(data, "num_attention_heads", path),
        attention=_attention(data, path), gdn=gdn, dtype=_dtype(data, path),
        tie_word_embeddings=_bool(data, "tie_word_embeddings", path, False),
        attn_output_gate=_bool(data, "attn_output_gate", path, ATTN_OUTPUT_GATE_DEFAULT),
        max_position_embeddings=_optional_int(data, "max_position_embeddings", path),
        mtp_num_hidden_layers=_optional_int(data, "mtp_num_hidden_layers", path, minimum=0) or 0)


def read_draft_shape(model_dir: Path | str) -> DraftShape:
    path, data = _load(model_dir)
    n = _get(data, "num_hidden_layers", path, maximum=MAX_NUM_LAYERS)
    dflash = data.get("dflash_config") or {}
    if not isinstance(dflash, dict):
        raise ValueError(f"{path}: dflash_config: expected an object, got {dflash!r}"[:300])
    features = dflash.get("target_layer_ids") or []
    if not isinstance(features, list) or len(features) > MAX_NUM_LAYERS:
        raise ValueError(f"{path}: dflash_config.target_layer_ids: expected a list of at most {MAX_NUM_LAYERS} layer ids")
    return DraftShape(
        config_path=path, num_layers=n, hidden_size=_get(data, "hidden_size", path),
        intermediate_size=_get(data, "intermediate_size", path),
        num_attention_heads=_get(data, "num_attention_heads", path), attention=_attention(data, path),
        num_target_features=len(features), dtype=_dtype(data, path),
        block_size_tokens=_optional_int(data, "block_size", path))
