"""The event loop every loadgen process runs: uvloop when it is installed, else asyncio's own.

uvloop (libuv) is an optional speedup, never a requirement: without it everything runs on the
standard loop. How much it buys depends on the host: `benchmarks/loadgen_overhead.py` prints the
loop it ran on, and `LOADGEN_NO_UVLOOP=1` forces the standard loop to measure the difference.

`run(coro)` in the main thread takes SIGINT and SIGTERM through the loop while it runs (where a Python
handler is installed for them): the signal cancels the work, the loop closes, and then the handler
that was installed runs (a KeyboardInterrupt from `run.interrupt.Interrupts` or Python's own), so a
Ctrl-C never lands inside a protocol callback, where a loop would log it as a transport error.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any, Awaitable, TypeVar

T = TypeVar("T")


def loop_name() -> str:
    return "uvloop" if _uvloop() is not None else "asyncio"


def _uvloop():
    if os.environ.get("LOADGEN_NO_UVLOOP"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def new_event_loop() -> asyncio.AbstractEventLoop:
    uv = _uvloop()
    return uv.new_event_loop() if uv is not None else asyncio.new_event_loop()


SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def _guarded(coro: Awaitable[T], caught: list[int]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    installed: list[tuple[int, Any]] = []
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if not callable(previous):   # SIG_DFL / SIG_IGN: left as they are
                continue

            def on_signal(sig: int = sig) -> None:
                caught.append(sig)
                if task is not None:
                    task.cancel()
            try:
                loop.add_signal_handler(sig, on_signal)
                installed.append((sig, previous))
            except (NotImplementedError, RuntimeError, ValueError):
                continue
    try:
        return await coro
    finally:
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous)


def run(coro: Awaitable[T]) -> T:
    """`asyncio.run` on a fresh loop of `new_event_loop()`; a signal while it runs (module doc) is
    passed to the handler that was installed once the loop is closed."""
    caught: list[int] = []
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            return runner.run(_guarded(coro, caught))
        except asyncio.CancelledError:
            if not caught:
                raise
    handler = signal.getsignal(caught[0])
    if callable(handler):
        handler(caught[0], None)
    raise KeyboardInterrupt(signal.Signals(caught[0]).name)
