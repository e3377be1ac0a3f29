"""Fused projections (model/fused_linear.py): the projections a layer applies to one input run as
one GEMM over one weight whose row blocks are the members' weights.

- a group's outputs are its members' products (float32, within 1e-6 relative: the same dot
  products), as column views of one product; a member whose weight was replaced is fused again;
- the models hold the groups the layers name (Gated-DeltaNet in_proj_qkv + in_proj_b +
  in_proj_a + in_proj_z; attention q + k + v; MLP gate + up; the drafter's likewise), with
  the same state_dict keys and values, and the same weight bytes (unique storages = parameter
  bytes = the planner's count) as unfused;
- whole runs (chunked prefill, mixed batches, DFlash verification with state snapshots and
  drafting; eager and fixed-shape path) give the unfused run's tokens and hidden states;
- checkpoints load into a fused model (written through the views) and save from one;
- on CUDA, or on a CPU under `TRITON_INTERPRET=1`, the snapshot kernels read the fused column
  views (conv input and raw gates at the fused row stride) as they read separate projections.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine_under_test.config import EngineConfig
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.memory.planner import plan_memory
from engine_under_test.model.forward_batch import ForwardBatch
from engine_under_test.model.fused_linear import LinearGroup, linear_groups, set_fused
from engine_under_test.model.linear_attention import GatedDeltaNet
from engine_under_test.model.mlp import SwiGLUMLP
from engine_under_test.model.model_config import TargetModelConfig
from engine_under_test.model.target import Qwen35Target
from engine_under_test.model.weights import load_drafter, load_target, write_random_checkpoint
from engine_under_test.pool import UnifiedPool
from engine_under_test.runtime.caches import layer_caches
from engine_under_test.shapes import read_draft_shape, read_target_shape

from conformance.paths import MODELS_DIR
from tests.engine_under_test.model.triton_interpreter import interpret_snapshot_kernels

PROJECTION_REL_ERR = 1e-6
# Whole runs: the fused and the separate GEMMs round alike except the tiny in_proj_b / in_proj_a
# products (8 columns), which a CPU BLAS computes with another kernel when alone (one ulp);
# the recurrence carries that to a few 1e-6 after 8 layers and 100 positions.
RUN_REL_ERR = 1e-4


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max())


def _members(seed: int, sizes=(40, 8, 8), in_features=32) -> list[nn.Linear]:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return [nn.Linear(in_features, n, bias=False) for n in sizes]


def _storage_bytes(module: nn.Module) -> tuple[int, int]:
    """(bytes of the distinct storages the parameters live in, bytes of the parameters)."""
    params = list(module.parameters())
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in params}
    return sum(storages.values()), sum(p.numel() * p.element_size() for p in params)


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[n], sb[n]) for n in sa)


# ---- the group ----------------------------------------------------------------------------------


def test_group_outputs_are_the_members_products_as_views_of_one_weight():
    members = _members(0)
    separate = [m.weight.detach().clone() for m in members]
    group = LinearGroup(*members)
    assert group.weight.shape == (56, 32) and group.weight.is_contiguous()
    offset = 0
    for m, w in zip(members, separate):
        assert m.weight.untyped_storage().data_ptr() == group.weight.untyped_storage().data_ptr()
        assert m.weight.storage_offset() == offset and torch.equal(m.weight, w)
        offset += m.weight.numel()
    x = torch.randn(9, 32, generator=torch.Generator().manual_seed(2))
    outs = group(x)
    assert len({o.untyped_storage().data_ptr() for o in outs}) == 1       # column views of one product
    for o, w in zip(outs, separate):
        assert o.shape == (9, w.shape[0]) and _rel(o, F.linear(x, w)) <= PROJECTION_REL_ERR
    for o, w in zip(group(x, members=slice(1, 3)), separate[1:]):
        assert _rel(o, F.linear(x, w)) <= PROJECTION_REL_ERR
    group.unfuse()
    assert not group.fused and len({m.weight.untyped_storage().data_ptr() for m in members}) == 3
    assert all(torch.equal(o, F.linear(x, w)) for o, w in zip(group(x), separate))
    group.fuse()
    assert group.fused and all(torch.equal(m.weight, w) for m, w in zip(members, separate))


def test_group_rejects_members_it_cannot_fuse():
    with pytest.raises(ValueError):
        LinearGroup(nn.Linear(4, 3, bias=True), nn.Linear(4, 3, bias=False))
    with pytest.raises(ValueError):
        LinearGroup(nn.Linear(4, 3, bias=False), nn.Linear(5, 3, bias=False))


def test_a_replaced_member_weight_is_fused_again_on_the_next_call():
    members = _members(1)
    group = LinearGroup(*members)
    gen = torch.Generator().manual_seed(3)
    new = torch.randn(8, 32, generator=gen)
    members[2].weight = nn.Parameter(new.clone())                # replaced, not written in place
    x = torch.randn(3, 32, generator=gen)
    assert _rel(group(x)[2], F.linear(x, new)) <= PROJECTION_REL_ERR
    assert members[2].weight.untyped_storage().data_ptr() == group.weight.untyped_storage().data_ptr()
    with torch.random.fork_rng():
        torch.manual_seed(4)
        mlp = SwiGLUMLP(32, 48).to(torch.float64)                # a conversion replaces every member
    reference = F.linear(F.silu(F.linear(x.double(), mlp.gate_proj.weight)) * F.linear(x.double(), mlp.up_proj.weight),
                         mlp.down_proj.weight)
    assert _rel(mlp(x.double()), reference) <= PROJECTION_REL_ERR and mlp.gate_up_proj.weight.dtype == torch.float64


# ---- the models ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tiny_checkpoints):
    target_dir, draft_dir = tiny_checkpoints
    target = load_target(target_dir)
    return target, load_drafter(draft_dir, target)


def _member_names(module: nn.Module) -> list[tuple[str, ...]]:
    names = {id(m): n for n, m in module.named_modules()}
    return [tuple(names[id(m)] for m in g.members) for g in linear_groups(module)]


def test_models_hold_the_groups_their_layers_name(models):
    target, drafter = models
    groups = _member_names(target)
    for i, layer_type in enumerate(target.config.layer_types):
        p = f"model.layers.{i}."
        mixer = ((p + "linear_attn.in_proj_qkv", p + "linear_attn.in_proj_b", p + "linear_attn.in_proj_a",
                  p + "linear_attn.in_proj_z")
                 if layer_type == "linear_attention" else
                 (p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"))
        assert mixer in groups and (p + "mlp.gate_proj", p + "mlp.up_proj") in groups
    assert len(groups) == 2 * target.config.num_hidden_layers
    draft_groups = _member_names(drafter)
    for i in range(drafter.config.num_hidden_layers):
        p = f"layers.{i}."
        assert (p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj") in draft_groups
        assert (p + "mlp.gate_proj", p + "mlp.up_proj") in draft_groups
    assert len(draft_groups) == 2 * drafter.config.num_hidden_layers


def test_state_dict_and_weight_bytes_are_those_of_the_unfused_model(tiny_checkpoints, models):
    target_dir, draft_dir = tiny_checkpoints
    fused_target, fused_drafter = models
    target = load_target(target_dir)
    drafter = load_drafter(draft_dir, target)
    set_fused(target, False)
    set_fused(drafter, False)
    for fused, unfused in ((fused_target, target), (fused_drafter, drafter)):
        assert _same_state(fused, unfused)
        storages, params = _storage_bytes(fused)
        assert storages == params == _storage_bytes(unfused)[0] == _storage_bytes(unfused)[1]
        for g in linear_groups(fused):                           # no second copy of a group's weight
            assert g.weight.untyped_storage().nbytes() == sum(m.weight.numel() * 4 for m in g.members)
    # the planner sizes weights from the architecture: the same count
    shape = read_target_shape(target_dir)
    assert sum(p.numel() for p in fused_target.parameters()) == shape.num_params
    draft_params = read_draft_shape(draft_dir).num_params(shape.hidden_size)
    assert sum(p.numel() for p in fused_drafter.parameters()) == draft_params


def test_checkpoints_load_into_and_save_from_a_fused_model(tiny_checkpoints, models, tmp_path):
    """Models are built fused, so every load is a load after fusion: it writes through the
    members' views into the group weights. The seeded writer (weights.py's saving) and a fused
    model's state_dict round-trip."""
    from safetensors.torch import save_file

    target_dir, draft_dir = tiny_checkpoints
    target, drafter = models
    for g in linear_groups(target) + linear_groups(drafter):
        assert g.fused and torch.equal(g.weight, torch.cat([m.weight for m in g.members]))
    seeded = load_target(target_dir, load_format="dummy", seed=0)            # the writer's values
    assert _same_state(target, seeded)
    assert _same_state(drafter, load_drafter(draft_dir, seeded, load_format="dummy", seed=1))
    for src, module in ((target_dir, target), (draft_dir, drafter)):
        out = tmp_path / src.name
        out.mkdir()
        shutil.copy(src / "config.json", out / "config.json")
        # one storage per tensor, as the writer saves (some safetensors versions refuse views of one)
        save_file({n: t.clone() for n, t in module.state_dict().items()}, str(out / "model.safetensors"))
    loaded = load_target(tmp_path / target_dir.name)
    loaded_drafter = load_drafter(tmp_path / draft_dir.name, loaded)
    assert _same_state(loaded, target) and _same_state(loaded_drafter, drafter)
    # in place into a fused model: the group weights follow
    other = Qwen35Target(target.config)
    other.load_state_dict(loaded.state_dict())
    for g, ref in zip(linear_groups(other), linear_groups(target)):
        assert torch.equal(g.weight, ref.weight)


def test_meta_and_tied_models_build_fused(tmp_path):
    config = json.loads((MODELS_DIR / "tiny-hybrid" / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (tmp_path / "tied").mkdir()
    (tmp_path / "tied" / "config.json").write_text(json.dumps(config))
    with torch.device("meta"):
        meta = Qwen35Target(TargetModelConfig.from_dir(tmp_path / "tied"))
    assert all(g.weight.is_meta for g in linear_groups(meta)) and len(linear_groups(meta)) == 16
    ckpt = write_random_checkpoint(tmp_path / "tied", tmp_path / "tied-ckpt", seed=3)
    model = load_target(ckpt)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    storages, params = _storage_bytes(model)
    assert storages == params == read_target_shape(ckpt).num_params * 4


# ---- whole runs ---------------------------------------------------------------------------------


def _generate(target_dir, draft_dir, fused: bool, enforce_eager: bool, max_fused_rows: int | None):
    """Tokens and every target / drafter pass's hidden states of one greedy DFlash run (k = 4)."""
    rng = random.Random(7)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in (5, 23, 70, 41, 12)]
    params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (17, 9, 24, 30, 3)]
    llm = LLM(target_dir, {"method": "dflash", "model": str(draft_dir), "num_speculative_tokens": 4},
              max_num_seqs=4, max_model_len=256, max_num_batched_tokens=96, kv_cache_memory_bytes=12 * 2**20,
              enforce_eager=enforce_eager)
    hidden: list[torch.Tensor] = []
    for model in (llm.engine.target, llm.engine.drafter):
        set_fused(model, fused)
        for m in model.modules():
            if isinstance(m, (SwiGLUMLP, GatedDeltaNet)) and max_fused_rows is not None:
                m.max_fused_rows = max_fused_rows
        model.register_forward_hook(
            lambda _m, _a, out: hidden.append((out[0] if isinstance(out, tuple) else out).clone()))
    tokens = [o.output_token_ids for o in llm.generate(prompts, params)]
    if not enforce_eager:
        assert llm.engine.runner.graphs is not None
    return tokens, hidden


@pytest.mark.parametrize("enforce_eager,max_fused_rows", [(True, None), (False, 32)])
def test_fused_runs_give_the_unfused_tokens_and_hidden_states(tiny_checkpoints, enforce_eager, max_fused_rows):
    """max_fused_rows 32: prefill chunks (up to 96 rows) take the MLP's two-GEMM branch and
    Gated-DeltaNet's z after the kernels, the 20-row verification steps the one-GEMM branches."""
    fused = _generate(*tiny_checkpoints, True, enforce_eager, max_fused_rows)
    unfused = _generate(*tiny_checkpoints, False, enforce_eager, max_fused_rows)
    assert fused[0] == unfused[0]
    assert len(fused[1]) == len(unfused[1]) > 20
    errs = [_rel(a, b) for a, b in zip(*(run[1] for run in (fused, unfused)))]
    print(f"max rel err of {len(errs)} passes: {max(errs):.2e}")
    assert max(errs) <= RUN_REL_ERR


def test_each_layer_projects_what_its_members_project(models):
    """Per projection (the fused GEMM's column views against each member's own GEMM on one
    input): within PROJECTION_REL_ERR, in every group of both models."""
    gen = torch.Generator().manual_seed(5)
    for g in linear_groups(models[0]) + linear_groups(models[1]):
        x = torch.randn(9, g.members[0].in_features, generator=gen)
        with torch.inference_mode():
            for out, m in zip(g(x), g.members):
                assert _rel(out, F.linear(x, m.weight.clone())) <= PROJECTION_REL_ERR


# ---- the snapshot kernels on the fused views --------------------------------------------------


class _Passes:
    """Target passes over a pool of their own: disjoint blocks per (group, sequence), block 0
    the null block; each sequence has SLOTS state slots per state group (slot 0 its state)."""

    SLOTS = 4

    def __init__(self, model_dir, model: Qwen35Target, device: str):
        cfg = EngineConfig(model=model_dir, max_num_seqs=2, max_model_len=128, max_num_batched_tokens=128,
                           kv_cache_memory_bytes=16 * 2**20, kv_cache_dtype="float32", mamba_cache_dtype="float32")
        pool = UnifiedPool(plan_memory(cfg, read_target_shape(model_dir), None).layout)
        pool.allocate(device)
        self.model, self.device, self.layout = model, torch.device(device), pool.layout
        self.kv, self.state = layer_caches(pool, model.config.layer_types, 0)
        bs = self.layout.block_size_tokens
        blocks = iter(range(1, self.layout.num_blocks))
        self.tables = {g.group_id: [[next(blocks) for _ in range(-(-128 // bs) if g.is_attention else self.SLOTS)]
                                    for _ in range(2)] for g in self.layout.groups}

    def run(self, tokens: list[list[int]], starts: list[int], src: int, num_saved: int, backend: str) -> torch.Tensor:
        """One pass reading each sequence's state from its slot `src`; the states after its last
        `num_saved` inputs go to its slots 0 .. num_saved - 1. Returns the logits."""
        attn = {g: t for g, t in self.tables.items() if self.layout.groups[g].is_attention}
        slots = {g: t for g, t in self.tables.items() if self.layout.groups[g].is_state}
        qsl = [0]
        for t in tokens:
            qsl.append(qsl[-1] + len(t))
        batch = ForwardBatch(
            positions=torch.tensor([s + j for t, s in zip(tokens, starts) for j in range(len(t))], device=self.device),
            query_start_loc=qsl, seq_lens=[s + len(t) for t, s in zip(tokens, starts)], block_tables=attn,
            block_size_tokens=self.layout.block_size_tokens, causal=True,
            state_in_slots={g: [t[src] for t in s] for g, s in slots.items()}, state_fresh=[s == 0 for s in starts],
            state_save_positions=[list(range(len(t) - num_saved, len(t))) for t in tokens],
            state_save_slots={g: [t[:num_saved] for t in s] for g, s in slots.items()})
        self.model.gdn_backend = backend
        ids = torch.tensor([i for t in tokens for i in t], device=self.device)
        hidden, _ = self.model(ids, batch, self.kv, self.state)
        return self.model.compute_logits(hidden)

    def saved_states(self) -> list[torch.Tensor]:
        """Every state layer's conv and SSM contents of the sequences' slots."""
        out = []
        for cache in self.state.values():
            blocks = torch.tensor([b for seq in self.tables[cache.group_id] for b in seq], device=self.device)
            out += [cache.first[blocks].float().cpu(), cache.second[blocks].float().cpu()]
        return out


def _interpret_kernels_on_cpu(monkeypatch) -> None:
    """The snapshot kernels under Triton's interpreter on CPU tensors (triton_interpreter.py),
    taken for snapshotting passes off CUDA too."""
    interpret_snapshot_kernels(monkeypatch)
    monkeypatch.setattr(GatedDeltaNet, "_snapshot_kernels",
                        lambda self, x, slots, backend: slots.all_states and backend == "fla" and self.kernel == 4)


def _kernel_device(monkeypatch) -> str:
    if torch.cuda.is_available():
        pytest.importorskip("fla", reason="the CUDA prefill runs fla-core's kernels")
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs CUDA or TRITON_INTERPRET=1 (the snapshot kernels under Triton's interpreter)")
    pytest.importorskip("triton")
    _interpret_kernels_on_cpu(monkeypatch)
    return "cpu"


def _snapshot_world(model_dir, device: str, fused: bool, kernels: bool) -> tuple[list, list]:
    """Prefill two prompts, then two snapshotting passes: both sequences 4 inputs (one group: the
    fused views read in place; each state read from slot 0 and written there again), then, every
    draft accepted (slot 3), 4 and 3 inputs (two groups: gathered copies)."""
    model = load_target(model_dir, device=device)
    set_fused(model, fused)
    passes = _Passes(model_dir, model, device)
    kernel_backend = "fla" if kernels else "torch"
    prefill_backend = kernel_backend if device == "cuda" else "torch"
    prompts = [[(7 * i + 3) % 1000 + 2 for i in range(37)], [(11 * i + 5) % 1000 + 2 for i in range(13)]]
    logits = [passes.run(prompts, [0, 0], 0, 1, prefill_backend)]
    logits.append(passes.run([[5, 9, 11, 13], [17, 19, 23, 29]], [37, 13], 0, 4, kernel_backend))
    logits.append(passes.run([[31, 37, 41, 43], [47, 53, 59]], [41, 17], 3, 3, kernel_backend))
    return [x.cpu() for x in logits], passes.saved_states()


def test_snapshot_kernels_read_the_fused_views(tiny_checkpoints, monkeypatch):
    """The fused-projection snapshot passes through the conv and gated-delta-rule kernels equal
    the unfused ones through the same kernels (only the b / a products' rounding differs) and the
    torch reference path (float32 kernels against torch, as test_gpu_kernels' 1e-4); logits and
    every saved conv / SSM state. A gate or conv input read at the wrong stride is off by O(1)."""
    device = _kernel_device(monkeypatch)
    calls = []
    kernel_pass = GatedDeltaNet._fused_snapshots
    monkeypatch.setattr(GatedDeltaNet, "_fused_snapshots", lambda self, *a: calls.append(1) or kernel_pass(self, *a))
    target_dir = tiny_checkpoints[0]
    fused = _snapshot_world(target_dir, device, fused=True, kernels=True)
    unfused = _snapshot_world(target_dir, device, fused=False, kernels=True)
    num_linear = TargetModelConfig.from_dir(target_dir).layer_types.count("linear_attention")
    assert len(calls) == 2 * num_linear * 3          # 2 worlds x layers x (1 + 2 groups)
    reference = _snapshot_world(target_dir, device, fused=True, kernels=False)
    for got, want in ((fused, unfused), (fused, reference)):
        errs = [_rel(a, b) for part in range(2) for a, b in zip(got[part], want[part])]
        print(f"max rel err of logits and saved states {max(errs):.2e}")
        assert max(errs) <= RUN_REL_ERR, errs
