"""SwiGLU MLP: down_proj(silu(gate_proj(x)) * up_proj(x)).

gate_proj and up_proj are the row blocks [gate_proj; up_proj] of one weight (`self.gate_up_proj`,
fused_linear.LinearGroup). Up to `max_fused_rows` rows (decode and verify steps, where the
GEMMs are bound by reading the weight) they are one GEMM and gate, up are column views of its
[T, 2 I] product; SiLU and the product are taken in place in the gate's columns (one kernel on
CUDA, fused_gates.silu_mul), so the product lives through down_proj whole. Above it (prefill
chunks) they are two GEMMs over the same rows, as before fusion, and the same silu_mul writes
into gate's product: up's product dies at the multiplication, and the peak stays the activation
plan's (memory.planner.activation_bytes: 2 I + 2 hidden per token; the fused product would add
T x hidden during down_proj).
"""

from __future__ import annotations

import torch
from torch import nn

from engine_under_test.model.fused_gates import silu_mul
from engine_under_test.model.fused_linear import LinearGroup


class SwiGLUMLP(nn.Module):
    max_fused_rows = 1024          # rows of x up to which gate and up are one GEMM

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up_proj = LinearGroup(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]."""
        if not self.gate_up_proj.fused or x.shape[0] > self.max_fused_rows:
            # in gate's product: one intermediate fewer, one kernel on CUDA (torch's SiLU then a product: two)
            return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))
        gate, up = self.gate_up_proj(x)                          # column views of one product
        return self.down_proj(silu_mul(gate, up))                # in gate's columns (one kernel on CUDA)
