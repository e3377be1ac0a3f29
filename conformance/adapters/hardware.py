"""What the machine running a live engine is, in words (for `device.hardware`)."""

from __future__ import annotations

import os
from pathlib import Path


def describe(device: str) -> str:
    """`one NVIDIA H200 (139.8 GiB)` on cuda; `CPU: <model> (N cores)` otherwise."""
    if device == "cuda":
        try:
            import torch

            if torch.cuda.is_available():
                n = torch.cuda.device_count()
                props = torch.cuda.get_device_properties(0)
                count = "one" if n == 1 else str(n)
                return f"{count} {props.name} ({props.total_memory / 2**30:.1f} GiB)"
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
