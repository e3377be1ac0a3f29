"""The Gated-DeltaNet token mixer of Qwen3.5 (transformers' Qwen3_5GatedDeltaNet, same names).

    qkv = conv1d(in_proj_qkv(x))          causal depthwise conv, SiLU, state in the pool
    z = in_proj_z(x); b = in_proj_b(x); a = in_proj_a(x)
    beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
    o = gated_delta_rule(q, k, v, g, beta)  (q, k l2-normalised; recurrent state in the pool)
    out = out_proj(norm(o, gate=z))        gated RMSNorm per value head

State lives in pool blocks: conv [num_blocks, conv_dim, >= K-1] (the first K-1 rows hold the
last K-1 conv inputs) and ssm [num_blocks, Hv, Dv, Dk] (the pool's, vLLM's, layout; used here
through a transposed view as [Hv, Dk, Dv]); one block is one state slot (see ForwardBatch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine_under_test.model.forward_batch import ForwardBatch, LayerCache
from engine_under_test.model.gated_delta_net import causal_conv1d, gated_delta_rule
from engine_under_test.model.model_config import TargetModelConfig
from engine_under_test.model.norm import GatedRMSNorm


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: TargetModelConfig):
        super().__init__()
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = cfg.conv_dim
        self.kernel = cfg.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim,
                                padding=self.kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, cfg.hidden_size, bias=False)
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(cfg.hidden_size, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(cfg.hidden_size, self.num_v_heads, bias=False)

    def _initial_state(self, batch: ForwardBatch, seqs: list[int], conv_cache: torch.Tensor,
                       ssm_cache: torch.Tensor, gid: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots = torch.tensor([batch.state_in_slots[gid][b] for b in seqs], device=conv_cache.device)
        fresh = torch.tensor([batch.state_fresh[b] for b in seqs], device=conv_cache.device)
        conv = conv_cache[slots][:, :, : self.kernel - 1].clone()
        ssm = ssm_cache[slots].clone()
        conv[fresh] = 0
        ssm[fresh] = 0
        return conv, ssm

    def _save_states(self, batch: ForwardBatch, seqs: list[int], all_states: bool,
                     conv_states: torch.Tensor, ssm_states: torch.Tensor,
                     conv_cache: torch.Tensor, ssm_cache: torch.Tensor, gid: int) -> None:
        src_rows, slots = [], []
        for gi, b in enumerate(seqs):
            for pos, slot in zip(batch.state_save_positions[b], batch.state_save_slots[gid][b]):
                src_rows.append((gi, pos))
                slots.append(slot)
        if not slots:
            return
        gi = torch.tensor([r[0] for r in src_rows], device=conv_cache.device)
        dst = torch.tensor(slots, device=conv_cache.device)
        if all_states:
            pi = torch.tensor([r[1] for r in src_rows], device=conv_cache.device)
            conv, ssm = conv_states[gi, pi], ssm_states[gi, pi]
        else:
            conv, ssm = conv_states[gi], ssm_states[gi]
        conv_cache[:, :, : self.kernel - 1].index_copy_(0, dst, conv.to(conv_cache.dtype))
        ssm_cache.index_copy_(0, dst, ssm.to(ssm_cache.dtype))

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state_cache: LayerCache, use_fla: bool) -> torch.Tensor:
        conv_cache, gid = state_cache.first, state_cache.group_id
        ssm_cache = state_cache.second.transpose(-1, -2)      # [N, Hv, Dv, Dk] -> [N, Hv, Dk, Dv]
        mixed = self.in_proj_qkv(x)
        z = self.in_proj_z(x)
        beta = self.in_proj_b(x).sigmoid()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        core = torch.empty(x.shape[0], self.num_v_heads, self.head_v_dim, dtype=x.dtype, device=x.device)
        weight = self.conv1d.weight[:, 0, :]
        for seqs, qlen in batch.groups():
            idx = batch.token_index(seqs, qlen)
            # NOTE: a pass saving more than the last position's state snapshots every position
            all_states = any(len(batch.state_save_positions[b]) > 1 or
                             (batch.state_save_positions[b] and batch.state_save_positions[b][0] != qlen - 1)
                             for b in seqs)
            conv0, ssm0 = self._initial_state(batch, seqs, conv_cache, ssm_cache, gid)
            qkv, conv_states = causal_conv1d(mixed[idx], conv0, weight, all_states)
            q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
            G = len(seqs)
            q = q.reshape(G, qlen, self.num_k_heads, self.head_k_dim)
            k = k.reshape(G, qlen, self.num_k_heads, self.head_k_dim)
            v = v.reshape(G, qlen, self.num_v_heads, self.head_v_dim)
            o, ssm_states = gated_delta_rule(q, k, v, g[idx], beta[idx], ssm0, all_states, use_fla)
            core[idx.flatten()] = o.reshape(G * qlen, self.num_v_heads, self.head_v_dim).to(x.dtype)
            self._save_states(batch, seqs, all_states, conv_states, ssm_states, conv_cache, ssm_cache, gid)
        out = self.norm(core, z.view(-1, self.num_v_heads, self.head_v_dim))
        return self.out_proj(out.reshape(x.shape[0], -1))
