"""What a deferred verification pass keeps of one Gated-DeltaNet layer (model/deferred_states.py),
in buffers the snapshot kernels (model/gdn_snapshots.py) write and the commit kernels read."""

from __future__ import annotations

import torch


class KeptInputs:
    """What a deferred verification pass keeps of one layer: for `gdn_commit` k [N, L, Hk, Dk]
    and v [N, L, Hv, Dv] in the model dtype, as the kernel loaded them, and the gates g, beta
    [N, L, Hv] in float32, as it computed them; for `conv_commit` the conv inputs x [N, L, C]
    in the model dtype (None when only the SSM state is deferred). `view(N)` is the first N
    sequences' rows."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 x: torch.Tensor | None = None):
        self.k, self.v, self.g, self.beta, self.x = k, v, g, beta, x

    @classmethod
    def empty(cls, num_seqs: int, L: int, H: int, K: int, HV: int, V: int, dtype: torch.dtype,
              device: torch.device, conv_dim: int = 0) -> "KeptInputs":
        return cls(torch.empty(num_seqs, L, H, K, dtype=dtype, device=device),
                   torch.empty(num_seqs, L, HV, V, dtype=dtype, device=device),
                   torch.empty(num_seqs, L, HV, dtype=torch.float32, device=device),
                   torch.empty(num_seqs, L, HV, dtype=torch.float32, device=device),
                   torch.empty(num_seqs, L, conv_dim, dtype=dtype, device=device) if conv_dim else None)

    def _tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.k, self.v, self.g, self.beta, self.x) if t is not None]

    def view(self, num_seqs: int) -> "KeptInputs":
        return KeptInputs(*(None if t is None else t[:num_seqs] for t in (self.k, self.v, self.g, self.beta, self.x)))

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def fits(self, N: int, L: int, H: int, K: int, HV: int, V: int, dtype: torch.dtype, conv_dim: int = 0) -> bool:
        x_shape = None if self.x is None else tuple(self.x.shape)
        return (tuple(self.k.shape), tuple(self.v.shape), tuple(self.g.shape), self.k.dtype, x_shape) == \
            ((N, L, H, K), (N, L, HV, V), (N, L, HV), dtype, (N, L, conv_dim) if conv_dim else None)
