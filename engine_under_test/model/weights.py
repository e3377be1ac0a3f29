"""Weights: safetensors loading under the architectures' published names, and a seeded writer.

Names: the target's are transformers' Qwen3_5ForCausalLM names (`model.embed_tokens.weight`,
`model.layers.{i}.linear_attn.in_proj_qkv.weight`, ..., `lm_head.weight`); checkpoints of the
multimodal wrapper (`model.language_model.*`) load too, and `mtp.*` / `model.visual.*` are
skipped as transformers skips them. The drafter's are the DFlash checkpoints' names
(`layers.{i}.self_attn.q_proj.weight`, `fc.weight`, `hidden_norm.weight`, `norm.weight`);
it shares the target's embedding and LM head (a drafter's own `embed_tokens` / `lm_head`
entries are not used).

Models are built with their projection groups fused (fused_linear.LinearGroup: the members'
weights are row views of one tensor), so a checkpoint always loads after fusion: each tensor
is copied into its member's view, i.e. into the group's weight; names and shapes are the
members' own.

`init_random_(module, seed)` fills every parameter from a generator seeded by (seed, parameter
index), with scales that keep activations O(1) and norm weights visibly away from identity.
`write_random_checkpoint(...)` saves such weights with config.json into a directory that both
this loader and transformers' `from_pretrained` read. No hub access anywhere.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from engine_under_test.model.drafter import DFlashDrafter
from engine_under_test.model.fused_linear import set_fused
from engine_under_test.model.model_config import DraftModelConfig, TargetModelConfig
from engine_under_test.model.norm import GatedRMSNorm, RMSNorm, ZeroCenteredRMSNorm
from engine_under_test.model.target import Qwen35Target

_SKIP_PREFIXES = ("mtp.", "model.visual.", "visual.")
_DRAFT_SHARED = ("embed_tokens.weight", "lm_head.weight")


MAX_DRAW_ELEMENTS = 1 << 24      # larger parameters are drawn in row chunks (bounded scratch on a device)


def _draw(shape, gen: torch.Generator, device) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)


def _kind(name: str, owner: nn.Module | None) -> str:
    if name.endswith("A_log"):
        return "A_log"
    if name.endswith("dt_bias"):
        return "dt_bias"
    if isinstance(owner, ZeroCenteredRMSNorm):
        return "zero_centered_norm"
    if isinstance(owner, (RMSNorm, GatedRMSNorm)):
        return "norm"
    if isinstance(owner, nn.Embedding):
        return "embedding"
    return "linear"       # linear weights [out, in] and the depthwise conv [C, 1, K]: 1 / sqrt(fan-in)


def _values(kind: str, shape, gen: torch.Generator, device, fan_in: int) -> torch.Tensor:
    if kind == "A_log":
        return torch.log(1.0 + 15.0 * torch.rand(shape, generator=gen, device=device))
    if kind == "dt_bias" or kind == "norm":
        return 1.0 + 0.1 * _draw(shape, gen, device)
    if kind == "zero_centered_norm":
        return 0.1 * _draw(shape, gen, device)
    if kind == "embedding":
        return _draw(shape, gen, device)
    return _draw(shape, gen, device) / math.sqrt(fan_in)


@torch.no_grad()
def init_random_(module: nn.Module, seed: int) -> None:
    """Seeded random weights for every parameter of `module` (in place); parameters over
    MAX_DRAW_ELEMENTS are drawn in row chunks from their generator."""
    owners = {id(m.weight): m for m in module.modules() if hasattr(m, "weight") and isinstance(getattr(m, "weight"), nn.Parameter)}
    for index, (name, p) in enumerate(module.named_parameters()):
        gen = torch.Generator(device=p.device).manual_seed(seed * 1_000_003 + index)
        kind = _kind(name, owners.get(id(p)))
        fan_in = p.shape[-1] if p.dim() else 1
        if p.dim() == 0 or p.numel() <= MAX_DRAW_ELEMENTS:
            p.copy_(_values(kind, p.shape, gen, p.device, fan_in).to(p.dtype))
            continue
        rows = max(1, MAX_DRAW_ELEMENTS // (p.numel() // p.shape[0]))
        for start in range(0, p.shape[0], rows):
            part = p[start:start + rows]
            part.copy_(_values(kind, part.shape, gen, p.device, fan_in).to(p.dtype))


@contextmanager
def _built_in(device: str | torch.device, dtype: torch.dtype):
    """Construct modules directly on `device` in `dtype` (no float32 copy of the weights first)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def _read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir}: no *.safetensors files (use load_format='dummy' for seeded random weights)")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def _load_into(module: nn.Module, tensors: dict[str, torch.Tensor], model_dir: Path, optional: tuple[str, ...]) -> None:
    params = dict(module.named_parameters())
    missing = [n for n in params if n not in tensors and n not in optional]
    unexpected = sorted(set(tensors) - set(params))
    if missing or unexpected:
        raise ValueError(f"{model_dir}: checkpoint does not match the architecture: "
                         f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
                         f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}")
    with torch.no_grad():
        for name, p in params.items():
            if name in tensors:
                t = tensors[name]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{model_dir}: {name}: shape {tuple(t.shape)}, the architecture needs {tuple(p.shape)}")
                p.copy_(t.to(p.dtype))


def _target_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if name.startswith(_SKIP_PREFIXES):
            continue
        out[name.replace("model.language_model.", "model.", 1)] = t
    return out


def load_target(model_dir: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                load_format: str = "safetensors", seed: int = 0) -> Qwen35Target:
    """The target from `model_dir` (config.json + safetensors, or seeded random with load_format='dummy')."""
    model_dir = Path(model_dir)
    cfg = TargetModelConfig.from_dir(model_dir)
    with _built_in(device, dtype):
        model = Qwen35Target(cfg).to(dtype)
    if load_format == "dummy":
        init_random_(model, seed)
    elif load_format == "safetensors":
        tensors = _target_names(_read_safetensors(model_dir))
        if cfg.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)
        _load_into(model, tensors, model_dir, optional=())
    else:
        raise ValueError(f"load_format: unknown {load_format!r} (known: safetensors, dummy)")
    if device != "cpu" and torch.device(device).type == "cuda":
        model.gdn_backend = "fla"
    return model.requires_grad_(False).eval()


def load_drafter(model_dir: str | Path, target: Qwen35Target, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, load_format: str = "safetensors", seed: int = 1) -> DFlashDrafter:
    """The DFlash drafter for `target` (shares its embedding and LM head)."""
    model_dir = Path(model_dir)
    cfg = DraftModelConfig.from_dir(model_dir, target_hidden_size=target.config.hidden_size)
    bad = [i for i in cfg.target_layer_ids if i >= target.config.num_hidden_layers]
    if bad:
        raise ValueError(f"{model_dir}/config.json: $.dflash_config.target_layer_ids {bad} exceed the target's "
                         f"{target.config.num_hidden_layers} layers")
    with _built_in(device, dtype):
        drafter = DFlashDrafter(cfg, target.model.embed_tokens, target.lm_head).to(dtype)
    if load_format == "dummy":
        init_random_(drafter, seed)
    elif load_format == "safetensors":
        tensors = {n: t for n, t in _read_safetensors(model_dir).items() if n not in _DRAFT_SHARED}
        tensors = {n.replace("model.", "", 1) if n.startswith("model.") else n: t for n, t in tensors.items()}
        _load_into(drafter, tensors, model_dir, optional=())
    else:
        raise ValueError(f"load_format: unknown {load_format!r} (known: safetensors, dummy)")
    return drafter.requires_grad_(False).eval()


def _separate_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """{name: parameter}, each in a storage of its own: the fused projection groups are split
    first (one group's copy alive at a time), as some safetensors versions refuse tensors that
    share a storage even where they do not overlap."""
    set_fused(model, False)
    return {n: p.detach().contiguous() for n, p in model.named_parameters()}


def write_random_checkpoint(config_dir: str | Path, out_dir: str | Path, seed: int,
                            dtype: torch.dtype = torch.float32) -> Path:
    """Write config.json + model.safetensors with seeded random weights for the model in `config_dir`.

    The architecture is taken from config.json's `architectures` (Qwen3_5ForCausalLM or
    DFlashDraftModel); the written config's torch_dtype is set to `dtype`.
    """
    from safetensors.torch import save_file

    config_dir, out_dir = Path(config_dir), Path(out_dir)
    raw = json.loads((config_dir / "config.json").read_text())
    arch = (raw.get("architectures") or [""])[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    raw["torch_dtype"] = str(dtype).removeprefix("torch.")
    (out_dir / "config.json").write_text(json.dumps(raw, indent=1))
    if arch == "Qwen3_5ForCausalLM":
        with _built_in("cpu", dtype):
            model = Qwen35Target(TargetModelConfig.from_dir(config_dir)).to(dtype)
        init_random_(model, seed)
        state = _separate_tensors(model)
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
    elif arch == "DFlashDraftModel":
        cfg = DraftModelConfig.from_dir(config_dir)
        dummy_embed = nn.Embedding(cfg.vocab_size, cfg.target_hidden_size, device="meta")   # shared, not saved
        dummy_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device="meta")
        with _built_in("cpu", dtype):
            model = DFlashDrafter(cfg, dummy_embed, dummy_head).to(dtype)
        init_random_(model, seed)
        state = _separate_tensors(model)
    else:
        raise ValueError(f"{config_dir}/config.json: $.architectures[0] {arch!r} is not Qwen3_5ForCausalLM or DFlashDraftModel")
    save_file(state, str(out_dir / "model.safetensors"))
    return out_dir

