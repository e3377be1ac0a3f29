"""The recurrent-state writes of a captured verify pass, put off until the accepted length is known.

A verify pass feeds L = 1 + k tokens per sequence; of the L states after them only the one
after the accepted prefix (position m) is read again. A pass run with a `DeferredStates` in
its state slots (linear_attention.StateSlots.deferred) writes no recurrent state: each
Gated-DeltaNet layer on the snapshot kernels keeps its conv inputs, k, v and gates in a
`KeptInputs` and records itself here; `commit(accepted)` then writes each layer's conv and SSM
states after position m (model/gdn_conv_kernel.py `conv_commit`, model/gdn_snapshots.py
`gdn_commit`). Layers off those kernels (the torch path: the CPU, other
backends) save every position as before and record nothing, so `commit` has nothing to do for
them.

Contract: `begin()` at the start of every pass (forgets the previous pass's records);
`keep(...)` returns the next layer's buffers, allocated once at `max_num_seqs` rows and reused
by every later pass (fixed addresses: a CUDA graph captures them); `commit(accepted)` after
the pass, on the same stream, with accepted [>= N] on the device. Buffers allocated while a
graph is captured come from its pool; the capture warms up at the largest size first, so they
are allocated outside it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from engine_under_test.model.kept_inputs import KeptInputs


class _Pass(NamedTuple):
    keep: KeptInputs
    ssm_pool: torch.Tensor
    conv_rows: torch.Tensor | None
    src: torch.Tensor
    fresh: torch.Tensor
    dst: torch.Tensor


class DeferredStates:
    def __init__(self, max_num_seqs: int):
        self.max_num_seqs = max_num_seqs
        self._buffers: list[KeptInputs] = []
        self._passes: list[_Pass] = []

    def begin(self) -> None:
        self._passes = []

    @property
    def num_layers(self) -> int:
        """Layers the last pass deferred."""
        return len(self._passes)

    @property
    def num_bytes(self) -> int:
        return sum(b.num_bytes for b in self._buffers)

    def keep(self, N: int, L: int, H: int, K: int, HV: int, V: int, dtype: torch.dtype,
             device: torch.device, conv_dim: int = 0) -> KeptInputs:
        if N > self.max_num_seqs:
            raise ValueError(f"deferred states: a pass of {N} sequences, buffers for {self.max_num_seqs}")
        i = len(self._passes)
        if i == len(self._buffers):
            self._buffers.append(KeptInputs.empty(self.max_num_seqs, L, H, K, HV, V, dtype, device, conv_dim))
        buf = self._buffers[i]
        if not buf.fits(self.max_num_seqs, L, H, K, HV, V, dtype, conv_dim):
            raise ValueError(f"deferred states: layer {i} of this pass does not fit the buffers of the first "
                             f"(k {tuple(buf.k.shape[1:])} {buf.k.dtype}, v {tuple(buf.v.shape[1:])})")
        return buf.view(N)

    def record(self, keep: KeptInputs, ssm_pool: torch.Tensor, conv_rows: torch.Tensor | None, src: torch.Tensor,
               fresh: torch.Tensor, dst: torch.Tensor) -> None:
        """One deferred layer: its pools (the conv rows [blocks, C, >= 3] when keep.x is kept)
        and the pass's slots (src, fresh [N], dst [N, L])."""
        self._passes.append(_Pass(keep, ssm_pool, conv_rows, src, fresh, dst))

    def commit(self, accepted: torch.Tensor) -> None:
        """Write every deferred layer's states after position accepted[n] (n < the pass's N)."""
        if not self._passes:
            return
        from engine_under_test.model.gdn_conv_kernel import conv_commit
        from engine_under_test.model.gdn_snapshots import gdn_commit

        for p in self._passes:
            m = accepted[:p.keep.k.shape[0]]
            if p.keep.x is not None:
                conv_commit(p.keep.x, p.conv_rows, p.src, p.fresh, p.dst, m)
            gdn_commit(p.keep, p.ssm_pool, p.src, p.fresh, p.dst, m)
