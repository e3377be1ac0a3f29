"""`conformance merge`: the runs of many hosts (shards of one nightly) as one run directory and report.

Contract: `merge_runs(sources, out_dir, allow_mixed_goldens, console)` fetches every source
(`nightly.fetch`: a local run directory or an http(s) URL of a .tar.gz / .zip artifact), refuses runs
judged against different goldens revisions (`MixedGoldensError`, exit 2) unless `allow_mixed_goldens`,
and writes `out_dir` as a run directory of its own:

    observations.jsonl  every run's observations, in the order the runs were given (a cell measured by
                        two runs: the one given last is kept, and the console says so)
    run.json            the engines (by name; a state any run reports as failed stays failed), the cases
                        (by id), the expectations, and `merged_from`: each run's id, source, host, device,
                        shard, framework commit and goldens revision
    verdicts.jsonl, index.html, junit.xml   judged once, over all the observations, as a run is judged
                        (`run.execute.finish` -> `run.session.judge_run_dir`): the matrix engine x case x
                        device profile of every host

The merged report judges against this checkout's goldens, so their revision is compared too: runs whose
revision differs from this checkout's are refused like runs that differ from each other. Shards: a set of
runs that are shards of N and lacks some of them is said on the console (their cells show `not run`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from conformance.errors import ConformanceError
from conformance.nightly.fetch import fetch_run_dir
from conformance.report.console_text import shown
from conformance.report.model import RunReport
from conformance.run import rundir
from conformance.run.provenance import goldens_revision
from conformance.run.relocate import moves, relocated

UNKNOWN = "unknown"


class MixedGoldensError(ConformanceError):
    """Runs judged against different goldens revisions, put side by side without --allow-mixed-goldens."""


@dataclass(frozen=True)
class SourceRun:
    source: str
    run_dir: Path
    meta: dict[str, Any]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.meta.get("provenance") or {}

    @property
    def revision(self) -> str:
        return self.provenance.get("goldens_revision") or UNKNOWN

    def described(self) -> dict[str, Any]:
        p = self.provenance
        return {"run_id": self.meta.get("run_id", self.run_dir.name), "source": self.source,
                "host": p.get("host"), "device": p.get("device"), "shard": p.get("shard"),
                "framework_commit": p.get("framework_commit"), "framework_dirty": p.get("framework_dirty", False),
                "source_digest": p.get("source_digest"), "goldens_revision": self.revision,
                "engines": {e["name"]: e.get("version") for e in self.meta.get("engines") or ()}}


def load_sources(sources: Sequence[str], work_dir: Path) -> list[SourceRun]:
    runs = []
    for source in sources:
        run_dir = fetch_run_dir(source, work_dir)
        meta = rundir.read_run_meta(run_dir)
        if meta is None:
            raise ConformanceError(f"{source}: no {rundir.RUN_FILE} (a run directory of `conformance run` has one)")
        runs.append(SourceRun(source, run_dir, meta))
    return runs


def check_goldens(runs: Sequence[SourceRun], local_revision: str, allow_mixed: bool) -> list[str]:
    """The distinct revisions (runs' and this checkout's); raises MixedGoldensError when there are
    several and `allow_mixed` is False."""
    revisions = list(dict.fromkeys([r.revision for r in runs] + [local_revision]))
    if len(revisions) > 1 and not allow_mixed:
        lines = [f"  {r.source}: goldens {r.revision} (host {r.provenance.get('host') or UNKNOWN})" for r in runs]
        lines.append(f"  this checkout (which judges the merged report): goldens {local_revision}")
        raise MixedGoldensError("these runs were judged against different goldens revisions; merging them would "
                                "put verdicts of different expectations side by side:\n" + "\n".join(lines)
                                + "\n(--allow-mixed-goldens merges them anyway, judged against this checkout's)")
    return revisions


_STATE_RANK = ("failed", "interrupted", "planned", "not run", "pending", "running", "skipped")


def _merged_engines(runs: Sequence[SourceRun]) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for run in runs:
        for e in run.meta.get("engines") or ():
            have = merged.get(e["name"])
            if have is None:
                merged[e["name"]] = dict(e)
                continue
            rank = lambda s: _STATE_RANK.index(s) if s in _STATE_RANK else len(_STATE_RANK)  # noqa: E731
            if rank(e.get("state", "")) < rank(have.get("state", "")):
                have["state"], have["note"] = e.get("state"), e.get("note", "")
            if e.get("version") != have.get("version"):
                have["note"] = (have.get("note") or "") + f" (version {e.get('version')} on {run.source})"
    return list(merged.values())


def _missing_shards(runs: Sequence[SourceRun]) -> list[str]:
    shards = [r.provenance.get("shard") for r in runs]
    counts = {s["count"] for s in shards if s}
    missing = []
    for n in sorted(counts):
        have = {s["index"] for s in shards if s and s["count"] == n}
        missing += [f"{i}/{n}" for i in range(1, n + 1) if i not in have]
    return missing


def merge_runs(sources: Sequence[str], out_dir: Path, allow_mixed_goldens: bool, console: Console) -> RunReport:
    from conformance.run.execute import finish

    out_dir = Path(out_dir)
    if (out_dir / rundir.OBSERVATIONS_FILE).exists():
        raise ConformanceError(f"--out {out_dir}: already holds a run ({rundir.OBSERVATIONS_FILE}); give a new directory")
    with tempfile.TemporaryDirectory(prefix="conformance-merge-") as work:
        runs = load_sources(sources, Path(work))
        dirs = {r.meta.get("goldens_dir") for r in runs} - {None}
        goldens_dir = next(iter(dirs)) if len(dirs) == 1 else None
        revisions = check_goldens(runs, goldens_revision(Path(goldens_dir) if goldens_dir else None),
                                  allow_mixed_goldens)
        out_dir.mkdir(parents=True, exist_ok=True)
        seen: dict[tuple[str, str], str] = {}
        with (out_dir / rundir.OBSERVATIONS_FILE).open("w", encoding="utf-8") as fh:
            for run in runs:
                for obs in rundir.read_observations(run.run_dir):   # in this checkout's paths (run.relocate)
                    key = (obs["case_id"], obs["engine"]["name"])
                    if key in seen:
                        console.print(f"[yellow]{shown(key[1])} on {shown(key[0])}: measured by {shown(seen[key])} "
                                      f"and {shown(run.source)}; the latter is kept[/]")
                    seen[key] = run.source
                    fh.write(json.dumps(obs, sort_keys=True) + "\n")
    cases = {}
    for run in runs:
        for c in run.meta.get("cases") or ():
            cases.setdefault(c["id"], relocated(c, moves(run.meta)))
    expectations = list({json.dumps(e, sort_keys=True): e for r in runs
                         for e in r.meta.get("expectations") or ()}.values())
    started = [r.meta.get("started_at") for r in runs if r.meta.get("started_at")]
    finished = [r.meta.get("finished_at") for r in runs if r.meta.get("finished_at")]
    meta = {"run_id": out_dir.name, "origin": f"conformance merge of {len(runs)} run(s)",
            "started_at": min(started) if started else None, "finished_at": max(finished) if finished else None,
            "interrupted": any(r.meta.get("interrupted") for r in runs),
            "selection": " + ".join(dict.fromkeys(r.meta.get("selection", "") for r in runs)),
            "engines": _merged_engines(runs), "cases": list(cases.values()), "expectations": expectations,
            "goldens_dir": goldens_dir, "goldens_revisions": revisions,
            "merged_from": [r.described() for r in runs]}
    rundir.write_json_atomic(out_dir / rundir.RUN_FILE, meta)
    for r in meta["merged_from"]:
        shard = f"shard {r['shard']['index']}/{r['shard']['count']}" if r["shard"] else "whole matrix"
        console.print(f"merged {shown(r['run_id'])} from {shown(r['source'])}: host {shown(str(r['host']))}, {shard}, "
                      f"commit {shown(str(r['framework_commit'])[:12])}, code {shown(str(r.get('source_digest'))[:19])}, "
                      f"goldens {shown(r['goldens_revision'][:19])}")
    missing = _missing_shards(runs)
    if missing:
        console.print(f"[yellow]shards not merged: {', '.join(missing)} (their cells show `not run`)[/]")
    return finish(out_dir, console)
