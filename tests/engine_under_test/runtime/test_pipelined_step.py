"""The pipelined engine (async scheduling: step n + 1 planned and launched before step n is read,
its inputs derived on the device from n's results, runtime/chained_inputs.py) produces what the
synchronous engine produces, on the CPU where the captured bodies run eagerly.

- Same requests, two engines (async_scheduling on / off): identical outputs, draft and generated
  token counts, and the pipeline really ran (chained steps counted).
- Every accepted length 0 .. k: the device rule is replaced in both engines by one that accepts a
  length read off the target's argmax (so the real drafter's misses do not pin it at 0); outputs
  stay identical, and every chained step's buffers, as the device derived them, equal what the
  host fill writes for the same requests resolved on the host (`host_resolved` + `fills.target`).
- A planned step that cannot be chained runs after its predecessor with host-resolved inputs.
- A request that arrives, and one that is aborted, while a step is in flight: the pipeline drains,
  the other requests' outputs are the synchronous engine's, the aborted one reports nothing more.
- Fixed and 0 / 1 synthetic acceptance (decided on the device, runtime/device_verify.py): the
  pipelined engine's outputs and spec-decode counts (drafts, accepted, accepted per position)
  equal the synchronous engine's on the two-sync path (host `verify` with the AcceptanceModel),
  though requests that finish in step n ran again in step n + 1 (those rows are dropped, counts
  included, as vLLM drops them).
Seeded tiny checkpoints (conftest.py), k = 4, four captured sequences, float32; on the CPU, and
on CUDA (marked gpu: the captured graphs, TF32 off) where a device is present.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime import step_bodies
from engine_under_test.runtime.chained_inputs import host_resolved
from engine_under_test.runtime.decode_graphs import DecodeGraphs
from engine_under_test.scheduler.output import SchedulerOutput

DEVICES = ["cpu"] + ([pytest.param("cuda", marks=pytest.mark.gpu)] if torch.cuda.is_available() else [])
K = 4
PROMPT_LENGTHS = (5, 23, 70, 41)
OUTPUT_LENGTHS = (17, 29, 24, 40)
MAX_MODEL_LEN = 192


@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
    if request.param == "cuda":
        pytest.importorskip("fla", reason="the engine's CUDA kernels need fla-core")
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    return request.param


def _llm(checkpoints, async_scheduling: bool, device: str, spec_extra: dict | None = None, **kw) -> LLM:
    target, draft = checkpoints
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": K, **(spec_extra or {})}
    return LLM(target, spec, max_num_seqs=4, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=96,
               kv_cache_memory_bytes=12 * 2**20, enforce_eager=False, async_scheduling=async_scheduling,
               device=device, dtype="float32", **kw)


def _requests():
    rng = random.Random(5)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]
    return prompts, [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUT_LENGTHS]


def _generate(llm: LLM) -> list[list[int]]:
    prompts, params = _requests()
    return [o.output_token_ids for o in llm.generate(prompts, params)]


def _argmax_rule(monkeypatch, seen: set[int]) -> None:
    """Accept m = argmax[:, 0] mod (k + 1) drafts wherever the step had drafts (both engines;
    before they are built: the graphs capture it); `seen` collects the lengths of collected steps."""
    def rule(argmax, drafts):
        return torch.where(drafts[:, 0] >= 0, argmax[:, 0] % (drafts.shape[1] + 1), 0)

    collect = DecodeGraphs.collect

    def counting(self, step, result):
        out = collect(self, step, result)
        seen.update(step.rows.accepted.tolist())
        return out

    monkeypatch.setattr(step_bodies, "accepted_lengths", rule)
    monkeypatch.setattr(DecodeGraphs, "collect", counting)


def test_pipelined_outputs_equal_the_synchronous_engines(tiny_checkpoints, device):
    sync, piped = _llm(tiny_checkpoints, False, device), _llm(tiny_checkpoints, True, device)
    assert _generate(piped) == _generate(sync)
    a, b = sync.engine.stats(), piped.engine.stats()
    assert (b.num_draft_tokens, b.num_generated_tokens, b.num_accepted_tokens) == \
        (a.num_draft_tokens, a.num_generated_tokens, a.num_accepted_tokens)
    assert sync.engine.runner.graphs.num_chained_steps == 0
    assert piped.engine.runner.graphs.num_chained_steps >= 10
    assert not piped.engine.has_unfinished_requests()


def test_every_accepted_length_derived_on_the_device_as_on_the_host(tiny_checkpoints, monkeypatch, device):
    seen: set[int] = set()
    _argmax_rule(monkeypatch, seen)
    reference = _generate(_llm(tiny_checkpoints, False, device))
    piped = _llm(tiny_checkpoints, True, device)
    graphs = piped.engine.runner.graphs
    launch, collect = DecodeGraphs.launch, DecodeGraphs.collect
    checked, pending = [], {}

    def watched_launch(self, reqs, prev=None, acceptance=None):
        step = launch(self, reqs, prev, acceptance)
        if prev is not None:            # the buffers as the device derived them, before the next fill
            pending[id(step)] = (reqs, prev, self.buffers.meta.device_buffer.clone())
        return step

    def watched_collect(self, step, result):
        out = collect(self, step, result)
        for key, (reqs, prev, derived) in list(pending.items()):
            if prev is step:            # prev's results are read: resolve the chained step on the host
                sampled = {sr.req_id: prev.rows.emitted[b, :int(prev.rows.accepted[b]) + 1].tolist()
                           for b, sr in enumerate(prev.reqs)}
                drafts = {sr.req_id: prev.rows.drafts[b].tolist() for b, sr in enumerate(prev.reqs)
                          if prev.rows.drafting[b]}
                planned = SchedulerOutput(step=0, scheduled=tuple(reqs), preempted_req_ids=(), finished_req_ids=())
                resolved = host_resolved(planned, sampled, drafts, set(sampled), K).scheduled
                # as runner.collect does right after: the state slots prev's commit wrote
                self.runner._remember_states(prev.reqs, {rid: len(t) - 1 for rid, t in sampled.items()})
                meta = self.buffers.meta
                with torch.inference_mode():
                    saved = meta.device_buffer.clone()
                    self.fills.target(list(resolved))
                    for name in meta.shapes:
                        if name not in ("prev_row", "nc_opt"):
                            assert torch.equal(meta.view(name), _field(meta, derived, name)), name
                    meta.device_buffer.copy_(saved)
                if saved.is_cuda:           # the extra fill took a pinned buffer's turn: let its copies land
                    torch.cuda.synchronize()
                checked.append(len(reqs))
                del pending[key]
        return out

    monkeypatch.setattr(DecodeGraphs, "launch", watched_launch)
    monkeypatch.setattr(DecodeGraphs, "collect", watched_collect)
    seen.clear()
    assert _generate(piped) == reference
    assert graphs.num_chained_steps >= 5 and len(checked) == graphs.num_chained_steps
    assert seen >= set(range(K + 1)), f"accepted lengths seen: {sorted(seen)}"


def _field(meta, flat: torch.Tensor, name: str) -> torch.Tensor:
    start = meta.offsets[name]
    return flat[start:start + int(np.prod(meta.shapes[name]))].view(meta.shapes[name])


def test_a_planned_step_that_cannot_chain_runs_with_host_resolved_inputs(tiny_checkpoints, monkeypatch, device):
    seen: set[int] = set()
    _argmax_rule(monkeypatch, seen)
    reference = _generate(_llm(tiny_checkpoints, False, device))
    from engine_under_test import engine as engine_module

    resolved = []
    real = engine_module.host_resolved

    def counting(*args, **kw):
        resolved.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(engine_module, "host_resolved", counting)
    monkeypatch.setattr(DecodeGraphs, "can_chain", lambda self, reqs, prev: False)
    piped = _llm(tiny_checkpoints, True, device)
    seen.clear()
    assert _generate(piped) == reference
    assert piped.engine.runner.graphs.num_chained_steps == 0 and len(resolved) >= 5
    assert seen >= set(range(K + 1))


def test_an_arrival_and_an_abort_while_a_step_is_in_flight(tiny_checkpoints, device):
    prompts, params = _requests()
    late = [3, 1, 4, 1, 5, 9, 2, 6]
    runs = {}
    for mode in (False, True):
        eng = _llm(tiny_checkpoints, mode, device).engine
        for i in range(3):
            eng.add_request(str(i), prompts[i], params[i])
        outputs: dict[str, list[int]] = {str(i): [] for i in range(4)}
        aborted_seen_after = []
        chained_at_arrival = None
        for n in range(400):
            if not eng.has_unfinished_requests():
                break
            if n == 12:
                eng.add_request("3", late, SamplingParams(max_tokens=15, temperature=0, ignore_eos=True))
                chained_at_arrival = eng.runner.graphs.num_chained_steps
            if n == 16:
                assert eng.abort_request("1") is not None
            for out in eng.step():
                if n >= 16 and out.request_id == "1":
                    aborted_seen_after.append(out)
                outputs[out.request_id] += out.new_token_ids
        assert not aborted_seen_after
        runs[mode] = (outputs, chained_at_arrival, eng.runner.graphs.num_chained_steps)
    (sync_out, _, _), (piped_out, at_arrival, total) = runs[False], runs[True]
    for rid in ("0", "2", "3"):
        assert piped_out[rid] == sync_out[rid], rid
    assert len(sync_out["3"]) == 15 and at_arrival >= 5 and total > at_arrival


@pytest.mark.parametrize("spec_extra, acceptance", [
    (None, {"mode": "fixed", "accepted_tokens": 3}),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0}, None),       # 1, 1, 0, 0
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.0, 1.0, 1.0, 1.0]}, None),
], ids=["fixed-3", "synthetic-len3", "synthetic-all"])
def test_acceptance_models_pipelined_equal_the_two_sync_engine(tiny_checkpoints, device, spec_extra, acceptance):
    sync = _llm(tiny_checkpoints, False, device, spec_extra, acceptance=acceptance)
    sync.engine.runner.graphs.one_sync = False          # the host's verify with the AcceptanceModel
    piped = _llm(tiny_checkpoints, True, device, spec_extra, acceptance=acceptance)
    dropped = []
    apply = piped.engine._apply

    def counting_apply(out, result, **kw):
        dropped.extend(rid for rid in result.verified if piped.engine.scheduler.requests[rid].status.is_finished)
        return apply(out, result, **kw)

    piped.engine._apply = counting_apply
    reference = _generate(sync)
    assert _generate(piped) == reference
    a, b = sync.engine.stats(), piped.engine.stats()
    assert (b.num_draft_tokens, b.num_accepted_tokens, b.num_accepted_tokens_per_pos, b.num_generated_tokens) == \
        (a.num_draft_tokens, a.num_accepted_tokens, a.num_accepted_tokens_per_pos, a.num_generated_tokens)
    assert a.num_accepted_tokens > 0
    assert piped.engine.runner.graphs.num_chained_steps >= 5
    assert dropped, "no request ran again after it finished: the dropped-row counts went untested"
