"""Do the two faces agree? Compare the verdicts of `conformance run --live` (its run directory's
verdicts.jsonl) with those of `pytest suites/live -m gpu --verdicts-out FILE`, measured one after the
other on the same card: one line per (engine, case, check) with each face's outcome, the differences
marked, and the exit status 0 only where the two sets of (check, engine, case, outcome) are equal.

    python benchmarks/faces_agree.py RUN_VERDICTS.jsonl PYTEST_VERDICTS.jsonl

Each face serves every engine itself, so a timing verdict whose interval lies near its band can come out
decided in one measurement and inconclusive in the other. Each difference is marked by its kind:
`(one side undecided)` where one face says inconclusive and the other decided (pass, fail or finding),
`<- CONTRADICTS` where both decided and disagree, `(only in one face)` where a verdict is missing from
the other. All of them count as differences and make the exit status 1: this script reports, it does not
excuse. The last line counts each kind."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _outcomes(path: Path) -> dict[tuple[str, str, str], str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(d["engine"], d["case_id"], d["check"]): d["outcome"] for d in rows}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/faces_agree.py RUN_VERDICTS.jsonl PYTEST_VERDICTS.jsonl", file=sys.stderr)
        return 2
    job, suite = (_outcomes(Path(a)) for a in argv)
    kinds = {"identical": 0, "one side undecided": 0, "contradicts": 0, "only in one face": 0}
    print(f"{'engine':<12} {'case':<22} {'check':<44} {'conformance run':<16} pytest suites")
    for key in sorted(job.keys() | suite.keys()):
        a, b = job.get(key, "-"), suite.get(key, "-")
        kind = _difference(a, b)
        kinds[kind] += 1
        mark = "" if kind == "identical" else "  <- CONTRADICTS" if kind == "contradicts" else f"  <- differs ({kind})"
        print(f"{key[0]:<12} {key[1]:<22} {key[2]:<44} {a:<16} {b}{mark}")
    differ = sum(n for kind, n in kinds.items() if kind != "identical")
    print(f"{len(job)} verdicts from conformance run, {len(suite)} from pytest suites; {differ} differ "
          f"({', '.join(f'{kind}: {n}' for kind, n in kinds.items())})")
    return 1 if differ else 0


def _difference(a: str, b: str) -> str:
    """How two outcomes of one (engine, case, check) differ ("-": the face has no such verdict)."""
    if a == b:
        return "identical"
    if "-" in (a, b):
        return "only in one face"
    if "inconclusive" in (a, b):
        return "one side undecided"
    return "contradicts"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
