"""Mutation score of the reference engine's planning core (mutmut 3.x; not a CI gate).

Usage:
    .venv/bin/python benchmarks/mutation_score.py --run budget      # mutate one module (niced, 1 worker)
    .venv/bin/python benchmarks/mutation_score.py --rerun-survivors # after adding tests: survivors only
    .venv/bin/python benchmarks/mutation_score.py                   # the table and the survivors
    .venv/bin/python benchmarks/mutation_score.py --prove MUTANT TEST   # TEST passes, and fails on MUTANT

Contract:
- `--run MODULE` runs `nice -n 19 mutmut run --max-children 1 "engine_under_test.MODULE.*"` under
  `timeout` (one module at a time; the configuration is `[tool.mutmut]` in pyproject.toml: the
  planning modules, and the fast planning tests as the test selection, see benchmarks/MUTATION.md).
- Without `--run` it reads mutmut's results (`mutants/**/*.py.meta`, exit code per mutant) and
  prints, per module: mutants, killed, timeout, survived, not run, equivalent (survivors with a
  reason in mutation_equivalents.yaml), and score = (killed + timeout) / (mutants - equivalent - not run).
  A timeout is a kill: the mutant made the tests hang or loop past mutmut's limit.
- Every survivor is printed with its location (file:line), the original and mutated line, and its
  reason, or "NO REASON" when mutation_equivalents.yaml has none. A reason is keyed by
  `<module>.<function> | <original line> -> <mutated line>` (stripped), stable across renumbering.
- Exit status 1 when a survivor has no reason or the total score is below --min-score (90 by
  default), so a weakened test shows up when someone runs it; nothing in CI runs it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MUTANTS = REPO / "mutants"
REASONS_FILE = Path(__file__).with_name("mutation_equivalents.yaml")
STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
          255: "timeout", None: "not run", 5: "no tests", 33: "no tests"}


def run_mutmut(names: list[str], timeout_s: int) -> int:
    cmd = ["timeout", str(timeout_s), "nice", "-n", "19", str(REPO / ".venv/bin/mutmut"), "run", "--max-children", "1",
           *names]
    return subprocess.call(cmd, cwd=REPO)


def prove(mutant: str, test: str) -> int:
    """Run `test` (a pytest node id) on the original code and on `mutant`, in mutmut's copy of the
    tree: 0 when it passes on the original and fails on the mutant (the test kills it)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    cmd = ["nice", "-n", "19", str(REPO / ".venv/bin/python"), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]
    clean = subprocess.run(cmd, cwd=MUTANTS, env=env, capture_output=True, text=True).returncode
    mutated = subprocess.run(cmd, cwd=MUTANTS, env={**env, "MUTANT_UNDER_TEST": mutant}, capture_output=True,
                             text=True).returncode
    verdict = "kills it" if clean == 0 and mutated != 0 else "does NOT kill it" if clean == 0 else "fails on the original"
    print(f"{test} on {mutant}: original exit {clean}, mutant exit {mutated}: {verdict}")
    return 0 if clean == 0 and mutated != 0 else 1


def _functions(path: Path) -> dict[str, list[str]]:
    """name -> source lines of every `x_..__mutmut_*` function of a mutated file."""
    text = path.read_text()
    lines = text.splitlines()
    out: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and "__mutmut_" in node.name:
            out[node.name] = lines[node.lineno - 1:node.end_lineno]
    return out


def _changed(orig: list[str], mutant: list[str]) -> tuple[str, str]:
    a = [line for line in orig[1:]]
    b = [line for line in mutant[1:]]
    minus = [l[1:].strip() for l in difflib.ndiff(a, b) if l.startswith("- ")]
    plus = [l[1:].strip() for l in difflib.ndiff(a, b) if l.startswith("+ ")]
    return " / ".join(minus) or "(nothing)", " / ".join(plus) or "(deleted)"


def _source_line(src: Path, func: str, orig_line: str) -> int:
    """Line number of `orig_line` inside function `func` of the original source (0 if not found)."""
    text = src.read_text()
    first = orig_line.split(" / ")[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            for i, line in enumerate(text.splitlines()[node.lineno - 1:node.end_lineno], node.lineno):
                if line.strip() == first:
                    return i
            return node.lineno
    return 0


def _plain_name(mangled: str) -> str:
    """`xǁSchedulerǁschedule__mutmut_orig` -> `Scheduler.schedule`; `x_resolve_budget__mutmut_3` -> `resolve_budget`."""
    base = mangled.split("__mutmut_")[0]
    if base.startswith("x\u01c1"):
        return ".".join(p for p in base[2:].split("\u01c1") if p)
    return base[2:]


def collect() -> tuple[dict[str, Counter], list[dict]]:
    counts: dict[str, Counter] = {}
    survivors: list[dict] = []
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        rel = meta.relative_to(MUTANTS).with_suffix("")           # engine_under_test/budget.py
        module = ".".join(rel.with_suffix("").parts)
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        c = counts.setdefault(module, Counter())
        funcs = None
        for key, code in sorted(codes.items()):
            status = STATUS.get(code, "suspicious")
            c["mutants"] += 1
            c[status] += 1
            if status != "survived":
                continue
            funcs = funcs or _functions(MUTANTS / rel)
            local = key[len(module) + 1:]
            orig_name = local.split("__mutmut_")[0] + "__mutmut_orig"
            was, now = _changed(funcs[orig_name], funcs[local])
            func = _plain_name(local)
            line = _source_line(REPO / rel, func.split(".")[-1], was)
            survivors.append({"module": module, "mutant": key, "where": f"{rel}:{line}", "function": func,
                              "key": f"{module}.{func} | {was} -> {now}", "was": was, "now": now})
    return counts, survivors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", metavar="MODULE", help="mutate one module first, e.g. budget or scheduler.scheduler")
    ap.add_argument("--prove", nargs=2, metavar=("MUTANT", "TEST"),
                    help="show that TEST (a pytest node id) passes on the original and fails on MUTANT")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="re-run every survivor without a reason (after adding tests)")
    ap.add_argument("--timeout-s", type=int, default=3600)
    ap.add_argument("--min-score", type=float, default=90.0)
    args = ap.parse_args(argv)
    if args.prove:
        return prove(*args.prove)
    if args.run:
        run_mutmut([f"engine_under_test.{args.run}.*"], args.timeout_s)
    if args.rerun_survivors:
        reasons0 = yaml.safe_load(REASONS_FILE.read_text()) or {} if REASONS_FILE.is_file() else {}
        names = [s["mutant"] for s in collect()[1] if s["key"] not in reasons0]
        print(f"re-running {len(names)} survivors")
        if names:
            run_mutmut(names, args.timeout_s)
    if not MUTANTS.is_dir():
        print("no mutmut results: run with --run MODULE first", file=sys.stderr)
        return 1
    reasons: dict[str, str] = yaml.safe_load(REASONS_FILE.read_text()) or {} if REASONS_FILE.is_file() else {}
    counts, survivors = collect()
    equivalent = Counter(s["module"] for s in survivors if s["key"] in reasons)
    cols = ("mutants", "killed", "timeout", "survived", "equivalent", "not run", "score")
    print(f"{'module':36}" + "".join(f"{h:>11}" for h in cols))
    total = Counter()
    for module, c in counts.items():
        c["equivalent"] = equivalent[module]
        total.update(c)
        _row(module, c, cols)
    _row("TOTAL", total, cols)
    unexplained = [s for s in survivors if s["key"] not in reasons]
    print(f"\nsurvivors ({len(survivors)}; {len(unexplained)} without a reason):")
    for s in survivors:
        print(f"- {s['where']} {s['function']}: `{s['was']}` -> `{s['now']}`\n    {reasons.get(s['key'], 'NO REASON')}")
    score = _score(total)
    return 1 if unexplained or score is None or score < args.min_score else 0


def _score(c: Counter) -> float | None:
    judged = c["mutants"] - c["equivalent"] - c["not run"]
    return 100.0 * (c["killed"] + c["timeout"]) / judged if judged > 0 else None


def _row(name: str, c: Counter, cols: tuple[str, ...]) -> None:
    score = _score(c)
    cells = [str(c[h]) for h in cols[:-1]] + ["-" if score is None else f"{score:.1f}%"]
    print(f"{name:36}" + "".join(f"{x:>11}" for x in cells))


if __name__ == "__main__":
    sys.exit(main())
