"""Engines' colours in a report: distinct for any number of engines, derived deterministically.

Contract: `palette(engines)` maps each engine of a report (in the report's order) to its colour, the
same in every chart and legend of that report; no two engines share one, however many there are
(`palette_colours(n)` gives n distinct colours). `engine_colour(name, index, colours)` reads a
series' colour from such a mapping ("<engine> p50" takes its engine's).
"""

from __future__ import annotations

from typing import Mapping, Sequence

# Engines' colours: a function of the run's engine list (`palette`), the same in every chart and legend
# of one report; no two engines of a report share one, however many there are.
ENGINE_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#7f7f7f", "#bcbd22")   # well apart for up to 10 engines (Tableau 10); then golden-angle hues


def _hsl_hex(hue_deg: float, saturation: float, lightness: float) -> str:
    import colorsys

    r, g, b = colorsys.hls_to_rgb(hue_deg / 360.0, lightness, saturation)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def palette_colours(n: int) -> list[str]:
    """`n` distinct colours, deterministic: the first 10 from `ENGINE_PALETTE`, then hues 137.5 degrees
    apart (the golden angle) at three lightness levels; a colour already taken is stepped past."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        if i < len(ENGINE_PALETTE):
            colour = ENGINE_PALETTE[i]
        else:
            j = i - len(ENGINE_PALETTE)
            colour = _hsl_hex((17.0 + j * 137.508) % 360.0, 0.65, (0.38, 0.52, 0.30)[j % 3])
        if colour not in out:
            out.append(colour)
        i += 1
    return out


def palette(engines: Sequence[str]) -> dict[str, str]:
    """Each engine's colour in a report whose engines are `engines` (in the report's order)."""
    names = list(dict.fromkeys(engines))
    return dict(zip(names, palette_colours(len(names))))


def engine_colour(engine: str, index: int = 0, colours: Mapping[str, str] | None = None) -> str:
    """`engine`'s colour in `colours` (a report's `palette`); a series named "<engine> p50" takes its
    engine's; without a mapping, the `index`-th colour of the palette."""
    if colours:
        if engine in colours:
            return colours[engine]
        head = engine.rsplit(" ", 1)[0]
        if head in colours:
            return colours[head]
    return palette_colours(index + 1)[index]
