"""SIGINT and SIGTERM for the main job: the first one stops planning, none stops the report.

Contract: inside `with Interrupts() as stop:`, the first SIGINT or SIGTERM raises
`KeyboardInterrupt` where the main thread is (planning unwinds: every adapter's process group is
killed on the way out) and records the signal in `stop.signum`; from that moment every further
SIGINT / SIGTERM is ignored until the block ends, so the partial report, `junit.xml` and `latest`
are written whole. `stop.exit_code` is 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), None
when no signal came. The previous handlers are restored on exit. Outside the main thread it does
nothing (Python delivers signals there only).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        for s in SIGNALS:   # from now on: finish the report, whatever else arrives
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def hold(self) -> None:
        """Ignore further signals from here on (the report is being written), signal or not."""
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                signal.signal(s, signal.SIG_IGN)

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
