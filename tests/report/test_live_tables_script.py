"""benchmarks/live_tables.py --head-to-head: each rung's tok/s, TTFT p50 and TPOT p50 as ratios to the
oracle's with 95% intervals, judged against 1 (better / tie / worse), and whether the rung is at least
as good as the oracle's (no figure worse).

Three waves a side: at c = 1 the engine is faster everywhere (better), at c = 8 its waves straddle the
oracle's (tie), at c = 32 its TPOT is wholly above (worse: the rung is not at least as good); a rung the
oracle did not measure is not compared.
"""

from __future__ import annotations

import importlib.util

from conformance.paths import REPO_ROOT


def _script():
    spec = importlib.util.spec_from_file_location("live_tables", REPO_ROOT / "benchmarks" / "live_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rung(c: int, tok: list[float], ttft: list[float], tpot: list[float]) -> dict:
    return {"concurrency": c, "status": "ok", "output_tok_per_s": tok, "ttft_ms_p50": ttft, "tpot_ms_p50": tpot}


def test_head_to_head_judges_each_figure_against_one():
    oracle = {"rungs": [_rung(1, [900, 910, 905], [40, 41, 40], [0.80, 0.81, 0.80]),
                        _rung(8, [5000, 5100, 4900], [90, 95, 85], [0.90, 0.92, 0.88]),
                        _rung(32, [10000, 10100, 9900], [200, 210, 190], [1.50, 1.52, 1.48])]}
    engine = {"rungs": [_rung(1, [1000, 1010, 1005], [30, 31, 30], [0.60, 0.61, 0.60]),
                        _rung(8, [4900, 5200, 5000], [95, 85, 90], [0.92, 0.88, 0.90]),
                        _rung(32, [10000, 10100, 9900], [200, 190, 210], [1.80, 1.82, 1.79]),
                        _rung(64, [12000, 12000, 12000], [300, 300, 300], [2.0, 2.0, 2.0])]}
    rows = _script().head_to_head({"vllm": oracle, "reference": engine}, "vllm").splitlines()[2:]
    cells = {int(r.split(" | ")[1]): r.split(" | ")[2:] for r in rows}
    assert [c.rsplit(" ", 1)[1] for c in cells[1][:3]] == ["better", "better", "better"]
    assert cells[1][3].strip(" |") == "yes"
    assert [c.rsplit(" ", 1)[1] for c in cells[8][:3]] == ["tie", "tie", "tie"]
    assert cells[8][3].strip(" |") == "yes"
    assert [c.rsplit(" ", 1)[1] for c in cells[32][:3]] == ["tie", "tie", "worse"]
    assert cells[32][3].strip(" |") == "no"
    assert cells[64][3].strip(" |") == "not compared"
    assert cells[32][2].startswith("1.2")                         # 1.80 / 1.50, from the waves
