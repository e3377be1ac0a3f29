"""Emulate a device profile for SGLang 0.5.23 planning on a CPU.

SGLang resolves its backends and GPU-memory defaults from platform facts. On a CPU host those
facts say "no CUDA", and SGLang refuses DFLASH on device "cpu". `device_profile(profile)` is a
context manager that, for the duration of one plan:

- installs `sglang.srt.runtime_context.override_platform(...)` with the profile's CUDA facts
  (SGLang's own, documented way to say what kind of machine this is, read by every reader);
- patches `sglang.srt.arg_groups.memory_hook.get_device_memory_capacity` (the name that
  module imported) to return the profile's memory in MiB, so the GPU-memory-dependent
  defaults (chunked_prefill_size, decode graph max_bs, mem_fraction_static) are the H200 ones.

It yields the list of overrides in the observation's `provenance.overrides` form, and restores
everything on exit (no state outlives the plan).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from conformance.devices import DeviceProfile

MIB_BYTES = 1 << 20
DEVICE = "cuda"


def platform_facts(profile: DeviceProfile) -> dict[str, Any]:
    """The SGLang platform facts (names of `runtime_context._PLATFORM_PROBES/_VALUES`) for a profile."""
    major, minor = profile.device_capability
    facts: dict[str, Any] = {
        "is_cuda": True,
        "device_capability": (major, minor),
        "device_sm": major * 10 + minor,
        "is_sm90": (major, minor) == (9, 0),
        # SGLang picks fa3 for MHA models on Hopper with CUDA >= 12.3 (every H200 driver stack).
        "is_hopper_with_cuda_12_3": major == 9,
    }
    return facts


@contextlib.contextmanager
def device_profile(profile: DeviceProfile) -> Iterator[list[dict[str, Any]]]:
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups import memory_hook

    facts = platform_facts(profile)
    capacity_mib = profile.total_memory_bytes / MIB_BYTES
    overrides: list[dict[str, Any]] = [
        {"name": f"sglang.srt.runtime_context.override_platform({name})",
         "value": list(value) if isinstance(value, tuple) else value,
         "reason": f"{profile.hardware}: the platform fact SGLang reads on that GPU (this host has no CUDA)"}
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
