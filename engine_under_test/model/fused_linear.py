"""Projections that read one input, computed as one GEMM over one weight tensor.

At a decode step's few rows a projection GEMM is bound by reading its weight, and each one is
a launch; so the bias-free projections a layer applies to the same input run together:

    W = [W_1; W_2; ...]                  one [sum of out_i, in] tensor, members' rows in order
    y = x W^T                            one GEMM
    y_i = y[..., o_i : o_i + out_i]      column views, one per member (o_i = out_1 + .. + out_{i-1})

`LinearGroup(m_1, m_2, ...)` re-points each member `nn.Linear`'s weight to its row block of W
(values kept, the old storage freed): the members keep their parameters, names and state_dict
entries, a checkpoint written in place (`copy_`, as `weights._load_into` and `init_random_` do)
lands in W, and the weight bytes are those of the members. Contract:

- `group(x)` -> the members' outputs: column views of one product while fused, the members' own
  products after `unfuse()` (the reference the fused path is checked against); `fuse()` again;
- `group(x, members=slice(i, j))` -> members i..j-1 only, one GEMM over their adjacent rows;
- a member whose weight was replaced instead of written in place (`module.to(another dtype)`, an
  assignment) is fused again on the next call, so W never serves stale values.

`linear_groups(module)` lists the groups a model holds; `set_fused(module, on)` switches all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LinearGroup:
    """Bias-free nn.Linear members of one in_features, dtype and device; fused on construction."""

    def __init__(self, *members: nn.Linear):
        if len(members) < 2:
            raise ValueError("LinearGroup: at least two members")
        for m in members:
            if m.bias is not None or m.in_features != members[0].in_features:
                raise ValueError(f"LinearGroup: members must be bias-free with in_features "
                                 f"{members[0].in_features}, got {m}")
        self.members = members
        self.sizes = tuple(m.out_features for m in members)
        self.weight: torch.Tensor | None = None
        self.fuse()

    @property
    def fused(self) -> bool:
        return self.weight is not None

    def fuse(self) -> None:
        """One [sum out, in] weight whose row blocks are the members' weights (values kept)."""
        with torch.inference_mode(False), torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in self.members])
            for m, rows in zip(self.members, weight.split(self.sizes)):
                m.weight.data = rows
        self.weight = weight

    def unfuse(self) -> None:
        """Each member its own weight storage again (a copy of its rows); calls then run one GEMM each."""
        with torch.inference_mode(False), torch.no_grad():
            for m in self.members:
                m.weight.data = m.weight.detach().clone()
        self.weight = None

    def __call__(self, x: torch.Tensor, members: slice = slice(None)) -> tuple[torch.Tensor, ...]:
        """x [.., in] -> (y_i [.., out_i] for the members in `members`, a contiguous slice)."""
        chosen = range(len(self.members))[members]
        if chosen.step != 1:
            raise ValueError(f"LinearGroup: members must be a contiguous slice, got {members}")
        if self.weight is None:
            return tuple(self.members[i](x) for i in chosen)
        if not self._is_current():
            self.fuse()
        start = sum(self.sizes[:chosen.start])
        stop = start + sum(self.sizes[i] for i in chosen)
        weight = self.weight if (start, stop) == (0, self.weight.shape[0]) else self.weight[start:stop]
        return F.linear(x, weight).split([self.sizes[i] for i in chosen], dim=-1)

    def _is_current(self) -> bool:
        """Every member's weight is still its row block of `self.weight`."""
        w = self.weight
        if w.is_meta:
            return True
        ptr = w.data_ptr()
        for m, n in zip(self.members, self.sizes):
            p = m.weight
            if p.data_ptr() != ptr or p.dtype != w.dtype or p.device != w.device:
                return False
            ptr += n * w.stride(0) * w.element_size()
        return True


def linear_groups(module: nn.Module) -> list[LinearGroup]:
    """Every LinearGroup held by `module` or its submodules (attributes of theirs)."""
    return [g for m in module.modules() for g in vars(m).values() if isinstance(g, LinearGroup)]


def set_fused(module: nn.Module, on: bool) -> None:
    """Fuse (on) or unfuse every group of `module`; the weights' values are unchanged either way."""
    for group in linear_groups(module):
        if on and not group.fused:
            group.fuse()
        elif not on and group.fused:
            group.unfuse()
