"""`python -m engine_under_test.serve`: build the engine, start the engine thread, serve HTTP.

Startup lines (stable, one `key=value` list each, for regexes such as `kv_cache_tokens=(\\d+)`):

    reference-engine plan: kv_cache_tokens=N max_concurrency=X.XX max_num_scheduled_tokens=N max_num_seqs=N max_active_seqs=N num_blocks=N block_size_tokens=N
    reference-engine serving: model=NAME url=http://HOST:PORT

`kv_cache_tokens` is vLLM's figure: int(max_concurrency x max_model_len). SIGTERM / SIGINT stop
the HTTP server, then the engine thread, and exit 0; a failed engine thread exits 1.
Exit 2: bad flags; exit 3: the engine refused the configuration (its message printed).

Embedding: `main(argv, wrap_engine=f)` serves `f(engine)` instead of the engine it built (called
once, before the startup lines): a program that runs this server in-process can instrument or
wrap the engine (time its steps, add counters of its own through `EngineStats.extra["counters"]`,
see `metrics`). The wrapper must answer what the server reads of an `LLMEngine`: plan, cfg,
runner, add_request, abort_request, has_unfinished_requests, step, stats.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Any, Callable

from engine_under_test.serve.args import parse
from engine_under_test.serve.http_api import ApiServer, serve
from engine_under_test.serve.loop import EngineLoop

PREFIX = "reference-engine"


def plan_line(plan: Any, max_model_len: int) -> str:
    mem, budget = plan.memory, plan.budget
    return (f"{PREFIX} plan: kv_cache_tokens={int(mem.max_concurrency * max_model_len)} "
            f"max_concurrency={mem.max_concurrency:.2f} max_num_scheduled_tokens={budget.max_num_scheduled_tokens} "
            f"max_num_seqs={budget.max_num_seqs} max_active_seqs={budget.max_active_seqs} "
            f"num_blocks={mem.layout.num_blocks} block_size_tokens={mem.layout.block_size_tokens}")


def main(argv: list[str] | None = None, wrap_engine: Callable[[Any], Any] | None = None) -> int:
    args = parse(argv)
    from engine_under_test.serve.build import build_engine, engine_stats

    try:
        engine = build_engine(args)
    except ValueError as exc:   # BudgetRefusal / MemoryRefusal are ValueErrors with the engine's message
        print(f"{PREFIX} refused: {exc}", file=sys.stderr, flush=True)
        return 3
    if wrap_engine is not None:
        engine = wrap_engine(engine)
    plan = engine.plan
    print(plan_line(plan, engine.cfg.max_model_len), flush=True)
    graphs = engine.runner.graphs
    if graphs is not None and graphs.captured_device_bytes:
        print(f"{PREFIX} graphs: sizes={','.join(map(str, graphs.sizes))} allocator_bytes={graphs.captured_bytes} "
              f"device_bytes={graphs.captured_device_bytes} device_bytes_by_size="
              + ",".join(f"{b}:{n}" for b, n in sorted(graphs.device_bytes_by_size.items())), flush=True)
    prefill = engine.runner.prefill_graphs
    if prefill is not None and any(g is not None for g in prefill.graphs.values()):     # captured (CUDA)
        print(f"{PREFIX} prefill graphs: buckets={','.join(map(str, prefill.buckets))} "
              f"sequences={','.join(map(str, prefill.seq_buckets))} graphs={len(prefill.graphs)} "
              f"allocator_bytes={prefill.captured_bytes}", flush=True)
    if engine.prefill_graphs_failure:
        print(f"{PREFIX} prefill graphs: not captured, prompt chunks run eagerly ({engine.prefill_graphs_failure})",
              file=sys.stderr, flush=True)
    loop = EngineLoop(engine, engine_stats)
    api = ApiServer(loop, args.served_model_name, engine.cfg.max_model_len, plan.target.vocab_size)
    aio = asyncio.new_event_loop()
    stopping = asyncio.Event()

    def stop() -> None:
        try:
            aio.call_soon_threadsafe(stopping.set)
        except RuntimeError:     # the event loop already closed: the server is down
            pass

    signal.signal(signal.SIGTERM, lambda *_: stop())
    signal.signal(signal.SIGINT, lambda *_: stop())
    loop.start()

    def watch() -> None:   # a failed engine thread takes the server down
        loop.thread.join()
        stop()

    threading.Thread(target=watch, daemon=True).start()

    def started(host: str, port: int) -> None:
        print(f"{PREFIX} serving: model={args.served_model_name} url=http://{host}:{port}", flush=True)

    try:
        aio.run_until_complete(serve(api, args.host, args.port, started, stopping))
    finally:
        aio.close()
        loop.stop()
    if loop.fatal:
        return 1
    print(f"{PREFIX} stopped", flush=True)
    return 0
