"""Text shown in a report, made inert: bidirectional controls and NUL/C0 control bytes neutralised.

Contract: `neutralise(s)` returns `s` with every bidi embedding/override/isolate/mark (U+202A-U+202E,
U+2066-U+2069, U+200E, U+200F, U+061C) and every C0 control but tab, newline and carriage return
(NUL included) replaced by a visible `[U+XXXX]`. A U+202E in an engine's message or a case's tag
would otherwise reverse the text after it on the page; NUL bytes do not belong in HTML. Markup
(already-built HTML, such as the charts) is returned unchanged: its text went through here first.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup

_INERT = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _visible(m: re.Match) -> str:
    return f"[U+{ord(m.group(0)):04X}]"


def neutralise(value: Any) -> Any:
    """`value` with dangerous characters made visible when it is a plain string; else `value`."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return _INERT.sub(_visible, value)
    return value
