"""Device profiles: the facts of a GPU that plan mode emulates on a CPU.

A profile is data: the facts a GPU host would report (compute capability, memory, SM count,
whether memory is unified with the host) and the GPU defaults an oracle takes on it. It names
no engine's choice: which attention backend, which GDN prefill kernel, which block sizes follow
is decided by each oracle's own selection code under the faked facts (see the adapters'
`platform` modules), and each decision lands in the observation's provenance.

An adapter that cannot emulate a profile for its engine refuses the case with a message (a
`refused` observation with `refusal.by: adapter`), never an error.
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
    unified_memory: bool             # device memory is the host's (GB10): no separate HBM
    async_scheduling: bool           # vLLM's GPU default for DFlash here (CpuPlatform forces it off)

    @property
    def device_sm(self) -> int:
        major, minor = self.device_capability
        return major * 10 + minor

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["device_capability"] = list(self.device_capability)
        return d


GIB = 1 << 30

H200 = DeviceProfile(
    name="h200",
    hardware="one NVIDIA H200 (SM90, 139.8 GiB)",
    total_memory_bytes=150_109_880_320,  # 139.8 GiB as torch reports it on one H200
    device_capability=(9, 0),
    num_sms=132,
    unified_memory=False,
    async_scheduling=True,
)

H100 = DeviceProfile(
    name="h100",
    hardware="one NVIDIA H100 SXM 80GB (SM90, 79.2 GiB)",
    total_memory_bytes=85_029_158_912,   # 79.19 GiB as torch reports it on one H100 80GB HBM3
    device_capability=(9, 0),
    num_sms=132,
    unified_memory=False,
    async_scheduling=True,
)

B200 = DeviceProfile(
    name="b200",
    hardware="one NVIDIA B200 (SM100, 178.4 GiB)",
    total_memory_bytes=191_514_640_384,  # 178.36 GiB as torch reports it on one B200
    device_capability=(10, 0),
    num_sms=148,
    unified_memory=False,
    async_scheduling=True,
)

GB10 = DeviceProfile(
    name="gb10",
    hardware="one NVIDIA GB10 (DGX Spark, SM121, 119.7 GiB unified with the host)",
    total_memory_bytes=128_526_278_656,  # 119.7 GiB: the unified LPDDR5X as torch reports it
    device_capability=(12, 1),
    num_sms=48,
    unified_memory=True,
    async_scheduling=True,
)

PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (H200, H100, B200, GB10)}


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
