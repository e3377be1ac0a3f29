"""RMSNorm variants.

- `ZeroCenteredRMSNorm`: Qwen3.5's target norm, `x / rms(x) * (1 + weight)` computed in float32,
  weight initialised to zeros (transformers' Qwen3_5RMSNorm).
- `RMSNorm`: the plain `x / rms(x) * weight` form (the DFlash drafter's Qwen3 layers).
- `GatedRMSNorm`: Gated-DeltaNet's output norm, `weight * norm(x) * silu(gate)` (Qwen3_5RMSNormGated;
  its weight is used as is, initialised to ones).

On CUDA each runs as one Triton kernel (`fused_norms`, same rounding points); `torch_forward`
is the torch reference.
"""

from __future__ import annotations

import torch
from torch import nn

from engine_under_test.model import fused_norms


def _normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class ZeroCenteredRMSNorm(nn.Module):
    zero_centered = True   # the kernel's form (fused_norms reads it)

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_norms.rms_norm(x, self)

    def torch_forward(self, x: torch.Tensor) -> torch.Tensor:
        return (_normalize(x, self.eps) * (1.0 + self.weight.float())).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_norms.rms_norm(x, self)

    def torch_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * _normalize(x, self.eps).to(x.dtype)


class GatedRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return fused_norms.gated_rms_norm(x, gate, self)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return _normalize(x, self.eps)
