"""The history's trend view: one self-contained HTML page, an inline SVG per series.

Contract: `trend_html(series_with_changes, title)` returns the page: per series its geometric mean per
commit (a line), each commit's samples' range (a whisker), the noise band of the first commit's
value (shaded) and every change point (red: a regression, green: an improvement), with its interval.
Every text goes through `html.escape`. `write_trend(path, ...)` writes it atomically.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

from conformance.nightly.changes import Change, Series
from conformance.report.atomic import write_atomic

W, H, PAD_X, PAD_Y = 640, 180, 56, 24


def _svg(series: Series, changes: Sequence[Change]) -> str:
    pts = series.points
    values = [x for p in pts for x in p.samples]
    base = pts[0].geomean
    lo_b, hi_b = series.band()
    y_min, y_max = min(values + [base * lo_b]), max(values + [base * hi_b])
    span = (y_max - y_min) or max(abs(y_max), 1.0)
    x = lambda i: PAD_X + (W - 2 * PAD_X) * (i / max(1, len(pts) - 1))  # noqa: E731
    y = lambda v: H - PAD_Y - (H - 2 * PAD_Y) * ((v - y_min) / span)   # noqa: E731
    out = [f'<svg class="trend" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'role="img" aria-label="{html.escape(series.label())}">',
           f'<rect x="{PAD_X}" y="{y(base * hi_b):.1f}" width="{W - 2 * PAD_X}" height="{max(0.0, y(base * lo_b) - y(base * hi_b)):.1f}" '
           'fill="#e8eef8"><title>noise band of the first commit</title></rect>',
           f'<text x="4" y="{PAD_Y}" font-size="10">{y_max:.4g}</text>',
           f'<text x="4" y="{H - PAD_Y}" font-size="10">{y_min:.4g}</text>']
    for i, p in enumerate(pts):
        out.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(min(p.samples)):.1f}" y2="{y(max(p.samples)):.1f}" '
                   'stroke="#999"/>')
    line = " ".join(f"{x(i):.1f},{y(p.geomean):.1f}" for i, p in enumerate(pts))
    out.append(f'<polyline points="{line}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    changed = {c.index: c for c in changes}
    for i, p in enumerate(pts):
        c = changed.get(i)
        colour = "#c62828" if c and c.kind == "regression" else "#2e7d32" if c else "#1f5fbf"
        tip = f"{p.commit[:12]}: {p.geomean:.4g} ({len(p.samples)} samples)"
        if c:
            tip += f"; {c.kind} against {c.since[:12]}: {c.interval.text()}"
        out.append(f'<circle cx="{x(i):.1f}" cy="{y(p.geomean):.1f}" r="{5 if c else 3}" fill="{colour}"'
                   f'{" class=" + chr(34) + "change " + c.kind + chr(34) if c else ""}><title>{html.escape(tip)}</title></circle>')
        out.append(f'<text x="{x(i):.1f}" y="{H - 6}" font-size="9" text-anchor="middle">{html.escape(p.commit[:7])}</text>')
    out.append("</svg>")
    return "".join(out)


def trend_html(items: Sequence[tuple[Series, Sequence[Change]]], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:1.5em} section{margin-bottom:1.2em} "
             ".regression{color:#c62828} .improvement{color:#2e7d32}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p>{len(items)} series; {sum(len(c) for _, c in items)} change point(s). A change point's interval "
             "(ratio of geometric means to the commits before it, 95% Welch t) lies wholly outside the figure's noise "
             "band.</p>"]
    for series, changes in items:
        lo, hi = series.band()
        said = "; ".join(f"<span class='{c.kind}'>{c.kind} at {html.escape(c.commit[:12])}: "
                         f"{html.escape(c.interval.text())}</span>" for c in changes) or "no change point"
        parts.append(f"<section class='series' data-series='{html.escape(series.label(), quote=True)}' "
                     f"data-changes='{len(changes)}'><h3>{html.escape(series.label())}</h3>"
                     f"<p>band [{lo:.3g}, {hi:.3g}] · {said}</p>{_svg(series, changes)}</section>")
    parts.append("</body></html>")
    return "".join(parts)


def write_trend(path: Path, items: Sequence[tuple[Series, Sequence[Change]]], title: str) -> Path:
    return write_atomic(Path(path), trend_html(items, title).encode("utf-8"))
