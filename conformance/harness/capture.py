"""An engine child's output, kept up to a byte cap while the child runs, the rest drained and counted.

Contract: `CappedOutput(path, max_bytes)` is a pipe whose write end (`fileno()`) is given to the
child as stdout or stderr; a thread of its own copies the first `max_bytes` into `path` (a
`header` first, not counted) and reads and discards the rest, counting it, so a child that floods
its output neither blocks nor grows a file or this process's memory. Call `close_writer()` once
the child is started (this process's copy of the write end), and `finish(grace_s)` once it is
done: it waits for end of file up to `grace_s`, then stops reading either way. `dropped_bytes`
is what went unread; `note(what)` says so in words ("stderr: 12345 bytes past the 8 MiB cap were
discarded"), or None when nothing was.

`run_capped(argv, timeout_s, max_bytes, ...)` runs one command under `supervise.spawn` (nothing
it starts survives it), its stdout read through a cap, and returns `(exit code or None past the
timeout, stdout text, note)`.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from pathlib import Path
from typing import Any, Sequence

CHUNK_BYTES = 1 << 16
POLL_S = 0.2


def human_cap(num_bytes: int) -> str:
    return f"{num_bytes >> 20} MiB" if num_bytes >= 1 << 20 and num_bytes % (1 << 20) == 0 else f"{num_bytes} bytes"


class CappedOutput:
    def __init__(self, path: Path, max_bytes: int, header: bytes = b""):
        self.path, self.max_bytes = Path(path), max_bytes
        self.kept_bytes = 0
        self.dropped_bytes = 0
        self._read_fd, self._write_fd = os.pipe()
        self._stop = threading.Event()
        self._file = self.path.open("wb")
        if header:
            self._file.write(header)
            self._file.flush()
        self._thread = threading.Thread(target=self._pump, name=f"capture-{self.path.name}", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._write_fd

    def close_writer(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def _pump(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._read_fd], [], [], POLL_S)
                if not ready:
                    if self._stop.is_set():
                        return
                    continue
                data = os.read(self._read_fd, CHUNK_BYTES)
                if not data:
                    return
                room = self.max_bytes - self.kept_bytes
                if room > 0:
                    self._file.write(data[:room])
                    self._file.flush()
                    self.kept_bytes += min(room, len(data))
                self.dropped_bytes += max(0, len(data) - max(room, 0))
        finally:
            self._file.close()
            os.close(self._read_fd)

    def finish(self, grace_s: float = 2.0) -> None:
        """Wait up to `grace_s` for end of file (every writer gone), then stop reading."""
        self.close_writer()
        self._thread.join(grace_s)
        self._stop.set()
        self._thread.join()

    def note(self, what: str) -> str | None:
        if not self.dropped_bytes:
            return None
        return (f"{what}: {self.dropped_bytes} bytes past the {human_cap(self.max_bytes)} cap were discarded "
                f"(kept the first {human_cap(self.max_bytes)} in {self.path.name})")


def run_capped(argv: Sequence[str], timeout_s: float, max_bytes: int, workdir: Path, env: dict[str, str] | None = None,
               cwd: str | None = None) -> tuple[int | None, str, str | None]:
    """Run `argv` (stdin closed, stderr discarded) for at most `timeout_s`; its stdout through a
    `max_bytes` cap into `workdir`. Raises OSError for a command that cannot be started."""
    from conformance.harness.supervise import kill_group, spawn

    workdir.mkdir(parents=True, exist_ok=True)
    out = CappedOutput(workdir / f"capture-{os.getpid()}-{threading.get_ident()}.stdout", max_bytes)
    try:
        kwargs: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": out.fileno(), "stderr": subprocess.DEVNULL,
                                  "env": env, "cwd": cwd}
        try:
            proc = spawn(argv, **kwargs)
        finally:
            out.close_writer()
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_group(proc)
            proc.wait()
        out.finish()
        text = out.path.read_bytes().decode("utf-8", errors="replace")
        return rc, text, out.note("stdout")
    finally:
        out.finish(0)
        out.path.unlink(missing_ok=True)
