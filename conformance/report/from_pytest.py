"""The parity report of a pytest session (`pytest suites/ --parity-report DIR`).

Contract: `write_pytest_report(session, out_dir, results)` writes `out_dir/index.html` (the report
of last resort, `report.fallback`, where rendering raises) and `out_dir/observations.jsonl`. Each result (one per suite test: nodeid, outcome, engine, case_id,
observation, message) becomes one verdict named `<suite>.<test>`, with pytest's outcome
(passed -> pass, failed -> fail, skipped -> skip); the matrix folds them with `model.cell_outcome`.
Results without an engine and a case (tests outside the suites) are not part of the report.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from conformance.checks.verdicts import FAIL, PASS, SKIP, Verdict
from conformance.report.atomic import write_atomic
from conformance.report.fallback import fallback_html
from conformance.report.model import CaseEntry, EngineEntry, RunReport
from conformance.report.render import write_html

OUTCOME = {"passed": PASS, "failed": FAIL, "skipped": SKIP}


def _check_name(nodeid: str) -> str:
    path, _, test = nodeid.partition("::")
    suite = Path(path).parent.name or "suite"
    return f"{suite}.{test.split('[', 1)[0]}"


def _verdict(result: dict[str, Any]) -> Verdict:
    if result.get("verdict"):   # a table or golden test: the verdict it recorded
        d = result["verdict"]
        return Verdict(d["check"], d["engine"], d["case_id"], d["outcome"], d["message"], tuple(d["details"]),
                       d.get("cause", ""))
    lines = [l for l in (result.get("message") or "").splitlines() if l.strip()]
    message = lines[-1] if lines else ""
    return Verdict(_check_name(result["nodeid"]), result["engine"], result["case_id"],
                   OUTCOME.get(result["outcome"], FAIL), message, tuple(lines[-30:-1]))


def _case_entries(case_ids: Iterable[str], case_specs: Mapping[str, dict[str, Any]]) -> list[CaseEntry]:
    """Each reported case with the spec the session selected it with (a live case with its ladder as
    served); a case the session did not select (a test outside the suites naming one) gets a bare spec."""
    return [CaseEntry(cid, case_specs.get(cid, {"id": cid, "memory": {}})) for cid in case_ids]


def build_pytest_report(results: list[dict[str, Any]], case_specs: Mapping[str, dict[str, Any]] | None = None,
                        origin: str = "pytest", roles: dict[str, str] | None = None,
                        expectations: tuple = ()) -> RunReport:
    """`case_specs` by case id: the session's selected cases (plan and live, from any case directory),
    so the report reads each case as `conformance run`'s does (its memory bound, its live section and
    the oracles' live goldens); `roles` by engine (oracles' failed checks read as findings);
    `expectations` the session's (`--expectations`), read in the report as `conformance run` reads them."""
    mine = [r for r in results if r.get("engine") and r.get("case_id")]
    observations: dict[tuple[str, str], dict[str, Any]] = {}
    for r in mine:
        if r.get("observation"):
            observations[(r["case_id"], r["engine"])] = r["observation"]
    case_ids = list(dict.fromkeys(r["case_id"] for r in mine))
    engine_names = list(dict.fromkeys(r["engine"] for r in mine))
    versions = {e: o["engine"]["version"] for (_, e), o in observations.items()}
    roles = roles or {}
    engines = [EngineEntry(n, versions.get(n), "planned", role=roles.get(n)) for n in engine_names]
    return RunReport(
        run_id=time.strftime("%Y%m%d-%H%M%S"), title="DFlash parity report", engines=tuple(engines),
        cases=tuple(_case_entries(case_ids, case_specs or {})), observations=observations,
        verdicts=tuple(_verdict(r) for r in mine), finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"), origin=origin,
        expectations=tuple(expectations),
    )


def write_pytest_report(session, out_dir: Path, results: list[dict[str, Any]], roles: dict[str, str] | None = None,
                        expectations: tuple = (), case_specs: Mapping[str, dict[str, Any]] | None = None) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = session.config
    origin = "pytest " + " ".join(str(a) for a in config.invocation_params.args)
    report = build_pytest_report(results, case_specs, origin.strip(), roles, expectations)
    with (out_dir / "observations.jsonl").open("w") as fh:
        for obs in report.observations.values():
            fh.write(json.dumps(obs, sort_keys=True) + "\n")
    try:
        index = write_html(report, out_dir / "index.html")
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the report of last resort, as `conformance run` writes
        index = write_atomic(out_dir / "index.html", fallback_html(report, exc))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"parity report: {index}")
    return index
