"""What the machine running a live engine is, in words (for `device.hardware`)."""

from __future__ import annotations

import os
from pathlib import Path


def visible_device_note() -> str:
    """` [CUDA_VISIBLE_DEVICES=1, GPU-<uuid>]`: which GPU a (pinned) worker ran on, or ''."""
    parts = []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        parts.append(f"CUDA_VISIBLE_DEVICES={visible}")
    try:
        import torch

        if torch.cuda.is_available():
            uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
            if uuid is not None:
                parts.append(f"GPU-{uuid}")
    except ImportError:
        pass
    return f" [{', '.join(parts)}]" if parts else ""


def describe(device: str) -> str:
    """`one NVIDIA H200 (139.8 GiB) [CUDA_VISIBLE_DEVICES=1, GPU-<uuid>]` on cuda; `CPU: <model> (N cores)`
    otherwise."""
    if device == "cuda":
        try:
            import torch

            if torch.cuda.is_available():
                n = torch.cuda.device_count()
                props = torch.cuda.get_device_properties(0)
                count = "one" if n == 1 else str(n)
                return f"{count} {props.name} ({props.total_memory / 2**30:.1f} GiB){visible_device_note()}"
        except ImportError:
            pass
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {model} ({os.cpu_count()} cores)"


def describe_with_versions(device: str) -> str:
    """`describe(device)` with the driver and CUDA versions (NVML) and this process's torch: `one NVIDIA H200
    (139.8 GiB) [...], driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130`. An engine that runs from an oracle
    pack has its own torch: the observation's provenance.environment names it."""
    words = describe(device)
    try:
        import torch

        torch_words = f"torch {torch.__version__}"
        cuda = torch.version.cuda
    except ImportError:
        torch_words, cuda = "no torch", None
    if device != "cuda":
        return f"{words}, {torch_words}"
    driver = "unknown"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - NVML absent: the driver is reported unknown
        pass
    return f"{words}, driver {driver}, CUDA {cuda}, {torch_words}"
