"""Text an engine wrote, made inert before it reaches a terminal.

An engine's message, version or name is data; printed raw, an escape sequence in it clears the
screen, moves the cursor over the summary ("ALL CHECKS PASSED"), retitles the window or hides a
hyperlink, and a lone surrogate cannot be written to a UTF-8 console at all.

Contract: `inert(value)` is `str(value)` with every control character but tab and newline (C0 with
carriage return, DEL, C1), every bidi control and every lone surrogate written as its Python escape
(`\\x1b`, `\\r`, `\\u202e`, `\\ud800`), visible and harmless; other text is unchanged. `shown(value)`
is `inert(value)` escaped for rich markup: what `conformance run` and `conformance report` print of
anything an engine or a file supplied goes through it.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape

_NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    return m.group(0).encode("unicode_escape").decode("ascii")


def inert(value: Any) -> str:
    return _NOT_TEXT.sub(_escaped, str(value))


def shown(value: Any) -> str:
    return escape(inert(value))
