"""Rotary position embedding, neox layout (rotate_half), over the first `rotary_dim` of each head.

Qwen3.5's text rope is mrope with all three position streams equal for text, which reduces to
this plain rope over `head_dim * partial_rotary_factor` dims; the rest of the head passes through.
"""

from __future__ import annotations

import torch


class RotaryEmbedding:
    def __init__(self, rotary_dim: int, theta: float):
        self.rotary_dim = rotary_dim
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float, device="cpu") / rotary_dim))
        self._inv_freq_on: dict[torch.device, torch.Tensor] = {}     # one copy per device, made once

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """[T] positions -> cos, sin each [T, rotary_dim]."""
        inv_freq = self._inv_freq_on.get(positions.device)
        if inv_freq is None:
            inv_freq = self._inv_freq_on.setdefault(positions.device, self.inv_freq.to(positions.device))
        freqs = positions.float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, heads, head_dim] -> rotated copy."""
        r = self.rotary_dim
        x_rot, x_pass = x[..., :r], x[..., r:]
        half = r // 2
        rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
        x_rot = x_rot * cos[:, None, :] + rotated * sin[:, None, :]
        return torch.cat((x_rot, x_pass), dim=-1)
