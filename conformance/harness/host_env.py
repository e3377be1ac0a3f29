"""The GPU host's environment, for a live observation's provenance, without importing torch here.

Contract: `nvml_environment()` reads the driver version, the CUDA version the driver supports and each
card (name, memory_total_bytes, uuid) from NVML (pynvml), and says why not when pynvml is absent or NVML
does not start. `engine_torch(pack_dir, python)` is the torch the engine runs: imported in a child
`python` with the pack's site first on PYTHONPATH when a python is given (torch version and its CUDA
runtime), else read from the pack (version only). `host_packages(names, python, site)` is the version
of each package the pack left to the host as that same child finds it (None: the host has none), and
`deviations_as_found(deviations, found)` writes those into the pack's host-package deviations, so a
package the pack assumed the host provides and the host lacks reads "absent" in provenance, not "the
host provides it". `host_environment(...)` puts them together. The framework process never imports
torch here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from packaging.utils import canonicalize_name

from conformance.engines.pack_provenance import read_pack

_TORCH_PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
                "'cuda_runtime': torch.version.cuda}))")
TORCH_PROBE_TIMEOUT_S = 300


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(nvml_int: int) -> str:
    """NVML's CUDA version integer as text: 13000 -> '13.0', 12080 -> '12.8'."""
    return f"{nvml_int // 1000}.{nvml_int % 1000 // 10}"


def nvml_environment() -> dict:
    """{available, driver_version, cuda_driver_version, cards: [...]} or {available: False, why}."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "why": "pynvml is not importable (install nvidia-ml-py on the GPU host)"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its subclasses: no driver, no device
        return {"available": False, "why": f"NVML did not start: {exc}"}
    try:
        cards = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            cards.append({"index": i, "name": _text(pynvml.nvmlDeviceGetName(h)),
                          "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                          "uuid": _text(pynvml.nvmlDeviceGetUUID(h))})
        return {"available": True, "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion_v2())),
                "cards": cards}
    except Exception as exc:
        return {"available": False, "why": f"NVML query failed: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _torch_from_pack(doc: dict) -> dict:
    for p in doc["packages"]:
        if canonicalize_name(p["name"]) == "torch":
            return {"torch": p["version"], "cuda_runtime": None, "source": "oracle-pack.json (packed)"}
    for p in doc["left_out"]:
        if canonicalize_name(p.get("name", "")) == "torch" and p.get("host_version"):
            return {"torch": p["host_version"], "cuda_runtime": None, "source": "oracle-pack.json (the host's)"}
    return {"torch": None, "cuda_runtime": None, "source": "oracle-pack.json (no torch in it)"}


def engine_torch(pack_dir: Path | str | None = None, python: str | None = None, site: Path | str | None = None) -> dict:
    """{torch, cuda_runtime, source}: run `python` with `site` (default `<pack_dir>/site`) first on PYTHONPATH
    when a python is given; else read the pack."""
    if python is None:
        if pack_dir is None:
            return {"torch": None, "cuda_runtime": None, "source": "neither a pack nor a python given"}
        return _torch_from_pack(read_pack(pack_dir))
    site_dir = Path(site) if site is not None else (Path(pack_dir) / "site" if pack_dir is not None else None)
    env = _child_env(site_dir)
    source = f"imported by {python}" + (f" with {site_dir} first on PYTHONPATH" if site_dir is not None else "")
    try:
        out = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, env=env,
                             timeout=TORCH_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"torch": None, "cuda_runtime": None, "source": source, "why": str(exc)}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"torch": None, "cuda_runtime": None, "source": source, "why": f"import torch failed: {tail}"}
    try:
        got = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"torch": None, "cuda_runtime": None, "source": source, "why": f"unreadable: {out.stdout[-200:]!r}"}
    return {"torch": got["torch"], "cuda_runtime": got["cuda_runtime"], "source": source}


_PACKAGES_PROBE = ("import json, sys\nfrom importlib import metadata\nfound = {}\nfor name in sys.argv[1:]:\n"
                   "    try:\n        found[name] = metadata.version(name)\n"
                   "    except metadata.PackageNotFoundError:\n        found[name] = None\nprint(json.dumps(found))")
ABSENT = "absent: the engine's python finds no such package"


def _child_env(site_dir: Path | None) -> dict:
    env = dict(os.environ)
    if site_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site_dir)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def host_packages(names: list[str], python: str, site: Path | str | None = None) -> dict:
    """{found: {name: version or None}, source} as `python` (with `site` first on PYTHONPATH) finds each
    package, or {found: {}, source, why} when the child cannot say."""
    site_dir = Path(site) if site is not None else None
    source = f"importlib.metadata in {python}" + (f" with {site_dir} first on PYTHONPATH" if site_dir else "")
    if not names:
        return {"found": {}, "source": source}
    try:
        out = subprocess.run([python, "-c", _PACKAGES_PROBE, *names], capture_output=True, text=True,
                             env=_child_env(site_dir), timeout=TORCH_PROBE_TIMEOUT_S, check=False)
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError) as exc:
        return {"found": {}, "source": source, "why": str(exc)}
    if not isinstance(found, dict):
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"found": {}, "source": source, "why": f"the probe failed: {tail}"}
    return {"found": found, "source": source}


def deviations_as_found(deviations: list[dict], found: dict[str, str | None]) -> list[dict]:
    """The pack's deviations with each host package's `host_version` as the engine's python found it
    (`ABSENT` when it found none); the others, and packages it was not asked about, unchanged."""
    out = []
    for d in deviations:
        if d.get("kind") == "host_package" and d.get("name") in found:
            d = {**d, "host_version": found[d["name"]] or ABSENT}
        out.append(d)
    return out


def host_environment(pack_dir: Path | str | None = None, python: str | None = None,
                     site: Path | str | None = None) -> dict:
    """{nvml: nvml_environment(), engine_torch: engine_torch(...)} for provenance, and with a pack and a
    python, host_packages: what that python finds of the packages the pack left to the host."""
    env = {"nvml": nvml_environment(), "engine_torch": engine_torch(pack_dir, python, site)}
    if pack_dir is not None and python is not None:
        names = [d["name"] for d in read_pack(pack_dir)["deviations"] if d.get("kind") == "host_package"]
        env["host_packages"] = host_packages(names, python, site if site is not None else Path(pack_dir) / "site")
    return env
