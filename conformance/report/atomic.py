"""Report files written whole or not at all.

Contract: `write_atomic(path, data)` writes `data` to a temp file of its own in `path`'s directory
and renames it over `path`: a reader (a CI job, a browser) sees the old file or the new one, never a
part; on any failure (a full disk, Ctrl-C) the temp file is removed, `path` is left as it was and
the error is raised. The file's mode is 0644 less the umask, like the run's other files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None:   # name the file meant, not the temp
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return path


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask sets it too)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
