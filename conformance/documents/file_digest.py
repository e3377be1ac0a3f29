"""The sha256 of a file, read in blocks: the one digest oracle packs and release packages record."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_of(path: Path) -> str:
    """Hex sha256 of the file at `path` (never read whole into memory)."""
    with Path(path).open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
