"""One pytest-xdist worker per GPU: pin each worker to its own device through CUDA_VISIBLE_DEVICES.

Contract: `device_for_worker(worker_id, visible)` maps worker `gwN` to the N-th entry of the GPUs
visible to the controller (`CUDA_VISIBLE_DEVICES`, or `0..count-1`), and refuses (ValueError) when
there are more workers than GPUs, so that two cases never share a device silently. The plugin
applies it in each worker before anything initialises CUDA.
"""

from __future__ import annotations

import re

_WORKER = re.compile(r"^gw(\d+)$")


def visible_gpus(cuda_visible_devices: str | None, device_count: int) -> list[str]:
    """The GPU ids this process may use, in order."""
    if cuda_visible_devices is not None and cuda_visible_devices.strip() != "":
        return [d.strip() for d in cuda_visible_devices.split(",") if d.strip()]
    return [str(i) for i in range(device_count)]


def device_for_worker(worker_id: str, visible: list[str], num_workers: int) -> str:
    m = _WORKER.match(worker_id)
    if not m:
        raise ValueError(f"not an xdist worker id: {worker_id!r}")
    index = int(m.group(1))
    if num_workers > len(visible):
        raise ValueError(f"{num_workers} xdist workers but only {len(visible)} GPU(s) visible ({','.join(visible) or 'none'}):"
                         f" run the gpu suites with -n {max(len(visible), 1)} or fewer")
    return visible[index]


def nvidia_smi_count() -> int:
    """GPUs on this host without initialising CUDA in this process (nvidia-smi -L), 0 when none."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=False)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
