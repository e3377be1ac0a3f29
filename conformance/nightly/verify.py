"""`conformance verify PKG`: is this package what it says, judged as this checkout judges?

Contract: `verify_package(pkg)` returns the list of what it checked, or raises `PackageRefused` (exit 1)
with every reason, each naming the file, the run, the cell or the check:

  1. integrity    every file of manifest.json is there with its sha256, and nothing else is (a tampered
                  or added file is refused)
  2. goldens      every run was judged against this checkout's goldens revision (`run.provenance`);
                  a package judged against other goldens is refused
  3. re-judged    each run's observations judged again as `conformance report` judges a run
                  (`run.session.judge_observations`) give exactly the verdicts the package holds
                  (verdicts.jsonl): an edited observation changes them
  4. full suite   the runs together are a full run of the pinned suite: every case of the default
                  selection (`run.selection.DEFAULT_SELECTION`) with the digest this checkout pins, each
                  planned by every engine of the package (no cell missing: no shard left out, no case
                  skipped), no engine skipped or interrupted, no run interrupted

A package that is not one (no manifest) raises `ConformanceError` (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.documents.file_digest import sha256_of
from conformance.errors import ConformanceError
from conformance.nightly.package import ENVIRONMENT, FORMAT, MANIFEST, VERDICTS
from conformance.run import rundir, session
from conformance.run.provenance import goldens_revision


class PackageRefused(ConformanceError):
    exit_code = 1

    def __init__(self, pkg: Path, reasons: list[str]):
        self.reasons = reasons
        shown = reasons[:20] + ([f"... and {len(reasons) - 20} more"] if len(reasons) > 20 else [])
        super().__init__(f"{pkg}: refused:\n" + "\n".join(f"  {r}" for r in shown))


def _manifest(pkg: Path) -> dict[str, Any]:
    path = pkg / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConformanceError(f"{path}: no manifest: not a package of `conformance package`") from None
    except json.JSONDecodeError as exc:
        raise PackageRefused(pkg, [f"{path}: not JSON ({exc.msg}, line {exc.lineno})"]) from None
    if doc.get("format") != FORMAT:
        raise PackageRefused(pkg, [f"{path}: format {doc.get('format')!r}, expected {FORMAT!r}"])
    return doc


def _integrity(pkg: Path, manifest: dict[str, Any]) -> list[str]:
    files = manifest.get("files") or {}
    reasons = []
    for rel, digest in sorted(files.items()):
        path = pkg / rel
        if not path.is_file():
            reasons.append(f"{rel}: listed in the manifest, missing")
        elif sha256_of(path) != digest:
            reasons.append(f"{rel}: sha256 differs from the manifest's (the file was changed after packaging)")
    present = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file()} - {MANIFEST}
    reasons += [f"{rel}: not in the manifest (added after packaging)" for rel in sorted(present - set(files))]
    return reasons


def _goldens(pkg: Path, runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    reasons = []
    for name, meta in runs:
        gdir = meta.get("goldens_dir")
        here = goldens_revision(Path(gdir) if gdir else None)
        theirs = (meta.get("provenance") or {}).get("goldens_revision")
        if theirs != here:
            reasons.append(f"runs/{name}: judged against goldens {theirs}, this checkout's are {here} "
                           "(a package judged against other goldens)")
    return reasons


def _rejudged(pkg: Path, runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    recorded: dict[str, set] = {}
    for line in (pkg / VERDICTS).read_text().splitlines():
        d = json.loads(line)
        recorded.setdefault(d["run"], set()).add((d["check"], d["engine"], d["case_id"], d["outcome"]))
    reasons = []
    for name, _ in runs:
        try:
            verdicts = session.judge_observations(pkg / "runs" / name)
        except ConformanceError as exc:
            reasons.append(f"runs/{name}: cannot be judged: {str(exc).splitlines()[0]}")
            continue
        now = {(v.check, v.engine, v.case_id, v.outcome) for v in verdicts}
        was = recorded.get(name, set())
        for check, engine, case, outcome in sorted(now ^ was):
            side = "re-judged" if (check, engine, case, outcome) in now else "packaged"
            reasons.append(f"runs/{name}: {check} of {engine} on {case}: {outcome} ({side} only): the observations "
                           "do not give the verdicts the package holds")
    return reasons


def _full_suite(runs: list[tuple[str, dict[str, Any]]], pkg: Path) -> list[str]:
    from conformance.run.selection import select_cases

    pinned = {c.id: c.digest() for c in select_cases(None)[0]}
    reasons = []
    cells: set[tuple[str, str]] = set()
    planned: set[str] = set()
    states: dict[str, str] = {}
    digests: dict[str, str] = {}
    for name, meta in runs:
        if meta.get("interrupted"):
            reasons.append(f"runs/{name}: the run was interrupted")
        for e in meta.get("engines") or ():
            if e.get("state") in ("failed", "interrupted", "not run"):
                reasons.append(f"runs/{name}: engine {e['name']} {e['state']}: {e.get('note', '')}")
            if e.get("state") == "planned":
                planned.add(e["name"])
            states.setdefault(e["name"], f"{e.get('state')} ({e.get('note', '')})")
        for c in meta.get("cases") or ():
            digests.setdefault(c["id"], c.get("digest"))
        cells |= {(o["engine"]["name"], o["case_id"]) for o in rundir.read_observations(pkg / "runs" / name)}
    reasons += [f"engine {n}: planned in no run: {states[n]}" for n in sorted(set(states) - planned)]
    engines = planned
    for case_id, digest in sorted(pinned.items()):
        if case_id not in digests:
            reasons.append(f"case {case_id} of the pinned suite: not in the package (skipped)")
        elif digests[case_id] != digest:
            reasons.append(f"case {case_id}: its spec differs from the pinned suite's (digest {digests[case_id]}, "
                           f"pinned {digest})")
        for engine in sorted(engines):
            if case_id in digests and (engine, case_id) not in cells:
                reasons.append(f"{engine} on {case_id}: no observation (skipped, or its shard is not in the package)")
    return reasons


def verify_package(pkg: Path) -> list[str]:
    pkg = Path(pkg)
    manifest = _manifest(pkg)
    reasons = _integrity(pkg, manifest)
    if reasons:   # judging files that are not what was packaged proves nothing
        raise PackageRefused(pkg, reasons)
    runs = [(name, rundir.read_run_meta(pkg / "runs" / name) or {}) for name in manifest.get("runs") or ()]
    if not runs or not (pkg / ENVIRONMENT).is_file():
        raise PackageRefused(pkg, ["the package holds no run"])
    reasons = _goldens(pkg, runs) + _full_suite(runs, pkg)
    reasons += _rejudged(pkg, runs) if not reasons else []
    if reasons:
        raise PackageRefused(pkg, reasons)
    return [f"{len(manifest['files'])} file(s) match the manifest", "judged against this checkout's goldens",
            f"{len(runs)} run(s) re-judged: the verdicts the package holds",
            "a full run of the pinned suite, nothing skipped"]
