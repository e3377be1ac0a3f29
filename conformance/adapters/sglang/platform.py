"""Emulate a device profile for SGLang 0.5.23 planning on a CPU.

SGLang resolves its backends and GPU-memory defaults from platform facts. On a CPU host those
facts say "no CUDA", and SGLang refuses DFLASH on device "cpu". `device_profile(profile)` is a
context manager that, for the duration of one plan:

- installs `sglang.srt.runtime_context.override_platform(...)` with the profile's CUDA facts
  (SGLang's own, documented way to say what kind of machine this is, read by every reader);
- patches `sglang.srt.arg_groups.memory_hook.get_device_memory_capacity` (the name that
  module imported) to return the profile's memory in MiB, so the GPU-memory-dependent
  defaults (chunked_prefill_size, decode graph max_bs, mem_fraction_static) are the profile's.

It yields the list of overrides in the observation's `provenance.overrides` form, and restores
everything on exit (no state outlives the plan).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from conformance.documents.devices import DeviceProfile

MIB_BYTES = 1 << 20
DEVICE = "cuda"


# Facts whose probe in sglang.srt.utils.common is a partial of _check_cuda_device_version
# (capability majors + minimum CUDA version): evaluated by SGLang's own predicate below.
VERSIONED_PROBES = ("is_sm90", "is_sm100", "is_sm100_or_sm110", "is_sm110", "is_sm120", "is_blackwell",
                    "is_hopper_with_cuda_12_3")


def platform_facts(profile: DeviceProfile) -> dict[str, Any]:
    """The SGLang platform facts (names of `runtime_context._PLATFORM_PROBES/_VALUES`) for a profile.

    Each versioned fact is SGLang's own probe (`_check_cuda_device_version` with the probe's bound
    capability majors and CUDA version) evaluated with `is_cuda` true, `get_device_sm` the profile's
    SM and `torch.version.cuda` this venv's torch build (the CUDA runtime SGLang ships with); the
    probes are read through `runtime_context._PLATFORM_PROBES`, so a fact SGLang adds is not missed
    silently (an unknown probe shape raises)."""
    import torch
    from sglang.srt import runtime_context
    from sglang.srt.utils import common

    major, minor = profile.device_capability
    facts: dict[str, Any] = {"is_cuda": True, "device_capability": (major, minor), "device_sm": profile.device_sm}
    if torch.version.cuda is None:
        raise ProfileUnsupported("this venv's torch has no CUDA version, so SGLang's CUDA probes cannot be evaluated")
    saved = (common.is_cuda, common.get_device_sm)
    common.is_cuda = lambda: True
    common.get_device_sm = lambda: profile.device_sm
    try:
        for fact in VERSIONED_PROBES:
            probe = getattr(common, runtime_context._PLATFORM_PROBES[fact])
            partial = getattr(probe, "__wrapped__", None)
            if getattr(partial, "func", None) is not common._check_cuda_device_version:
                raise ProfileUnsupported(f"SGLang's probe for {fact} is not a _check_cuda_device_version partial")
            facts[fact] = bool(partial())
    finally:
        common.is_cuda, common.get_device_sm = saved
    return facts


class ProfileUnsupported(RuntimeError):
    """SGLang's platform facts cannot be faked for this profile (the adapter refuses the case)."""


@contextlib.contextmanager
def device_profile(profile: DeviceProfile) -> Iterator[list[dict[str, Any]]]:
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups import memory_hook

    facts = platform_facts(profile)
    capacity_mib = profile.total_memory_bytes / MIB_BYTES
    overrides: list[dict[str, Any]] = [
        {"name": f"sglang.srt.runtime_context.override_platform({name})",
         "value": list(value) if isinstance(value, tuple) else value,
         "reason": (f"{profile.hardware}: the platform fact SGLang reads on that GPU (this host has no CUDA); "
                   "versioned facts evaluated by SGLang's _check_cuda_device_version with the profile's SM and "
                   "this venv's torch.version.cuda")}
        for name, value in facts.items()
    ]
    overrides.append({
        "name": "sglang.srt.arg_groups.memory_hook.get_device_memory_capacity",
        "value": capacity_mib,
        "reason": f"{profile.hardware}: total device memory in MiB, for SGLang's GPU-memory-dependent defaults",
    })
    overrides.append({
        "name": "ServerArgs.device", "value": DEVICE,
        "reason": "the profile is a CUDA device (SGLang rejects DFLASH on device 'cpu')",
    })
    scope = runtime_context.override_platform(**facts)
    saved_capacity = memory_hook.get_device_memory_capacity
    scope.install()
    memory_hook.get_device_memory_capacity = lambda device=None: capacity_mib
    try:
        yield overrides
    finally:
        memory_hook.get_device_memory_capacity = saved_capacity
        scope.restore()
