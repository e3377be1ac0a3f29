"""The Gated-DeltaNet token mixer of Qwen3.5 (transformers' Qwen3_5GatedDeltaNet, same names).

    mixed, b, a, z = in_proj_qkv(x), in_proj_b(x), in_proj_a(x), in_proj_z(x)
                                           one GEMM (fused_linear.LinearGroup), see below
    qkv = conv1d(mixed)                    causal depthwise conv, SiLU, state in the pool
    beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
    o = gated_delta_rule(q, k, v, g, beta)  (q, k l2-normalised; recurrent state in the pool)
    out = out_proj(norm(o, gate=z))        gated RMSNorm per value head

The four projections are the row blocks [in_proj_qkv; in_proj_b; in_proj_a; in_proj_z] of one
weight (`self.in_proj_qkvbaz`). Up to `max_fused_rows` rows (decode and verify steps, where a
GEMM is bound by reading its weight and each one is a launch) all four are one GEMM and mixed,
b, a, z column views of its product [T, conv_dim + 2 Hv + value_dim], which the conv, the gates,
the CUDA kernels and the gated norm read at that row stride. Above it (prefill chunks) the first
three are one GEMM and z its own, after the kernels, so z is not alive at their peak (the
activation plan's).

State lives in pool blocks: conv [num_blocks, conv_dim, >= K-1] (the first K-1 rows hold the
last K-1 conv inputs) and ssm [num_blocks, Hv, Dv, Dk] (the pool's, vLLM's, layout; used here
through a transposed view as [Hv, Dk, Dv]); one block is one state slot (see ForwardBatch).
On CUDA (backend "fla") a pass that snapshots several positions runs two kernels that read
and write the conv and SSM slots in place (gdn_conv_kernel.py, gdn_snapshots.py); other passes
(prompt chunks) run the conv as two kernels that read the conv slots and write q, k, v and the
saved conv states (gdn_prefill_conv_kernel.py), gather the SSM state, run fla's chunked rule and
write the saved states back; off CUDA, the torch conv (the reference the kernels are checked
against). A ragged group (prompt chunks of several lengths padded to the longest,
`ForwardBatch.groups`) gives its pad rows a gate and a step size of 0, so the recurrent state
after the last pad row is the state after the sequence's last input, and reads each sequence's
conv state at its own last input.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from engine_under_test.model.forward_batch import ForwardBatch, LayerCache, device_tensor
from engine_under_test.model.fused_linear import LinearGroup
from engine_under_test.model.gated_delta_net import CHUNK_MIN_TOKENS, causal_conv1d, gated_delta_rule, varlen_packing
from engine_under_test.model.model_config import TargetModelConfig
from engine_under_test.model.norm import GatedRMSNorm


class GatedDeltaNet(nn.Module):
    max_fused_rows = 1024          # rows of x up to which z is part of the input projections' GEMM

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
        self.in_proj_qkvbaz = LinearGroup(self.in_proj_qkv, self.in_proj_b, self.in_proj_a, self.in_proj_z)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state_cache: LayerCache, backend: str) -> torch.Tensor:
        conv_cache, ssm_pool, gid = state_cache
        ssm_cache = ssm_pool.transpose(-1, -2)                # [N, Hv, Dv, Dk] -> [N, Hv, Dk, Dv]
        conv_rows = conv_cache[:, :, : self.kernel - 1]       # the conv state proper
        mixed, b_raw, a_raw, z = self._in_projections(x)
        g = beta = None           # the gates, computed by torch only for groups off the fused path
        core = torch.empty(x.shape[0], self.num_v_heads, self.head_v_dim, dtype=x.dtype, device=x.device)
        weight = self.conv1d.weight[:, 0, :]
        groups = batch.groups()
        for seqs, qlen in groups:
            slots = state_slots(batch, gid, seqs, qlen)
            if self._snapshot_kernels(x, slots, backend):
                self._fused_snapshots(mixed, a_raw, b_raw, core, batch, gid, seqs, qlen, slots, conv_rows,
                                      ssm_pool, weight)
                continue
            if g is None:
                beta = b_raw.sigmoid()
                g = -self.A_log.float().exp() * F.softplus(a_raw.float() + self.dt_bias)
            G = len(seqs)
            conv_in = batch.gather(mixed, seqs, qlen)
            if len(groups) == 1:      # NOTE: peak memory: the projection dies with the conv's input copy
                mixed = a_raw = b_raw = None        # (the gates are computed: no view of it is left)
            if self._prefill_conv_kernel(x, slots, backend):
                # NOTE: two kernels write q, k, v in place of the torch conv below (gdn_prefill_conv_kernel.py)
                q, k, v = self._kernel_conv(conv_in, batch, gid, seqs, qlen, slots, conv_rows, weight)
                del conv_in
            else:
                conv0 = conv_rows[slots.src]
                if slots.any_fresh:
                    conv0 = torch.where(slots.fresh[:, None, None], 0, conv0)
                # a ragged group's conv states are read at each sequence's own last input (a view per position)
                qkv, conv_states = causal_conv1d(conv_in, conv0, weight, slots.all_states or slots.ragged)
                del conv_in
                _save(conv_rows, conv_states, slots, slots.all_states or slots.ragged)     # conv0 is a copy: safe
                del conv_states           # NOTE: peak memory: a per-position view holds the conv input
                q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
                q = q.reshape(G, qlen, self.num_k_heads, self.head_k_dim).contiguous()
                k = k.reshape(G, qlen, self.num_k_heads, self.head_k_dim).contiguous()
                v = v.reshape(G, qlen, self.num_v_heads, self.head_v_dim).contiguous()
                del qkv
            g_grp, beta_grp = batch.gather(g, seqs, qlen), batch.gather(beta, seqs, qlen)
            if slots.ragged:          # pad rows: gate 0 and step 0 leave the state as it is
                pad = ~batch.real_mask(seqs, qlen)[..., None]
                g_grp, beta_grp = g_grp.masked_fill(pad, 0), beta_grp.masked_fill(pad, 0)
            if slots.all_states and backend == "fla":
                # NOTE: one kernel writes every snapshot into its pool slot (gdn_snapshots.py)
                from engine_under_test.model.gdn_snapshots import gdn_snapshots

                o = gdn_snapshots(q, k, v, g_grp, beta_grp, ssm_pool, slots.src, slots.fresh,
                                  slots.dst_grid, slots.save_grid)
            else:
                ssm0 = ssm_cache[slots.src]
                if slots.any_fresh:
                    ssm0 = torch.where(slots.fresh[:, None, None, None], 0, ssm0)
                chunked = backend != "torch" and not slots.all_states and qlen >= CHUNK_MIN_TOKENS
                packing = batch.memo(("fla_varlen", G, qlen), lambda: varlen_packing(G, qlen, x.device)) \
                    if chunked and G > 1 else None    # the recurrent kernel and one sequence take none
                o, ssm_states = gated_delta_rule(q, k, v, g_grp, beta_grp, ssm0, slots.all_states, backend, packing)
                _save(ssm_cache, ssm_states, slots, slots.all_states)
            batch.scatter_(core, o.reshape(G * qlen, self.num_v_heads, self.head_v_dim).to(x.dtype), seqs, qlen)
        if z is None:                                         # projected late: not alive at the kernels' peak
            z = self.in_proj_qkvbaz(x, members=slice(3, 4))[0] if self.in_proj_qkvbaz.fused else self.in_proj_z(x)
        out = self.norm(core, z.view(-1, self.num_v_heads, self.head_v_dim))
        return self.out_proj(out.reshape(x.shape[0], -1))

    def _in_projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(mixed [T, conv_dim], b [T, Hv], a [T, Hv], z [T, value_dim] or None): column views of one
        GEMM while fused (z among them up to `max_fused_rows` rows, else None: projected after the
        kernels), else one GEMM per projection (the reference the fused path is checked against)."""
        group = self.in_proj_qkvbaz
        if not group.fused:
            return self.in_proj_qkv(x), self.in_proj_b(x), self.in_proj_a(x), None
        if x.shape[0] <= self.max_fused_rows:
            return group(x)
        return (*group(x, members=slice(0, 3)), None)

    def _snapshot_kernels(self, x: torch.Tensor, slots: StateSlots, backend: str) -> bool:
        """Whether a group runs `_fused_snapshots`: a snapshotting pass, backend fla on CUDA, width 4."""
        return slots.all_states and backend == "fla" and x.is_cuda and self.kernel == 4

    def _prefill_conv_kernel(self, x: torch.Tensor, slots: StateSlots, backend: str) -> bool:
        """Whether a group runs its conv through `_kernel_conv`: a pass saving one state per sequence
        (prompt chunks), backend fla on CUDA, width 4."""
        return not slots.all_states and backend == "fla" and x.is_cuda and self.kernel == 4

    def _kernel_conv(self, conv_in, batch, gid, seqs, qlen, slots, conv_rows,
                     weight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The conv of a pass that does not snapshot every position, in two Triton kernels
        (gdn_prefill_conv_kernel.py): q, k, v [G, L, H, D] as contiguous views of one buffer,
        the same values as the torch path's, and each saved position's conv state (a ragged
        group's at each sequence's own last input) written into its pool slot. The slot tensors
        are converted to the kernels' index types once per pass."""
        from engine_under_test.model.gdn_prefill_conv_kernel import conv_prefill

        src, fresh, save_seq, save_pos, save_dst = batch.memo(("prefill_conv_slots", gid, tuple(seqs), qlen), lambda: (
            slots.src.to(torch.int64).contiguous(), slots.fresh.to(torch.int32).contiguous(),
            slots.save_seq.to(torch.int64).contiguous(), slots.save_pos.to(torch.int64).contiguous(),
            slots.save_dst.to(torch.int64).contiguous()))
        return conv_prefill(conv_in, weight, conv_rows, src, fresh, save_seq, save_pos, save_dst,
                            self.num_k_heads, self.head_k_dim, self.num_v_heads, self.head_v_dim)

    def _fused_snapshots(self, mixed, a_raw, b_raw, core, batch, gid, seqs, qlen, slots, conv_rows, ssm_pool,
                         weight) -> None:
        """A snapshotting pass on CUDA in two kernels: conv + SiLU with the conv states written
        into their slots (gdn_conv_kernel.py), then the gated delta rule reading q, k and v as
        column views of the conv output and computing the gates from the raw a / b projections
        (gdn_snapshots.py), written into `core` in place when the group is the whole pass.
        `mixed`, `b_raw` and `a_raw` are column views of one projection (row stride conv_dim +
        2 Hv): the conv kernel takes x's row strides, and a and b share the one gate stride
        the snapshot kernel takes (a gathered group is a contiguous copy of each, stride Hv).
        The slot tensors are converted to the kernels' index types once per pass. With
        `slots.deferred` (a captured verify pass) no conv or SSM state is written: the kernels
        keep their inputs and the layer records itself for the commit (model/deferred_states.py)."""
        from engine_under_test.model.gdn_conv_kernel import conv_snapshots
        from engine_under_test.model.gdn_snapshots import gdn_snapshots

        G = len(seqs)
        src, fresh, dst, save = batch.memo(("kernel_slots", gid, tuple(seqs), qlen), lambda: (
            slots.src.to(torch.int64).contiguous(), slots.fresh.to(torch.int32).contiguous(),
            slots.dst_grid.to(torch.int64).contiguous(), slots.save_grid.to(torch.int32).contiguous()))
        keep = None
        if slots.deferred is not None:      # no state written here: the commit writes the accepted one
            keep = slots.deferred.keep(G, qlen, self.num_k_heads, self.head_k_dim, self.num_v_heads,
                                       self.head_v_dim, mixed.dtype, mixed.device, conv_dim=self.conv_dim)
        qkv = conv_snapshots(batch.gather(mixed, seqs, qlen), weight, conv_rows, src, fresh, dst, save,
                             keep_x=None if keep is None else keep.x)
        q = qkv[..., :self.key_dim].unflatten(-1, (self.num_k_heads, self.head_k_dim))
        k = qkv[..., self.key_dim:2 * self.key_dim].unflatten(-1, (self.num_k_heads, self.head_k_dim))
        v = qkv[..., 2 * self.key_dim:].unflatten(-1, (self.num_v_heads, self.head_v_dim))
        whole = batch.covers_all(seqs, qlen)
        o = gdn_snapshots(q, k, v, batch.gather(a_raw, seqs, qlen), batch.gather(b_raw, seqs, qlen), ssm_pool,
                          src, fresh, dst, save, gates=(self.A_log, self.dt_bias),
                          out=core.view(G, qlen, self.num_v_heads, self.head_v_dim) if whole else None, keep=keep)
        if keep is not None:
            slots.deferred.record(keep, ssm_pool, conv_rows, src, fresh, dst)
        if not whole:
            batch.scatter_(core, o.reshape(G * qlen, self.num_v_heads, self.head_v_dim), seqs, qlen)


class StateSlots(NamedTuple):
    """One group's state slots in one state group, as device tensors (built once per pass)."""

    src: torch.Tensor                 # [G] block read as the initial state
    fresh: torch.Tensor               # [G] bool: start from zeros instead
    any_fresh: bool
    all_states: bool                  # some position other than the last is saved
    save_seq: torch.Tensor            # [S] (sequence in group, position, destination block)
    save_pos: torch.Tensor            # [S]   of every saved state
    save_dst: torch.Tensor            # [S]
    dst_grid: torch.Tensor | None     # [G, L] destination per position (all_states only)
    save_grid: torch.Tensor | None    # [G, L] bool: the position is saved
    ragged: bool = False              # sequences shorter than L, padded (ForwardBatch.is_ragged)
    # a captured verify pass: the snapshot kernels write no state, DeferredStates.commit writes
    # the accepted one (model/deferred_states.py); the torch path ignores it and saves as above
    deferred: Any = None


def state_slots(batch: ForwardBatch, gid: int, seqs: list[int], qlen: int) -> StateSlots:
    def build() -> StateSlots:
        device = batch.positions.device
        rows = [(gi, pos, slot) for gi, b in enumerate(seqs)
                for pos, slot in zip(batch.state_save_positions[b], batch.state_save_slots[gid][b])]
        # NOTE: a pass saving more than the last position's state snapshots every position
        all_states = (any(pos != batch.query_len(seqs[gi]) - 1 for gi, pos, _ in rows)
                      or len(rows) > len({r[0] for r in rows}))
        fresh = [batch.state_fresh[b] for b in seqs]
        save = device_tensor([[r[i] for r in rows] for i in range(3)], device) if rows else \
            torch.empty(3, 0, dtype=torch.long, device=device)
        dst_grid = save_grid = None
        if all_states:
            dst = [[0] * qlen for _ in seqs]
            flag = [[0] * qlen for _ in seqs]
            for gi, pos, slot in rows:
                dst[gi][pos], flag[gi][pos] = slot, 1
            dst_grid, save_grid = device_tensor(dst, device), device_tensor(flag, device, torch.int32)
        return StateSlots(src=device_tensor([batch.state_in_slots[gid][b] for b in seqs], device),
                          fresh=device_tensor(fresh, device, torch.bool), any_fresh=any(fresh),
                          all_states=all_states, save_seq=save[0], save_pos=save[1], save_dst=save[2],
                          dst_grid=dst_grid, save_grid=save_grid, ragged=batch.is_ragged(seqs, qlen))
    return batch.memo(("state_slots", gid, tuple(seqs), qlen), build)


def _save(cache: torch.Tensor, states: torch.Tensor, slots: StateSlots, per_position: bool) -> None:
    """Write the saved positions' states ([G, L, ...] if per_position else [G, ...], the state
    after the last row) into `cache`."""
    if slots.save_dst.numel() == 0:
        return
    picked = states[slots.save_seq, slots.save_pos] if per_position else states[slots.save_seq]
    cache.index_copy_(0, slots.save_dst, picked.to(cache.dtype))
