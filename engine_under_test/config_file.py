"""Reading a model directory's config.json, safely (the engine's own reader; no framework import).

Contract: `read_config(path)` returns the parsed JSON object, or raises `ValueError` naming the
file for anything that is not a small regular file holding one JSON object: a FIFO (would block),
a device or a symlink to one (/dev/zero would read until memory runs out), more than
`MAX_CONFIG_BYTES`, not UTF-8, invalid JSON, nesting past `MAX_DEPTH`, an integer past Python's
digit limit. The size is checked before reading, and the read stops at the limit anyway.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 64
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _too_deep(text: str) -> bool:
    depth = 0
    for m in _BRACKETS.finditer(text):
        tok = m.group(0)
        if tok in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif tok in "]}":
            depth -= 1
    return False


def read_config(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: no config.json") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: not a regular file (a FIFO, device or directory cannot be a config.json)")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: {st.st_size} bytes, larger than the {MAX_CONFIG_BYTES} a config.json may be")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: larger than the {MAX_CONFIG_BYTES} bytes a config.json may be")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if _too_deep(text):
        raise ValueError(f"{path}: (root): nested deeper than {MAX_DEPTH} levels")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, ValueError) as exc:   # deep nesting; an integer past the digit limit
        raise ValueError(f"{path}: not usable JSON: {str(exc)[:200] or type(exc).__name__}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: (root): not a JSON object")
    return doc
