"""Fixed device buffers of a captured decode step, and filling them from the host in ONE copy.

Contract: `MetaBuffers(fields, device)` with `fields` {name: shape} (int64 each) allocates one
device buffer and one pinned host buffer of the summed size; `view(name)` is the device view a
graph captures (a fixed address); `fill({name: array})` writes every field (fields not given
get their `defaults`) into a pinned buffer and copies it to the device asynchronously. The
pinned buffers (`num_host_buffers`, default 2) take turns: a fill writes the one whose copy
was enqueued two fills before, so the caller must have waited for the step of that copy (a
result read) by then. A synchronous caller reads every step's result before the next fill;
a pipelined one (runtime/decode_graphs.py `launch`) launches step n + 1 before it reads step
n, never further ahead.
"""

from __future__ import annotations

import math

import numpy as np
import torch


class MetaBuffers:
    def __init__(self, fields: dict[str, tuple[int, ...]], defaults: dict[str, int], device: torch.device,
                 num_host_buffers: int = 2):
        self.shapes = dict(fields)
        self.offsets: dict[str, int] = {}
        total = 0
        for name, shape in self.shapes.items():
            self.offsets[name] = total
            total += math.prod(shape)
        self.num_elements = total
        self.device_buffer = torch.zeros(total, dtype=torch.long, device=device)
        pinned = device.type == "cuda"
        self.host_buffers = [torch.zeros(total, dtype=torch.long, pin_memory=pinned) for _ in range(num_host_buffers)]
        self._hosts = [b.numpy() for b in self.host_buffers]
        self._turn = 0
        self._defaults = np.zeros(total, dtype=np.int64)
        for name, value in defaults.items():
            self._slice(self._defaults, name)[...] = value
        self._host_views = [{name: self._slice(h, name) for name in self.shapes} for h in self._hosts]   # made once

    def _slice(self, flat: np.ndarray, name: str) -> np.ndarray:
        start = self.offsets[name]
        return flat[start:start + math.prod(self.shapes[name])].reshape(self.shapes[name])

    def view(self, name: str) -> torch.Tensor:
        start = self.offsets[name]
        return self.device_buffer[start:start + math.prod(self.shapes[name])].view(self.shapes[name])

    def fill(self, values: dict[str, np.ndarray]) -> None:
        i = self._turn
        self._turn = (i + 1) % len(self.host_buffers)
        np.copyto(self._hosts[i], self._defaults)
        views = self._host_views[i]
        for name, array in values.items():
            views[name][:array.shape[0]] = array
        self.device_buffer.copy_(self.host_buffers[i], non_blocking=True)
