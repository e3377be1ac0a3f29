"""The one-sync decode step (greedy verification and the drafter's query block built on the
device, runtime/device_verify.py) computes what the two-sync step (host `verify`, host-filled
drafter buffers) computes, on the CPU where the graph bodies run eagerly.

Two engines run the same requests, one with `DecodeGraphs.one_sync` off. Every graph step's
result (sampled tokens, drafts, draft and accepted counts) and the drafter's query buffers of
the captured size (padded sequences and sequences with no room to draft included, which must
point at the null block 0) are identical step for step. Drafts: the real drafter (on seeded
weights nearly all rejected), and scripted drafts of the greedy continuation that are all
accepted, none accepted, or cut at a seeded point. One long request reaches max_model_len (whole
blocks), so a verify step with every draft accepted has no room to draft; three requests pad the
captured size of four; a sampling request sends its steps down the two-sync path; a fixed or
0 / 1 synthetic acceptance model is decided on the device and equals the host's step for step.
Below the engine, the device rule is checked against `verify` on random rows,
and the device-built query buffers against the host fill (`fills.draft`) for query blocks
within two tokens of their block table's end.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.device_verify import accepted_lengths
from engine_under_test.runtime.verify import verify
from engine_under_test.scheduler.output import ScheduledRequest

MAX_MODEL_LEN = 192                         # whole blocks of the tiny pool: 4 x 48 tokens (k = 4), 3 x 64 (k = 8)
PROMPT_LENGTHS = (5, 23, 70, 41, 131)
OUTPUT_LENGTHS = (17, 9, 24, 30, MAX_MODEL_LEN - 131)
ONE, TWO = "_execute_one_sync", "_execute_two_syncs"
GREEDY = SamplingParams(max_tokens=1, temperature=0)


def _prompts():
    rng = random.Random(11)
    return [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]


def _params(sampling: tuple[int, ...] = ()):
    return [SamplingParams(max_tokens=n, temperature=0.8 if i in sampling else 0, seed=i, ignore_eos=True)
            for i, n in enumerate(OUTPUT_LENGTHS)]


def _llm(target, draft=None, k=0, enforce_eager=False, **kw):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=96,
               kv_cache_memory_bytes=12 * 2**20, enforce_eager=enforce_eager, **kw)


@dataclass
class _Step:
    path: str
    num_reqs: int
    sampled: dict[str, list[int]]
    drafts: dict[str, list[int]]
    num_draft_tokens: int
    num_accepted_tokens: int
    query: dict[str, list[int]]              # the drafter's query buffers, the captured size's rows

    def same_as(self) -> tuple:
        return self.num_reqs, self.sampled, self.drafts, self.num_draft_tokens, self.num_accepted_tokens, self.query


class _Recorder:
    """Records every graph step of an engine, a step run whole or a mixed step's decode rows (wraps
    the two paths of its DecodeGraphs: a one-sync step's results are read by `collect`)."""

    def __init__(self, llm):
        self.graphs = llm.engine.runner.graphs
        self.steps: list[_Step] = []
        self.graphs.collect = self._wrap(ONE, self.graphs.collect, lambda step: step.reqs)
        self.graphs._execute_two_syncs = self._wrap(TWO, self.graphs._execute_two_syncs, lambda reqs: reqs)

    def _wrap(self, path, inner, reqs_of):
        def run(first, *args):
            reqs = reqs_of(first)
            result = inner(first, *args)
            self.steps.append(self._step(path, reqs, result))
            return result
        return run

    def _step(self, path, reqs, result) -> _Step:
        g = self.graphs
        B = next(s for s in g.sizes if s >= len(reqs))
        dmeta = g.buffers.dmeta
        rows = {name: B * (g.geometry.k + 1) if name.startswith(("q_ids", "q_pos", "q_blk", "q_row")) else B
                for name in dmeta.shapes}
        query = {name: dmeta.view(name)[:n].tolist() for name, n in rows.items()}
        return _Step(path, len(reqs), {r: list(t) for r, t in result.sampled.items()},
                     {r: list(d) for r, d in result.drafts.items()}, result.num_draft_tokens,
                     result.num_accepted_tokens, query)


class _FixedCut:
    """The scripted runner's corruption point, fixed: k keeps every draft, 0 corrupts the first."""

    def __init__(self, cut: int):
        self.cut = cut

    def randrange(self, n: int) -> int:
        return min(self.cut, n - 1)


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    outs = _llm(tiny_checkpoints[0], enforce_eager=True).generate(_prompts(), _params())
    return [o.output_token_ids for o in outs]


def _run(tiny_checkpoints, reference, scripted_runner, k, drafts, one_sync, sampling=(), which=range(5), **kw):
    """Generates requests `which` (of the prompts) -> (outputs, graph steps, stats)."""
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, **kw)
    llm.engine.runner.graphs.one_sync = one_sync
    if drafts != "real":
        full = {str(j): _prompts()[i] + reference[i] for j, i in enumerate(which)}
        runner = scripted_runner(llm.engine.runner, full, seed=k)
        if drafts != "partial":
            runner.rng = _FixedCut(k if drafts == "all" else 0)
        llm.engine.runner = runner
    recorder = _Recorder(llm)
    prompts, params = _prompts(), _params(sampling)
    outs = [o.output_token_ids for o in llm.generate([prompts[i] for i in which], [params[i] for i in which])]
    return outs, recorder.steps, llm.engine.stats()


def _assert_same_steps(fast: list[_Step], slow: list[_Step]) -> None:
    assert all(s.path == TWO for s in slow)
    assert len(fast) == len(slow)
    for i, (f, s) in enumerate(zip(fast, slow)):
        assert f.same_as() == s.same_as(), f"graph step {i} ({f.path}) differs from the two-sync step"


@pytest.mark.parametrize("k, drafts", [(4, "real"), (4, "all"), (8, "all"), (4, "none"), (4, "partial"),
                                       (8, "partial")])
def test_one_sync_steps_equal_two_sync_steps(tiny_checkpoints, reference, scripted_runner, k, drafts):
    fast_out, fast, stats = _run(tiny_checkpoints, reference, scripted_runner, k, drafts, one_sync=True)
    slow_out, slow, slow_stats = _run(tiny_checkpoints, reference, scripted_runner, k, drafts, one_sync=False)
    assert fast_out == slow_out == reference
    _assert_same_steps(fast, slow)
    assert (stats.num_draft_tokens, stats.num_accepted_tokens) == (slow_stats.num_draft_tokens,
                                                                   slow_stats.num_accepted_tokens)
    assert len(fast) > 8 and all(s.path == ONE for s in fast)
    accepted = sum(s.num_accepted_tokens for s in fast)
    drafted = sum(s.num_draft_tokens for s in fast)
    if drafts == "all":
        assert accepted > 0.9 * drafted, (accepted, drafted)
        assert any(set(s.sampled) - set(s.drafts) for s in fast), "no step without room to draft"
    elif drafts == "none":
        assert accepted == 0 and drafted > 0
    elif drafts == "partial":
        assert 0.2 * drafted < accepted < 0.8 * drafted, (accepted, drafted)


def test_three_requests_pad_the_captured_size_of_four(tiny_checkpoints, reference, scripted_runner):
    run = dict(k=4, drafts="partial", which=(2, 3, 4))
    fast_out, fast, _ = _run(tiny_checkpoints, reference, scripted_runner, one_sync=True, **run)
    slow_out, slow, _ = _run(tiny_checkpoints, reference, scripted_runner, one_sync=False, **run)
    assert fast_out == slow_out == reference[2:]
    _assert_same_steps(fast, slow)
    assert sum(s.num_reqs == 3 for s in fast) > 3 and all(s.path == ONE for s in fast)


def test_a_sampling_request_takes_the_two_sync_path(tiny_checkpoints, reference, scripted_runner):
    run = dict(k=4, drafts="partial", sampling=(1,))
    fast_out, fast, _ = _run(tiny_checkpoints, reference, scripted_runner, one_sync=True, **run)
    slow_out, slow, _ = _run(tiny_checkpoints, reference, scripted_runner, one_sync=False, **run)
    assert fast_out == slow_out
    _assert_same_steps(fast, slow)
    for s in fast:                           # request "1" samples: exactly its steps take two syncs
        assert (s.path == TWO) == ("1" in s.sampled), s
    assert {s.path for s in fast} == {ONE, TWO}


@pytest.mark.parametrize("acceptance, drafts", [
    ({"mode": "fixed", "accepted_tokens": 2}, "real"),
    ({"mode": "fixed", "accepted_tokens": 9}, "real"),                                   # capped at k
    ({"mode": "synthetic", "acceptance_rates": [1.0, 1.0, 1.0, 0.0]}, "real"),
    ({"mode": "synthetic", "mean_acceptance_length": 2.0}, "none"),                      # rates 1, 0, 0, 0
], ids=["fixed-2", "fixed-9", "synthetic-1110", "synthetic-len2"])
def test_an_acceptance_model_one_sync_equals_two_sync(tiny_checkpoints, reference, scripted_runner, acceptance,
                                                      drafts):
    """Fixed and 0 / 1 synthetic acceptance decided on the device: every step's emitted tokens
    (accepted drafts as drafted, then the target's argmax), drafts, counts and query buffers
    equal the host `verify` with the AcceptanceModel. The drafts are not the greedy continuation,
    so emitting argmax[0 .. m] instead of the drafts would differ; the request that reaches
    max_model_len has a step without drafts (padded), where m must be 0."""
    fast_out, fast, stats = _run(tiny_checkpoints, reference, scripted_runner, 4, drafts, one_sync=True,
                                 acceptance=acceptance)
    slow_out, slow, slow_stats = _run(tiny_checkpoints, reference, scripted_runner, 4, drafts, one_sync=False,
                                      acceptance=acceptance)
    assert fast_out == slow_out
    assert fast_out != reference                 # lossy by design: accepted drafts are kept as drafted
    _assert_same_steps(fast, slow)
    assert len(fast) > 8 and all(s.path == ONE for s in fast)
    assert (stats.num_draft_tokens, stats.num_accepted_tokens, stats.num_accepted_tokens_per_pos) == \
        (slow_stats.num_draft_tokens, slow_stats.num_accepted_tokens, slow_stats.num_accepted_tokens_per_pos)
    assert stats.num_accepted_tokens > 0
    if acceptance["mode"] == "fixed":           # these schedules land a step at max_model_len
        assert any(set(s.sampled) - set(s.drafts) for s in fast), "no step without room to draft"


def test_accepted_lengths_follow_greedy_verify():
    """The device rule against `verify` on random rows: matching prefixes, padded slots (-1)."""
    rng = random.Random(5)
    for k in (1, 4, 8):
        argmax, drafts = [], []
        for _ in range(200):
            row = [rng.randrange(6) for _ in range(k + 1)]
            cut = rng.randrange(k + 1)
            d = [row[j] if j < cut or rng.random() < 0.3 else rng.randrange(6) for j in range(k)]
            if rng.random() < 0.2:
                d = d[:rng.randrange(k + 1)] + [-1] * k
            argmax.append(row)
            drafts.append(d[:k])
        m = accepted_lengths(torch.tensor(argmax), torch.tensor(drafts)).tolist()
        expected = [len(verify(torch.zeros(k + 1, 6), d, GREEDY, None, None, argmax=a)) - 1
                    for a, d in zip(argmax, drafts)]
        assert m == expected


def _request(graphs, rng, i: int) -> tuple[ScheduledRequest, list[int]]:
    """A verify step's request whose query block lies within 2 tokens of its block table's end
    (either side), and the target's argmax rows for it, with m accepted drafts."""
    geo = graphs.geometry
    k, L, bs = geo.k, geo.L, geo.bs
    m = rng.randrange(k + 1)
    argmax = [rng.randrange(2, 1000) for _ in range(L)]
    drafts = (argmax[:m] + [(argmax[m] + 1) % 1000] + [rng.randrange(2, 1000) for _ in range(k)])[:k]
    if m < k - 1 and rng.random() < 0.3:
        drafts[m + 1:] = [-1] * (k - m - 1)                        # padded slots after the rejection
    num_blocks = rng.randrange(2, geo.W + 1)
    num_computed = num_blocks * bs - (1 + m + k + 1) + rng.choice([-2, -1, 0, 1])   # p + k + 1 vs capacity
    block_ids = {g: tuple(rng.sample(range(1, 200), num_blocks + (j % 2))) for j, g in enumerate(geo.attn_gids)}
    sr = ScheduledRequest(req_id=str(i), num_computed_tokens=num_computed, num_scheduled_tokens=L,
                          token_ids=(argmax[0], *drafts), spec_token_ids=tuple(drafts), block_ids=block_ids,
                          state_block_ids={s: tuple(range(1, L + 1)) for s in geo.state_gids},
                          is_prefill_chunk=False, is_new=False)
    return sr, argmax


def _query_rows(graphs, B: int) -> dict[str, list[int]]:
    dmeta = graphs.buffers.dmeta
    return {name: dmeta.view(name)[:B * (graphs.geometry.k + 1) if name != "q_seq_lens" else B].tolist()
            for name in dmeta.shapes}


@pytest.mark.parametrize("k", [4, 8])
def test_device_query_equals_host_fill_at_the_room_boundary(tiny_checkpoints, k):
    """`bodies.verify` (device) and `fills.draft` (host) give the drafter the same query buffers,
    padded sequences and sequences one token short of room included."""
    target, draft = tiny_checkpoints
    graphs = _llm(target, draft, k).engine.runner.graphs
    rng = random.Random(k)
    seen = set()
    with torch.inference_mode():                  # the buffers are inference tensors (made by capture)
        for trial in range(60):
            n = rng.randrange(1, 5)
            B = next(s for s in graphs.sizes if s >= n)
            reqs, rows = zip(*(_request(graphs, rng, i) for i in range(n)))
            graphs.fills.target(list(reqs))
            buf = graphs.buffers
            buf.argmax[:n * graphs.geometry.L] = torch.tensor([t for row in rows for t in row])
            graphs.bodies.verify(B)
            device = _query_rows(graphs, B), buf.tokens.accepted[:n].tolist(), buf.tokens.drafting[:n].tolist()
            sampled = {sr.req_id: verify(torch.zeros(graphs.geometry.L, 4), list(sr.spec_token_ids), GREEDY, None, None,
                                         argmax=row) for sr, row in zip(reqs, rows)}
            accepted = {r: len(t) - 1 for r, t in sampled.items()}
            drafting = graphs.fills.draft(list(reqs), sampled, accepted)
            host = _query_rows(graphs, B), list(accepted.values()), [int(b in drafting) for b in range(n)]
            assert device == host, f"trial {trial}"
            seen |= set(host[2]) | ({"padded"} if n < B else set())
    assert seen == {0, 1, "padded"}
