"""The bodies a CUDA graph captures read nothing back to the host, checked on a CPU.

A CUDA graph records device work only: a body that reads a device value on the host (`.item()`,
`int(t)`, `bool(t)`, `.tolist()`, `.numpy()`) or runs an op whose output shape depends on data
(`nonzero`, `masked_select`, indexing with a boolean mask, `unique`) syncs the stream, which
fails a capture, or bakes one step's value into every replay; a tensor made from host data
inside a body (`torch.tensor(...)`) is a copy the graph replays from a buffer since freed. On the card that shows only when
the capture runs; here every body of the decode step (target, verify, commit, chain, draft) and
of the prefill pass runs eagerly under a dispatch mode that records such ops, on the same code
the card captures (the CPU's kernels differ only below the engine: fla and the Triton kernels).

The recorder is checked too: it records a body with a host read planted in it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine_under_test.llm import LLM, SamplingParams

HOST_READ_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2",
                 "unique_consecutive", "unique_dim", "equal", "is_nonzero",
                 "lift_fresh", "lift_fresh_copy"}   # torch.tensor(host data): a copy a graph would replay stale


HOST_READ_METHODS = ("tolist", "numpy", "item", "__int__", "__float__", "__bool__", "__index__")


class HostReads(TorchDispatchMode):
    """Records the ops inside it that read device values on the host or have data-dependent
    shapes, and the tensor methods that read a value (`HOST_READ_METHODS`: on a CPU they bypass
    the dispatcher)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READ_OPS:
            self.reads.append(name)
        elif name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                     for i in (args[1] if len(args) > 1 else ()) if i is not None):
            self.reads.append("index with a boolean mask")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._saved = {name: getattr(torch.Tensor, name) for name in HOST_READ_METHODS}
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, self._recording(name, method))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)

    def _recording(self, name, method):
        def recorded(t, *a, **kw):
            self.reads.append(name)
            return method(t, *a, **kw)
        return recorded


def _engine(tiny_checkpoints, k: int):
    target, draft = tiny_checkpoints
    return LLM(target, {"method": "dflash", "model": str(draft), "num_speculative_tokens": k}, max_num_seqs=4,
               max_model_len=256, max_num_batched_tokens=256, kv_cache_memory_bytes=12 * 2**20,
               enforce_eager=False).engine


def _reads(fn) -> list[str]:
    with torch.inference_mode(), HostReads() as rec:
        fn()
    return rec.reads


@pytest.mark.parametrize("k", [4, 8])
def test_the_prefill_pass_reads_nothing_back(tiny_checkpoints, k):
    eng = _engine(tiny_checkpoints, k)
    prefill = eng.runner.prefill_graphs
    rng = random.Random(k)
    eng.add_request("r", [rng.randrange(2, 1000) for _ in range(70)], SamplingParams(max_tokens=4, temperature=0))
    sr = eng.scheduler.schedule().scheduled[0]
    assert any(G > 1 for G, _ in prefill.keys)
    for G, S in prefill.keys:                          # a real pass in each: pad rows, drafting when it ends the prompt
        n = min(sr.num_scheduled_tokens, S - 5)
        chunk = replace(sr, token_ids=sr.token_ids[:n], num_scheduled_tokens=n, is_prefill_chunk=n < 70)
        with torch.inference_mode():                   # G > 1: one sequence short of G (a pad sequence)
            prefill.fills.fill([chunk] * max(1, G - 1), G, S)
        assert _reads(lambda: prefill.bodies.run(G, S)) == [], (G, S)


@pytest.mark.parametrize("k", [4, 8])
def test_the_decode_step_reads_nothing_back(tiny_checkpoints, k):
    # the chain body is left out: on the card it is one Triton kernel (chain_kernel.py), not the
    # torch path a CPU runs, which reads no padded row's previous results (prev_row -1)
    graphs = _engine(tiny_checkpoints, k).runner.graphs
    bodies = graphs.bodies
    for B in graphs.sizes:
        def step():
            aux = bodies.target(B)
            bodies.verify(B)
            bodies.commit(B)
            bodies.draft(B, aux)
        assert _reads(step) == [], B


def test_the_recorder_sees_a_host_read(tiny_checkpoints):
    # a body that reads the last input's row on the host, as a capture must not
    prefill = _engine(tiny_checkpoints, 4).runner.prefill_graphs
    last = prefill.buffers.meta.view("last")
    reads = _reads(lambda: (int(last[0]), last.tolist(), last[last > 0], torch.nonzero(last), bool(last.any()),
                            last + torch.tensor([1, 2])[:1]))
    assert {"__int__", "tolist", "index with a boolean mask", "nonzero", "__bool__", "lift_fresh"} <= set(reads), reads
