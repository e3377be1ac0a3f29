"""Fixed device buffers of a captured decode step, and filling them from the host in ONE copy.

Contract: `MetaBuffers(fields, device)` with `fields` {name: shape} (int64 each) allocates one
device buffer and one pinned host buffer of the summed size; `view(name)` is the device view a
graph captures (a fixed address); `fill({name: array})` writes every field (fields not given
get their `defaults`) into the pinned buffer and copies it to the device asynchronously. The
caller reads a result of the step (a sync) before the next `fill`, so the pinned buffer is
never overwritten while its copy is in flight.
"""

from __future__ import annotations

import math

import numpy as np
import torch


class MetaBuffers:
    def __init__(self, fields: dict[str, tuple[int, ...]], defaults: dict[str, int], device: torch.device):
        self.shapes = dict(fields)
        self.offsets: dict[str, int] = {}
        total = 0
        for name, shape in self.shapes.items():
            self.offsets[name] = total
            total += math.prod(shape)
        self.num_elements = total
        self.device_buffer = torch.zeros(total, dtype=torch.long, device=device)
        pinned = device.type == "cuda"
        self.host_buffer = torch.zeros(total, dtype=torch.long, pin_memory=pinned)
        self._host = self.host_buffer.numpy()
        self._defaults = np.zeros(total, dtype=np.int64)
        for name, value in defaults.items():
            self._slice(self._defaults, name)[...] = value
        self._host_views = {name: self._slice(self._host, name) for name in self.shapes}   # made once

    def _slice(self, flat: np.ndarray, name: str) -> np.ndarray:
        start = self.offsets[name]
        return flat[start:start + math.prod(self.shapes[name])].reshape(self.shapes[name])

    def view(self, name: str) -> torch.Tensor:
        start = self.offsets[name]
        return self.device_buffer[start:start + math.prod(self.shapes[name])].view(self.shapes[name])

    def fill(self, values: dict[str, np.ndarray]) -> None:
        np.copyto(self._host, self._defaults)
        views = self._host_views
        for name, array in values.items():
            views[name][:array.shape[0]] = array
        self.device_buffer.copy_(self.host_buffer, non_blocking=True)
