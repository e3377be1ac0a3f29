"""The event loop every loadgen process runs: uvloop when it is installed, else asyncio's own.

uvloop (libuv) is an optional speedup, never a requirement: without it everything runs on the
standard loop. How much it buys depends on the host: `benchmarks/loadgen_overhead.py` prints the
loop it ran on, and `LOADGEN_NO_UVLOOP=1` forces the standard loop to measure the difference.
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, TypeVar

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


def run(coro: Awaitable[T]) -> T:
    """`asyncio.run` on a fresh loop of `new_event_loop()`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
