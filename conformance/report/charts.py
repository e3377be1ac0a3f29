"""Inline SVG charts for the parity report, built from escaped text (no JS, no network).

Contract: each function returns `markupsafe.Markup` holding one `<svg>` whose every text and
attribute value went through `markupsafe.escape`. Structure a test can query:
- ledger chart: one `g.ledger-bar[data-engine]` per engine, segments `rect.segment[data-category]`
  (`.outside-bound` for categories the engine keeps outside the bound, red; `.outside-bound.finding`,
  neutral grey, for an oracle's: a finding about the oracle; `.over-bound` for the part of a bounded
  category past the bound), and `line.bound-line`.
- trace chart: one `polyline.trace-series[data-engine]` per engine, `line.budget-line` per budget,
  `polyline.trace-series-extra[data-engine]` for an engine's tokens plus drafting slots per step.
Engines' colours come from `palette(engines)` (distinct for any number); labels and legends are sized
to the longest name, never cut.
- ladder chart: one `polyline.ladder-series[data-engine]` per engine.
- percentile chart: one `polyline.percentile-series[data-engine]` per (engine, percentile), its
  data-engine "<engine> p50" / "p90" / "p99".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from markupsafe import Markup
from markupsafe import escape as _escape

from conformance.documents.units import human_bytes  # noqa: F401  (templates and the charts use it from here)
from conformance.report.palette import ENGINE_PALETTE, engine_colour
from conformance.report.text import neutralise


def escape(value: object) -> Markup:
    """markupsafe.escape of the value with bidi controls and NUL made visible (`report.text`)."""
    return _escape(neutralise(value))


CATEGORY_COLOURS = {"attention_kv": "#63b3ed", "recurrent_state": "#9f7aea", "draft_kv": "#f6ad55",
                    "intermediate_state": "#d6bcfa", "weights": "#4a5568", "activations": "#718096",
                    "workspace": "#2d3748", "padding": "#cbd5e0", "unused": "#e2e8f0", "unassigned": "#edf2f7"}
WARNING_COLOUR = "#e53e3e"
WIDTH_PX = 960
SERIES_DASHES = ("", "", "4 3", "8 3", "1 3")


def series_width(index: int) -> float:
    """Earlier series wider, each later one narrower (7.5, 6, 4.5, 3, then 1.5): series that agree draw
    on top of each other and every one stays visible at its edges."""
    return max(1.5, 7.5 - 1.5 * index)
LABEL_PX = 120


def category_colour(category: str, index: int = 0) -> str:
    return CATEGORY_COLOURS.get(category, ENGINE_PALETTE[index % len(ENGINE_PALETTE)])




def _tag(name: str, text: str | None = None, **attrs: object) -> str:
    parts = [name]
    for key, value in attrs.items():
        if value is None:
            continue
        parts.append(f'{key.rstrip("_").replace("_", "-")}="{escape(value)}"')
    opening = "<" + " ".join(parts)
    if text is None:
        return opening + "/>"
    return f"{opening}>{escape(text)}</{name}>"


def _svg(width: int, height: int, body: Iterable[str], cls: str, label: str) -> Markup:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(cls)}" role="img" '
            f'aria-label="{escape(label)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">')
    return Markup(head + "".join(body) + "</svg>")


def _nice_step(span: float, num_ticks: int = 5) -> float:
    raw = span / max(num_ticks, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


# --- memory ledger --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LedgerBar:
    """One engine's bar: `segments` are (category, bytes) in the bound's scope, stacked from zero;
    `outside` are (category, bytes) the engine allocates outside its bound, drawn past the bound."""

    engine: str
    bound_bytes: int | None
    segments: tuple[tuple[str, int], ...]
    outside: tuple[tuple[str, int], ...]
    finding: bool = False    # an oracle's bar: what lies outside its bound is a finding, drawn neutral


def label_px(labels: Iterable[str], minimum: int = LABEL_PX) -> int:
    """Room for the longest label at 11 px (about 7 px a character): names are drawn whole, never cut."""
    return max([minimum, *(16 + 7 * len(str(t)) for t in labels)])


def ledger_chart(bars: Sequence[LedgerBar]) -> Markup:
    row_px, gap_px, top_px, axis_px, legend_row_px = 30, 14, 20, 24, 16
    left_px = label_px(bar.engine for bar in bars)
    legend = _legend_rows(bars, left_px)
    height = top_px + len(bars) * (row_px + gap_px) + axis_px + legend_row_px * len(legend) + 6
    plot_px = WIDTH_PX - left_px - 20
    ends = [sum(b for _, b in bar.segments) for bar in bars]
    ends = [max(e, bar.bound_bytes or 0) + sum(b for _, b in bar.outside) for e, bar in zip(ends, bars)]
    top_bytes = max([1, *ends, *(bar.bound_bytes or 0 for bar in bars)]) * 1.05
    x = lambda v: left_px + plot_px * v / top_bytes  # noqa: E731
    body: list[str] = []
    cats: dict[str, str] = {}
    for i, bar in enumerate(bars):
        y = top_px + i * (row_px + gap_px)
        body.append(f'<g class="ledger-bar" data-engine="{escape(bar.engine)}">')
        body.append(_tag("text", bar.engine, x=left_px - 8, y=y + row_px * 0.65, text_anchor="end",
                         class_="bar-label"))
        cursor, bound = 0, bar.bound_bytes
        for category, num_bytes in bar.segments:
            colour = cats.setdefault(category, category_colour(category, len(cats)))
            inside = num_bytes if bound is None else max(0, min(cursor + num_bytes, bound) - cursor)
            if inside:
                body.append(_segment(x(cursor), x(cursor + inside), y, row_px, colour, "segment", category,
                                     f"{bar.engine} {category}: {human_bytes(num_bytes)}"))
            if num_bytes - inside > 0:
                body.append(_segment(x(cursor + inside), x(cursor + num_bytes), y, row_px, WARNING_COLOUR,
                                     "segment over-bound", category,
                                     f"{bar.engine} {category}: {human_bytes(num_bytes - inside)} past the bound"))
            cursor += num_bytes
        cursor = max(cursor, bound or 0)
        for category, num_bytes in bar.outside:
            if bar.finding:
                body.append(_segment(x(cursor), x(cursor + num_bytes), y, row_px, FINDING_COLOUR,
                                     "segment outside-bound finding", category,
                                     f"{bar.engine} {category}: {human_bytes(num_bytes)} outside the bound "
                                     f"(a finding about the oracle, not a failure)"))
            else:
                body.append(_segment(x(cursor), x(cursor + num_bytes), y, row_px, WARNING_COLOUR,
                                     "segment outside-bound", category,
                                     f"{bar.engine} {category}: {human_bytes(num_bytes)} OUTSIDE the bound"))
            cursor += num_bytes
        if bound is not None:
            body.append(_tag("line", None, x1=f"{x(bound):.1f}", x2=f"{x(bound):.1f}", y1=y - gap_px / 2,
                             y2=y + row_px + gap_px / 2, class_="bound-line", data_engine=bar.engine,
                             stroke="#1a202c", stroke_width=3))
            if i == 0 or bound != bars[i - 1].bound_bytes:
                body.append(_tag("text", f"bound {human_bytes(bound)}", x=f"{x(bound) - 4:.1f}", y=y - 2,
                                 text_anchor="end", class_="bound-label", font_size=10, font_weight="bold"))
        body.append("</g>")
    base = top_px + len(bars) * (row_px + gap_px)
    unit = next((u for u in (1 << 30, 1 << 20, 1 << 10) if top_bytes >= 2 * u), 1)
    step = _nice_step(top_bytes / unit) * unit
    tick = 0.0
    while tick <= top_bytes:
        body.append(_tag("line", None, x1=f"{x(tick):.1f}", x2=f"{x(tick):.1f}", y1=base - 6, y2=base,
                         stroke="#718096"))
        body.append(_tag("text", human_bytes(tick), x=f"{x(tick):.1f}", y=base + 14, text_anchor="middle",
                         font_size=10, class_="tick"))
        tick += step
    for r, row in enumerate(legend):
        ly, legend_x = base + axis_px + legend_row_px * r, left_px
        for category in row:
            colour = {OUTSIDE_LABEL: WARNING_COLOUR, FINDING_LABEL: FINDING_COLOUR}.get(category) or cats.get(category, "#ccc")
            body.append(_tag("rect", None, x=legend_x, y=ly, width=10, height=10, fill=colour))
            body.append(_tag("text", category, x=legend_x + 14, y=ly + 9, font_size=11))
            legend_x += _legend_px(category)
    return _svg(WIDTH_PX, height, body, "chart ledger-chart", "memory ledger against the bound, per engine")


OUTSIDE_LABEL = "outside / past the bound"
FINDING_LABEL = "outside an oracle's bound (a finding about the oracle)"
FINDING_COLOUR = "#a0aec0"


def _legend_px(label: str) -> int:
    return 24 + 7 * len(label)


def _legend_rows(bars: Sequence[LedgerBar], left_px: int = LABEL_PX) -> list[list[str]]:
    labels = list(dict.fromkeys(c for bar in bars for c, _ in bar.segments)) + [OUTSIDE_LABEL]
    if any(bar.finding and bar.outside for bar in bars):
        labels.append(FINDING_LABEL)
    rows: list[list[str]] = [[]]
    used = 0
    for label in labels:
        if rows[-1] and used + _legend_px(label) > WIDTH_PX - left_px:
            rows.append([])
            used = 0
        rows[-1].append(label)
        used += _legend_px(label)
    return rows


def _segment(x0: float, x1: float, y: int, h: int, fill: str, cls: str, category: str, title: str) -> str:
    warn = "bound" in cls   # outside / over the bound: outlined, and never too thin to see
    if "finding" in cls:    # an oracle's: outlined dashed in grey, a mark apart from a failure's red
        hatch = ' stroke="#4a5568" stroke-width="2" stroke-dasharray="4 2"'
    elif warn:
        hatch = ' stroke="#742a2a" stroke-width="2"'
    else:
        hatch = ' stroke="#fff" stroke-width="0.5"'
    return (f'<rect class="{escape(cls)}" data-category="{escape(category)}" x="{x0:.1f}" y="{y}" '
            f'width="{max(x1 - x0, 4.0 if warn else 0.5):.1f}" height="{h}" fill="{escape(fill)}"{hatch}>'
            f"{_tag('title', title)}</rect>")


# --- line charts: trace and ladder ----------------------------------------------------------------

def _line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], cls: str, series_cls: str,
                x_label: str, y_label: str, hlines: Sequence[tuple[float, str]] = (), log2_x: bool = False,
                label: str = "", colours: Mapping[str, str] | None = None,
                extra: Sequence[tuple[str, Sequence[tuple[float, float]], str]] = ()) -> Markup:
    """`extra`: (engine, points, legend label) drawn thin and dashed in the engine's colour (class
    `<series_cls>-extra`), e.g. a trace's tokens plus drafting slots."""
    legend_labels = [e for e, _ in series] + [t for _, _, t in extra]
    height, left, top, bottom = 300 + max(0, 16 * len(legend_labels) - 250), 70, 16, 40
    right = label_px(legend_labels, 150) + 24
    plot_w, plot_h = WIDTH_PX - left - right, height - top - bottom
    fx = (lambda v: math.log2(max(v, 1))) if log2_x else (lambda v: v)  # noqa: E731
    xs = [fx(p[0]) for _, pts in series for p in pts] or [0.0]
    ys = [p[1] for _, pts in series for p in pts] + [p[1] for _, pts, _ in extra for p in pts] \
        + [h for h, _ in hlines] + [1.0]
    x_lo, x_hi = min(xs), max(xs)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    y_hi = max(ys) * 1.08
    px = lambda v: left + plot_w * (fx(v) - x_lo) / (x_hi - x_lo)  # noqa: E731
    py = lambda v: top + plot_h * (1 - v / y_hi)  # noqa: E731
    body = [_tag("line", None, x1=left, x2=left, y1=top, y2=top + plot_h, stroke="#718096"),
            _tag("line", None, x1=left, x2=left + plot_w, y1=top + plot_h, y2=top + plot_h, stroke="#718096"),
            _tag("text", x_label, x=left + plot_w / 2, y=height - 6, text_anchor="middle", font_size=11),
            _tag("text", y_label, x=12, y=top + plot_h / 2, text_anchor="middle", font_size=11,
                 transform=f"rotate(-90 12 {top + plot_h / 2})")]
    step = _nice_step(y_hi)
    tick = 0.0
    while tick <= y_hi:
        body.append(_tag("text", f"{tick:g}", x=left - 6, y=f"{py(tick) + 4:.1f}", text_anchor="end", font_size=10))
        body.append(_tag("line", None, x1=left, x2=left + plot_w, y1=f"{py(tick):.1f}", y2=f"{py(tick):.1f}",
                         stroke="#edf2f7"))
        tick += step
    x_ticks = sorted({p[0] for _, pts in series for p in pts}) if log2_x else None
    if x_ticks is None:
        span = x_hi - x_lo
        x_step = max(1, round(_nice_step(span)))
        x_ticks = list(range(int(x_lo), int(x_hi) + 1, x_step))
    for t in x_ticks:
        body.append(_tag("text", f"{t:g}", x=f"{px(t):.1f}", y=top + plot_h + 14, text_anchor="middle",
                         font_size=10))
    for value, text in hlines:
        body.append(_tag("line", None, x1=left, x2=left + plot_w, y1=f"{py(value):.1f}", y2=f"{py(value):.1f}",
                         class_="budget-line", stroke="#4a5568", stroke_dasharray="5 4"))
        body.append(_tag("text", text, x=left + 6, y=f"{py(value) - 4:.1f}", font_size=10, class_="budget-label"))
    for i, (engine, pts) in enumerate(series):
        # NOTE: engines that agree draw on top of each other: earlier series are wider and paler,
        # later ones thinner and dashed, so every one stays visible.
        colour, width, dash = engine_colour(engine, i, colours), series_width(i), SERIES_DASHES[i % len(SERIES_DASHES)]
        coords = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in pts)
        body.append(f'<polyline class="{escape(series_cls)}" data-engine="{escape(engine)}" '
                    f'data-num-points="{len(pts)}" points="{escape(coords)}" fill="none" '
                    f'stroke="{escape(colour)}" stroke-width="{width}" stroke-opacity="0.8"'
                    + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        if len(pts) <= 80:
            for a, b in pts:
                body.append(_tag("circle", None, cx=f"{px(a):.1f}", cy=f"{py(b):.1f}", r=width / 2 + 1,
                                 fill=colour, fill_opacity=0.8))
        ly = top + 10 + 16 * i
        body.append(_tag("line", None, x1=left + plot_w + 8, x2=left + plot_w + 28, y1=ly, y2=ly, stroke=colour,
                         stroke_width=width, stroke_dasharray=dash or None))
        body.append(_tag("text", engine, x=left + plot_w + 32, y=ly + 4, font_size=11))
    for j, (engine, pts, text) in enumerate(extra):
        colour = engine_colour(engine, j, colours)
        coords = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in pts)
        body.append(f'<polyline class="{escape(series_cls)}-extra" data-engine="{escape(engine)}" '
                    f'data-num-points="{len(pts)}" points="{escape(coords)}" fill="none" '
                    f'stroke="{escape(colour)}" stroke-width="1.5" stroke-dasharray="2 2"/>')
        ly = top + 10 + 16 * (len(series) + j)
        body.append(_tag("line", None, x1=left + plot_w + 8, x2=left + plot_w + 28, y1=ly, y2=ly, stroke=colour,
                         stroke_width=1.5, stroke_dasharray="2 2"))
        body.append(_tag("text", text, x=left + plot_w + 32, y=ly + 4, font_size=11))
    return _svg(WIDTH_PX, height, body, cls, label)


def trace_chart(series: Sequence[tuple[str, Sequence[int]]], budgets: Sequence[tuple[int, str]] = (),
                colours: Mapping[str, str] | None = None,
                charged: Sequence[tuple[str, Sequence[int], str]] = ()) -> Markup:
    """Scheduled tokens per step, one polyline per engine; `budgets` are (tokens, label) lines;
    `charged` are (engine, tokens + drafting slots per step, label): what the step budget is charged
    (polyline `trace-series-extra`), drawn where the slots are not zero."""
    pts = [(engine, [(float(i), float(v)) for i, v in enumerate(values)]) for engine, values in series]
    extra = [(engine, [(float(i), float(v)) for i, v in enumerate(values)], text) for engine, values, text in charged]
    return _line_chart(pts, "chart trace-chart", "trace-series", "step", "scheduled tokens",
                       [(float(v), t) for v, t in budgets], label="scheduled tokens per step, per engine",
                       colours=colours, extra=extra)


def ladder_chart(series: Sequence[tuple[str, Sequence[tuple[int, float]]]],
                 colours: Mapping[str, str] | None = None) -> Markup:
    """Output tokens/s against concurrency (log2 axis), one polyline per engine."""
    pts = [(engine, [(float(c), float(t)) for c, t in rungs]) for engine, rungs in series]
    return _line_chart(pts, "chart ladder-chart", "ladder-series", "concurrency", "output tok/s", log2_x=True,
                       label="throughput ladder, per engine", colours=colours)


def percentile_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], metric: str,
                     x_label: str = "concurrency", colours: Mapping[str, str] | None = None) -> Markup:
    """One latency metric's percentiles (ms) per rung: series named "<engine> p50" etc. (log2 x axis)."""
    return _line_chart(series, f"chart percentile-chart {metric.replace('_', '-')}", "percentile-series", x_label,
                       metric.replace("_ms", " ms").upper().replace(" MS", " ms"), log2_x=True,
                       label=f"{metric} percentiles per rung, per engine", colours=colours)
