"""The inline SVG charts: structure, geometry against the bytes they draw, and escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.report import charts

SVG = "{http://www.w3.org/2000/svg}"
MIB = 1 << 20


def parse(markup) -> ET.Element:
    return ET.fromstring(str(markup))


def cls(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


def bars_of(svg: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-engine"): g for g in svg.iter(f"{SVG}g") if "ledger-bar" in cls(g)}


def rects(bar: ET.Element, kind: str | None = None) -> list[ET.Element]:
    return [r for r in bar.iter(f"{SVG}rect") if "segment" in cls(r) and (kind is None or kind in cls(r))]


def bound_x(bar: ET.Element) -> float:
    (line,) = [l for l in bar.iter(f"{SVG}line") if "bound-line" in cls(l)]
    assert line.get("x1") == line.get("x2")
    return float(line.get("x1"))


def right(r: ET.Element) -> float:
    return float(r.get("x")) + float(r.get("width"))


def test_ledger_bar_per_engine_with_outside_past_the_bound():
    bars = [charts.LedgerBar("reference", 256 * MIB, (("attention_kv", 60 * MIB), ("recurrent_state", 120 * MIB)), ()),
            charts.LedgerBar("sglang", 256 * MIB, (("attention_kv", 100 * MIB),), (("draft_kv", 90 * MIB),))]
    svg = parse(charts.ledger_chart(bars))
    got = bars_of(svg)
    assert list(got) == ["reference", "sglang"]
    ref, sgl = got["reference"], got["sglang"]
    assert bound_x(ref) == bound_x(sgl)
    # Inside: segments stack from the same origin and end before the bound, widths in the bytes' ratio.
    a, r = rects(ref)
    assert right(a) == pytest.approx(float(r.get("x")), abs=0.2)
    assert float(r.get("width")) / float(a.get("width")) == pytest.approx(120 / 60, rel=0.01)
    assert right(r) < bound_x(ref)
    # Outside: drawn past the bound line, in the warning colour, its width in scale with the rest.
    (out,) = rects(sgl, "outside-bound")
    assert out.get("data-category") == "draft_kv"
    assert float(out.get("x")) == pytest.approx(bound_x(sgl), abs=0.2)
    assert out.get("fill") == charts.WARNING_COLOUR
    (inner,) = [x for x in rects(sgl) if "outside-bound" not in cls(x)]
    assert float(out.get("width")) / float(inner.get("width")) == pytest.approx(90 / 100, rel=0.01)
    assert not rects(ref, "outside-bound") and not rects(ref, "over-bound")


def test_ledger_part_over_the_bound_is_split_and_marked():
    bar = charts.LedgerBar("port", 100 * MIB, (("attention_kv", 80 * MIB), ("draft_kv", 50 * MIB)), ())
    (g,) = bars_of(parse(charts.ledger_chart([bar]))).values()
    (over,) = rects(g, "over-bound")
    assert over.get("data-category") == "draft_kv"
    assert float(over.get("x")) == pytest.approx(bound_x(g), abs=0.2)
    inside_draft = [r for r in rects(g) if r.get("data-category") == "draft_kv" and "over-bound" not in cls(r)]
    (d,) = inside_draft
    assert right(d) == pytest.approx(bound_x(g), abs=0.2)
    assert float(over.get("width")) / float(d.get("width")) == pytest.approx(30 / 20, rel=0.01)


def test_chart_text_is_escaped():
    name = '<script>alert(1)</script>&"'
    svg_text = str(charts.ledger_chart([charts.LedgerBar(name, 10, (("a<b", 5),), ())]))
    assert "<script>" not in svg_text
    svg = parse(svg_text)   # still well-formed XML
    assert list(bars_of(svg)) == [name]
    trace = str(charts.trace_chart([(name, [1, 2])]))
    assert "<script>" not in trace
    (line,) = [p for p in parse(trace).iter(f"{SVG}polyline")]
    assert line.get("data-engine") == name


def test_trace_series_per_engine_and_budget_line():
    series = [("reference", [256, 256, 100, 8]), ("vllm", [256, 256, 100, 8, 0]), ("sglang", [128, 64])]
    svg = parse(charts.trace_chart(series, [(256, "budget")]))
    lines = {p.get("data-engine"): p for p in svg.iter(f"{SVG}polyline") if "trace-series" in cls(p)}
    assert list(lines) == ["reference", "vllm", "sglang"]
    for engine, values in series:
        pts = [tuple(map(float, xy.split(","))) for xy in lines[engine].get("points").split()]
        assert len(pts) == len(values) == int(lines[engine].get("data-num-points"))
        xs = [x for x, _ in pts]
        assert xs == sorted(xs) and len(set(xs)) == len(xs)
        # Larger values are drawn higher (smaller y), equal values at the same height.
        order = sorted(range(len(values)), key=lambda i: values[i])
        ys = [pts[i][1] for i in order]
        assert ys == sorted(ys, reverse=True)
    (budget,) = [l for l in svg.iter(f"{SVG}line") if "budget-line" in cls(l)]
    top_y = float(lines["reference"].get("points").split()[0].split(",")[1])
    assert float(budget.get("y1")) == pytest.approx(top_y, abs=0.2)


def test_ladder_series_on_a_log_axis():
    svg = parse(charts.ladder_chart([("reference", [(1, 10.0), (2, 19.0), (4, 30.0)]), ("vllm", [(1, 9.0), (4, 31.0)])]))
    lines = {p.get("data-engine"): p for p in svg.iter(f"{SVG}polyline") if "ladder-series" in cls(p)}
    assert set(lines) == {"reference", "vllm"}
    xs = [float(xy.split(",")[0]) for xy in lines["reference"].get("points").split()]
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)   # 1 -> 2 -> 4: equal steps on log2


def test_human_bytes():
    assert charts.human_bytes(None) == "n/a"
    assert charts.human_bytes(3 * MIB) == "3.00 MiB"
    assert charts.human_bytes(512) == "512 B"
