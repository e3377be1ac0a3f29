"""Device profiles: the facts of a GPU that plan mode emulates on a CPU.

A profile is data. Each adapter decides how to apply it to its engine (which overrides, which
faked platform facts) and lists every one in the observation's provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Any

from conformance.errors import ConformanceError


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    hardware: str
    total_memory_bytes: int          # what torch.cuda.mem_get_info reports as total on this device
    device_capability: tuple[int, int]
    num_sms: int
    attention_backend: str           # the backend vLLM selects for these shapes on this device
    async_scheduling: bool           # vLLM's GPU default for DFlash (CpuPlatform forces it off)
    gdn_prefill_checkpoint_alignment_tokens: int  # SM90 Gated-DeltaNet prefill checkpoint alignment
    emulate_gdn_prefill_checkpoints: bool          # whether plan mode emulates it (an explicit choice)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["device_capability"] = list(self.device_capability)
        return d


H200 = DeviceProfile(
    name="h200",
    hardware="one NVIDIA H200 (SM90, 139.8 GiB)",
    total_memory_bytes=150_109_880_320,  # 139.8 GiB as torch reports it on one H200
    device_capability=(9, 0),
    num_sms=132,
    attention_backend="FLASH_ATTN",
    async_scheduling=True,
    gdn_prefill_checkpoint_alignment_tokens=64,
    emulate_gdn_prefill_checkpoints=False,
)

PROFILES: dict[str, DeviceProfile] = {H200.name: H200}


def get_profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConformanceError(f"unknown device profile {name!r} (known: {', '.join(PROFILES)})") from None


def bound_bytes(case_spec: dict[str, Any]) -> int:
    """The operator's bound in bytes for a case: kv_cache_bytes, or utilization x device memory."""
    mem = case_spec["memory"]
    if "kv_cache_bytes" in mem:
        return int(mem["kv_cache_bytes"])
    return int(mem["gpu_memory_utilization"] * get_profile(case_spec["device"]).total_memory_bytes)
