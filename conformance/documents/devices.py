"""Device profiles: the facts of a GPU that plan mode emulates on a CPU.

A profile is data, one entry of `devices.yaml` beside this module (a new profile is a new entry
there): the facts a GPU host would report (compute capability, memory, SM count, whether memory is
unified with the host) and the GPU defaults an oracle takes on it. It names
no engine's choice: which attention backend, which GDN prefill kernel, which block sizes follow
is decided by each oracle's own selection code under the faked facts (see the adapters'
`platform` modules), and each decision lands in the observation's provenance.

An adapter that cannot emulate a profile for its engine refuses the case with a message (a
`refused` observation with `refusal.by: adapter`), never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, asdict
from pathlib import Path
from typing import Any

from conformance.documents.yaml_file import read_yaml
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


PROFILES_FILE = Path(__file__).resolve().with_name("devices.yaml")
FIELD_TYPES = {"hardware": str, "total_memory_bytes": int, "device_capability": list, "num_sms": int,
               "unified_memory": bool, "async_scheduling": bool}
ARTICLES = {str: "a", int: "an", list: "a", bool: "a"}


def load_profiles(path: Path = PROFILES_FILE) -> dict[str, DeviceProfile]:
    """The profiles of a devices file by name, in file order; `ConformanceError` naming the file and
    the profile's field when one is missing, unknown or of the wrong type."""
    doc = read_yaml(path, "device profiles file")
    if not isinstance(doc, dict) or not doc:
        raise ConformanceError(f"{path}: (root): a mapping of profile name to its facts")
    out: dict[str, DeviceProfile] = {}
    for name, facts in doc.items():
        if not isinstance(facts, dict):
            raise ConformanceError(f"{path}: {name}: a mapping of the profile's facts")
        problems = [f"{path}: {name}.{k}: unknown field" for k in facts if k not in FIELD_TYPES]
        for k, kind in FIELD_TYPES.items():
            v = facts.get(k)
            if v is None:
                problems.append(f"{path}: {name}.{k}: missing")
            elif not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                problems.append(f"{path}: {name}.{k}: {v!r} is not {ARTICLES[kind]} {kind.__name__}")
        cap = facts.get("device_capability")
        if isinstance(cap, list) and (len(cap) != 2 or not all(type(c) is int for c in cap)):
            problems.append(f"{path}: {name}.device_capability: {cap!r} is not [major, minor]")
        if problems:
            raise ConformanceError("\n".join(problems))
        out[str(name)] = DeviceProfile(name=str(name), **{**facts, "device_capability": tuple(cap)})
    return out


PROFILES: dict[str, DeviceProfile] = load_profiles()


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
