"""Emulate a device profile for vLLM 0.33 planning on a CPU: vLLM's own selection code, faked facts.

On this host vLLM's `current_platform` is `CpuPlatform`. The GPU-dependent choices a worker of
the profile's device makes are taken here by vLLM's own functions, called while a CUDA platform
whose device facts are the profile's stands in for `current_platform`:

- attention backends: `vllm.v1.attention.selector.get_attn_backend` (-> `CudaPlatformBase
  .get_attn_backend_cls` -> `get_valid_backends` -> each backend's `validate_configuration`),
  once for the target's attention layers and once for the draft's, with the draft config vLLM's
  DFlash loader builds (`use_non_causal = dflash_has_any_non_causal(draft hf config)`);
- the GDN prefill kernel: `qwen_gdn_linear_attn._resolve_gdn_prefill_backend`, which decides
  whether the GDN layers export align-mode prefill checkpoints (FlashInfer on SM90, or SM10x /
  SM12x with head_k_dim 128 and CUDA >= 13: `torch.version.cuda` of the oracle's own venv).

Glue (named in provenance, see GLUE): `ProfileCudaPlatform`, a `CudaPlatformBase` subclass whose
device queries answer the profile's facts; installing it as `vllm.platforms._current_platform`
(and as the GDN module's `current_platform`) for the duration of one selection, clearing vLLM's
selector cache around it; and, where the CUDA platform module cannot import on this host
(`vllm._C_stable_libtorch` links libcuda), an empty stand-in for that op-registration module
(no op is called by the selection code).
"""

from __future__ import annotations

import contextlib
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator

from conformance.documents.devices import DeviceProfile

FUNCTIONS = (
    "vllm.v1.attention.selector.get_attn_backend",
    "vllm.platforms.cuda.CudaPlatformBase.get_attn_backend_cls",
    "vllm.platforms.cuda.CudaPlatformBase.get_valid_backends",
    "vllm.model_executor.models.qwen3_dflash.dflash_has_any_non_causal",
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn._resolve_gdn_prefill_backend",
)

GLUE = (
    {"name": "ProfileCudaPlatform", "description": "vllm.platforms.cuda.CudaPlatformBase subclass answering "
     "the device profile's capability, name and memory; installed as vllm.platforms._current_platform (and "
     "as qwen_gdn_linear_attn.current_platform) only while vLLM's attention selector and GDN prefill backend "
     "resolver run, with the selector's cache cleared before and after"},
    {"name": "vllm._C_stable_libtorch stand-in", "description": "an empty module in sys.modules when the real "
     "one cannot load (it links libcuda, absent on a CPU host), so vllm.platforms.cuda imports; it only "
     "registers CUDA ops, none of which the selection code calls"},
)

OP_MODULE = "vllm._C_stable_libtorch"


class ProfileUnsupported(RuntimeError):
    """vLLM's selection code cannot run for this profile here (the adapter refuses the case)."""


@dataclass(frozen=True)
class DeviceChoices:
    attention_backend: Any            # class for the target's attention layers
    draft_attention_backend: Any      # class for the draft's attention layers (None: no draft attention)
    gdn_prefill_backend: str | None   # vLLM's active GDN prefill kernel (None: no GDN layers)
    stand_in_modules: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "attention_backend": self.attention_backend.get_name(),
            "draft_attention_backend": (self.draft_attention_backend.get_name()
                                        if self.draft_attention_backend is not None else None),
            "gdn_prefill_backend": self.gdn_prefill_backend,
            "stand_in_modules": list(self.stand_in_modules),
        }


STAND_IN_MARK = "__conformance_stand_in__"


def _import_cuda_platform() -> tuple[Any, tuple[str, ...]]:
    try:
        import vllm.platforms.cuda as cuda_mod
    except ImportError as exc:
        if OP_MODULE in sys.modules or "libcuda" not in str(exc):
            raise ProfileUnsupported(f"vllm.platforms.cuda does not import on this host: {exc}") from exc
        stand_in = types.ModuleType(OP_MODULE)
        setattr(stand_in, STAND_IN_MARK, True)
        sys.modules[OP_MODULE] = stand_in
        sys.modules.pop("vllm.platforms.cuda", None)
        import vllm.platforms.cuda as cuda_mod
    # Reported from the process state, not from this call: the same in every plan of one process.
    in_use = getattr(sys.modules.get(OP_MODULE), STAND_IN_MARK, False)
    return cuda_mod, ((OP_MODULE,) if in_use else ())


def profile_platform(profile: DeviceProfile) -> tuple[Any, tuple[str, ...]]:
    cuda_mod, stand_ins = _import_cuda_platform()
    from vllm.platforms.interface import DeviceCapability

    capability = DeviceCapability(*profile.device_capability)

    class ProfileCudaPlatform(cuda_mod.CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return capability

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return profile.hardware

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return profile.total_memory_bytes

    return ProfileCudaPlatform(), stand_ins


@contextlib.contextmanager
def _as_current_platform(platform: Any) -> Iterator[None]:
    import vllm.platforms as platforms
    from vllm.v1.attention import selector

    saved = platforms._current_platform
    selector._cached_get_attn_backend.cache_clear()
    platforms._current_platform = platform
    try:
        yield
    finally:
        platforms._current_platform = saved
        selector._cached_get_attn_backend.cache_clear()


def _attention_backend(vc: Any, model_config: Any) -> Any:
    from vllm.config.vllm import set_current_vllm_config
    from vllm.v1.attention.selector import get_attn_backend

    with set_current_vllm_config(vc):
        return get_attn_backend(model_config.get_head_size(), model_config.dtype, vc.cache_config.cache_dtype,
                                num_heads=model_config.get_num_attention_heads(vc.parallel_config))


def _draft_vllm_config(vc: Any) -> Any:
    """The config vLLM's DFlash loader selects the draft's backend under (load_dflash_model)."""
    from vllm.config import replace

    spec = vc.speculative_config
    if spec.method != "dflash":
        return vc
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal

    return replace(vc, attention_config=replace(
        vc.attention_config, use_non_causal=dflash_has_any_non_causal(spec.draft_model_config.hf_config),
        backend=spec.attention_backend))


def _gdn_prefill_backend(vc: Any, platform: Any) -> str:
    from vllm.model_executor.layers.mamba.gdn import qwen_gdn_linear_attn as gdn

    saved = gdn.current_platform
    gdn.current_platform = platform
    try:
        return gdn._resolve_gdn_prefill_backend(vc)[1]
    finally:
        gdn.current_platform = saved


def choose(vc: Any, profile: DeviceProfile, has_gdn_layers: bool) -> DeviceChoices:
    """Every device-dependent choice vLLM makes for this config on the profile's device."""
    # Import what the selection calls while CpuPlatform is still current: some modules pick
    # their kernels (e.g. flash-attention bindings) from the platform at import time.
    import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn  # noqa: F401
    import vllm.model_executor.models.qwen3_dflash  # noqa: F401

    platform, stand_ins = profile_platform(profile)
    try:
        with _as_current_platform(platform):
            target = _attention_backend(vc, vc.model_config)
            spec = vc.speculative_config
            draft_mc = getattr(spec, "draft_model_config", None) if spec is not None else None
            draft = None
            if draft_mc is not None and spec.method not in ("ngram", "ngram_gpu", "suffix"):
                draft = _attention_backend(_draft_vllm_config(vc), draft_mc)
    except ValueError as exc:   # vLLM's own "No valid attention backend found ..."
        raise ProfileUnsupported(f"vLLM selects no attention backend on {profile.hardware}: {exc}") from exc
    gdn = _gdn_prefill_backend(vc, platform) if has_gdn_layers else None
    return DeviceChoices(attention_backend=target, draft_attention_backend=draft, gdn_prefill_backend=gdn,
                         stand_in_modules=stand_ins)


def gdn_checkpoint_alignment(vc: Any, choices: DeviceChoices) -> int | None:
    """What each GDN layer's `get_prefill_checkpoint_alignment()` returns on the device: vLLM's
    FLASHINFER_GDN_CHECKPOINT_ALIGNMENT when mamba_cache_mode is "align" and the GDN prefill
    backend is FlashInfer (GatedDeltaNetAttention.__init__), else None."""
    if choices.gdn_prefill_backend != "flashinfer" or vc.cache_config.mamba_cache_mode != "align":
        return None
    from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT

    return int(FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)


GDN_LAYERS_GLUE = {
    "name": "GDN layer checkpoint alignment stand-in", "description": (
        "no GDN module is built on this host, so vllm.model_executor.layers.mamba.abstract"
        ".get_mamba_prefill_checkpoint_alignment (the lcm over the built Mamba layers) is replaced, while the "
        "config is aligned and the KV specs are built, by the value every GDN layer's "
        "get_prefill_checkpoint_alignment() returns on the device (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT with "
        "FlashInfer GDN prefill in align mode); vLLM's get_mamba_prefill_checkpoint_grid and "
        "_align_hybrid_block_size then run unchanged")}


@contextlib.contextmanager
def gdn_layers(checkpoint_alignment: int | None) -> Iterator[None]:
    """While active, vLLM's layer-walking alignment lookup answers for the GDN layers of the model."""
    if checkpoint_alignment is None:
        yield
        return
    from vllm.model_executor.layers.mamba import abstract

    saved = abstract.get_mamba_prefill_checkpoint_alignment
    abstract.get_mamba_prefill_checkpoint_alignment = lambda vllm_config: checkpoint_alignment
    try:
        yield
    finally:
        abstract.get_mamba_prefill_checkpoint_alignment = saved
