"""A conformance package for a release: the runs, what they ran on, and a manifest of every file's hash.

Contract: `write_package(run_dirs, out)` writes `out/` (which must not exist or be empty):

    runs/<n>-<run_id>/    each run directory's observations.jsonl, run.json, junit.xml, index.html
    verdicts.jsonl        every verdict of the run's observations judged when packaged
                          (`run.session.judge_observations`), with the run it belongs to
    environment.json      the statement: framework commit, goldens revision, the pinned suite (selection,
                          each case's digest), engines (name, role, version: the engine's commit as it
                          reports it, defects), oracle versions, hosts (name, device: GPU, driver, CUDA
                          where measured), deviations (each expectation a run was judged with, each oracle
                          pack's deviations from its defaults)
    manifest.json         sha256 of every file above (`verify` recomputes them) and the package format

`nightly.verify` checks a package against this checkout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from conformance.documents.file_digest import sha256_of
from conformance.errors import ConformanceError
from conformance.run import rundir, session

FORMAT = "dflash-conformance-package/1"
RUN_FILES = (rundir.OBSERVATIONS_FILE, rundir.RUN_FILE, rundir.JUNIT_FILE, rundir.INDEX_FILE)
MANIFEST, ENVIRONMENT, VERDICTS = "manifest.json", "environment.json", "verdicts.jsonl"


def _hardware(observations: Sequence[dict[str, Any]]) -> list[str]:
    return sorted({o["device"]["hardware"] for o in observations if (o.get("device") or {}).get("hardware")})


def _pack_deviations(observations: Sequence[dict[str, Any]]) -> list[Any]:
    out = []
    for o in observations:
        for dev in (o.get("provenance") or {}).get("deviations") or ():
            if dev not in out:
                out.append(dev)
    return out


def environment_statement(runs: Sequence[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> dict[str, Any]:
    """`runs`: (name in the package, run.json, observations)."""
    provs = [m.get("provenance") or {} for _, m, _ in runs]
    engines: dict[str, dict[str, Any]] = {}
    for _, meta, _ in runs:
        for e in meta.get("engines") or ():
            engines.setdefault(e["name"], {"name": e["name"], "role": e.get("role"), "version": e.get("version"),
                                           "defects": e.get("defects") or []})
    cases: dict[str, str] = {}
    for _, meta, _ in runs:
        for c in meta.get("cases") or ():
            cases.setdefault(c["id"], c.get("digest"))
    expectations = [e for _, m, _ in runs for e in m.get("expectations") or ()]
    return {
        "framework_commits": sorted({str(p.get("framework_commit")) for p in provs}),
        "goldens_revisions": sorted({str(p.get("goldens_revision")) for p in provs}),
        "selection": sorted({m.get("selection", "") for _, m, _ in runs}),
        "cases": cases,
        "engines": list(engines.values()),
        "oracles": {e["name"]: e["version"] for e in engines.values() if e["role"] == "oracle"},
        "hosts": [{"run": name, "host": p.get("host"), "device": p.get("device"), "shard": p.get("shard"),
                   "hardware": _hardware(obs)} for (name, _, obs), p in zip(runs, provs)],
        "deviations": {"expectations": expectations, "oracle_packs": _pack_deviations([o for *_, obs in runs for o in obs])},
    }


def write_package(run_dirs: Sequence[Path], out: Path) -> Path:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConformanceError(f"--out {out}: not empty; a package is written into a new directory")
    loaded = []
    for i, source in enumerate(run_dirs, 1):
        run_dir = rundir.resolve_run_dir(Path(source))
        meta = rundir.read_run_meta(run_dir)
        if meta is None or not (run_dir / rundir.OBSERVATIONS_FILE).is_file():
            raise ConformanceError(f"{source}: not a run directory of `conformance run` (run.json, observations.jsonl)")
        loaded.append((f"{i}-{meta.get('run_id', run_dir.name)}", run_dir, meta))
    (out / "runs").mkdir(parents=True, exist_ok=True)
    runs, verdict_lines = [], []
    for name, run_dir, meta in loaded:
        dest = out / "runs" / name
        dest.mkdir()
        for f in RUN_FILES:
            if (run_dir / f).is_file():
                shutil.copyfile(run_dir / f, dest / f)
        verdict_lines += [json.dumps(dict(v.to_json(), run=name), sort_keys=True)
                          for v in session.judge_observations(dest)]
        runs.append((name, meta, rundir.read_observations(dest)))
    (out / VERDICTS).write_text("".join(line + "\n" for line in verdict_lines))
    (out / ENVIRONMENT).write_text(json.dumps(environment_statement(runs), indent=2, sort_keys=True) + "\n")
    files = {p.relative_to(out).as_posix(): sha256_of(p) for p in sorted(out.rglob("*")) if p.is_file()}
    (out / MANIFEST).write_text(json.dumps({"format": FORMAT, "runs": [n for n, _, _ in runs], "files": files},
                                           indent=2, sort_keys=True) + "\n")
    return out
