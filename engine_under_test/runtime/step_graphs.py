"""The CUDA graphs of a decode step: one record of graphs per captured batch size.

Contract: `capture_graphs(bodies, buffers, sizes, meter, with_drafter) -> CapturedGraphs`.
On CUDA it records, for each size B (largest first, one shared memory pool), the target graph
and, with a drafter, the chain, verify, commit and drafter graphs (`SizeGraphs`), after two
warm-up runs of every body at that size on a side stream (kernel compilation, library handles);
`captured_bytes` is what capture added to the device allocator's reservation (the ledger's graph
pool estimate must hold it), `captured_device_bytes` what it took from the device's free memory,
`device_bytes_by_size` the same, cumulative, after each size. Elsewhere every record holds None
(`run` then runs the bodies eagerly: the fixed-shape path, checked on a CPU).

`run(graphs, bodies, B, chained)`: the one-sync step at size B, replayed (or run) in the order
chain (only `chained`: a pipelined step's inputs), target, verify, commit, drafter. The chain
graph is captured second but may replay first: it reads the step results and writes the meta
buffers, both outside the pool, so its pool memory holds no output another graph reads, and no
output of another graph is placed in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from engine_under_test.runtime.step_bodies import StepBodies
from engine_under_test.runtime.step_buffers import StepBuffers


class SizeGraphs(NamedTuple):
    """One captured size's graphs (None: not captured, the body runs eagerly; without a drafter
    only `target` is captured)."""

    target: "torch.cuda.CUDAGraph | None" = None
    chain: "torch.cuda.CUDAGraph | None" = None
    verify: "torch.cuda.CUDAGraph | None" = None
    commit: "torch.cuda.CUDAGraph | None" = None
    draft: "torch.cuda.CUDAGraph | None" = None


@dataclass
class CapturedGraphs:
    by_size: dict[int, SizeGraphs] = field(default_factory=dict)
    captured_bytes: int = 0            # the device allocator's reservation added by capture
    captured_device_bytes: int = 0     # device memory capture took, allocator or not (free bytes)
    device_bytes_by_size: dict[int, int] = field(default_factory=dict)   # cumulative, after each size
    pool: object = None                # the graphs' memory pool handle (CUDA): prefill graphs share it


class CaptureMeter:
    """CUDA memory taken since it was made (after a sync and emptying the allocator's cache: what
    is cached but unused is not capture's): the allocator's reservation and the device's free
    bytes, whoever took them."""

    def __init__(self, device: torch.device):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        self.device = device
        self.reserved_before = torch.cuda.memory_reserved(device)
        self.free_before = torch.cuda.mem_get_info(device)[0]

    def allocator_bytes(self) -> int:
        return torch.cuda.memory_reserved(self.device) - self.reserved_before

    def device_bytes(self) -> int:
        return self.free_before - torch.cuda.mem_get_info(self.device)[0]


def capture_graphs(bodies: StepBodies, buffers: StepBuffers, sizes: tuple[int, ...], meter: CaptureMeter | None,
                   with_drafter: bool) -> CapturedGraphs:
    """The graphs of every size (module docstring); `meter`: made before the step's buffers were
    allocated (CUDA), None elsewhere (records of None, nothing captured)."""
    if meter is None:
        return CapturedGraphs(by_size={B: SizeGraphs() for B in sizes})
    device = meter.device
    buffers.reset()
    pool = torch.cuda.graph_pool_handle()
    out = CapturedGraphs(pool=pool)
    side = torch.cuda.Stream(device)
    for B in sorted(sizes, reverse=True):
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):            # warm-up: kernel compilation, handles
            for _ in range(2):
                aux = bodies.target(B)
                if with_drafter:
                    bodies.chain(B)
                    bodies.verify(B)
                    bodies.commit(B)
                    bodies.draft(B, aux)
        torch.cuda.current_stream(device).wait_stream(side)
        del aux
        graphs = {"target": torch.cuda.CUDAGraph()}
        with torch.cuda.graph(graphs["target"], pool=pool):
            aux = bodies.target(B)
        if with_drafter:                         # captured in this order; `run` replays chain first
            for name in ("chain", "verify", "commit", "draft"):
                graphs[name] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graphs[name], pool=pool):
                    if name == "draft":
                        bodies.draft(B, aux)
                    else:
                        getattr(bodies, name)(B)
        out.by_size[B] = SizeGraphs(**graphs)
        torch.cuda.synchronize(device)
        out.device_bytes_by_size[B] = meter.device_bytes()
    torch.cuda.empty_cache()
    out.captured_bytes = meter.allocator_bytes()
    out.captured_device_bytes = meter.device_bytes()
    return out


def run(graphs: SizeGraphs, bodies: StepBodies, B: int, chained: bool) -> None:
    """The one-sync step at size B (see the module docstring)."""
    if graphs.target is None:
        if chained:
            bodies.chain(B)
        aux = bodies.target(B)
        bodies.verify(B)
        bodies.commit(B)
        bodies.draft(B, aux)
        return
    if chained:
        graphs.chain.replay()
    graphs.target.replay()
    graphs.verify.replay()
    graphs.commit.replay()
    graphs.draft.replay()
