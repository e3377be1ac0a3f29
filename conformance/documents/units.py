"""How the framework writes quantities for people: bytes in binary units."""

from __future__ import annotations


def human_bytes(n: float | None, none: str = "n/a") -> str:
    """`1.25 GiB`, `3.00 MiB`, `512 B`; `none` for a figure that was not reported."""
    if n is None:
        return none
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
