"""Plan cases on one engine, whatever its plan kind, and collect one observation per case.

Contract: `plan_cases(engine, cases)` returns exactly one schema-valid observation per case, in
case order, whatever the engine's process does. Module plans run `conformance.harness.probe` in
the engine's environment, many cases a process; command and log plans (`harness.plan_command`)
run one process a case. Every observation carries the engine file's name. A crash, a hang past its timeout, an OOM kill,
non-JSON or schema-invalid output, or an exit with nothing written each become an `error`
observation with the cause and the tail of the process's log; the remaining cases are planned
in a fresh process. `on_observation` is called as each observation arrives, so callers can
flush results to disk while the engine is still working. The process's log is kept up to
`MAX_LOG_BYTES` while it runs (`harness.capture`); the rest is discarded, and a failure says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from conformance import paths
from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.engines.engine_file import EngineFile, ModulePlan
from conformance.engines.venv import oracle_env, oracle_process_env
from conformance.harness.accept import accept_document, fail
from conformance.harness.capture import CappedOutput
from conformance.harness.log_dirs import new_log_dir
from conformance.harness.supervise import argv_line, describe_exit, kill_group, spawn, tail

POLL_S = 0.1
MAX_LOG_BYTES = 8 << 20   # an adapter process's stdout + stderr

OnObservation = Callable[[dict[str, Any]], None]


def _process_env(spec: EngineFile) -> dict[str, str]:
    if spec.uses_venv:
        return oracle_process_env(spec)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(paths.REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: v for k, v in spec.plan.env.items() if v is not None})
    return env


def _python(spec: EngineFile) -> Path:
    if spec.uses_venv:
        return oracle_env(spec).python
    return Path(sys.executable)


class _Chunk:
    """One adapter process over a list of cases."""

    def __init__(self, spec: EngineFile, cases: Sequence[Case], workdir: Path, index: int,
                 python: Path, argv_prefix: Sequence[str] | None = None):
        self.spec, self.cases, self.index = spec, list(cases), index
        self.cases_file = workdir / f"{spec.name}-{index}.cases.json"
        self.out_file = workdir / f"{spec.name}-{index}.obs.jsonl"
        self.log_file = workdir / f"{spec.name}-{index}.log"
        self.cases_file.write_text(json.dumps([c.to_json() for c in self.cases]))
        self.out_file.write_text("")
        self.argv = list(argv_prefix or [str(python), "-m", "conformance.harness.probe", "--adapter", spec.plan.module]) + [
            "--cases", str(self.cases_file), "--out", str(self.out_file)]


def _run_chunk(chunk: _Chunk, on_obs: OnObservation) -> tuple[list[dict[str, Any]], list[Case]]:
    """Run one process. Returns (observations in order, cases left unplanned after a fault)."""
    spec = chunk.spec
    results: list[dict[str, Any]] = []
    log = CappedOutput(chunk.log_file, MAX_LOG_BYTES, header=(argv_line(chunk.argv) + "\n").encode())
    try:
        proc = spawn(chunk.argv, stdout=log.fileno(), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     env=_process_env(spec), cwd=str(paths.REPO_ROOT))
    except OSError as exc:
        log.finish(0)
        obs = [fail(spec, c, f"could not start {chunk.argv[0]}: {exc}") for c in chunk.cases]
        for o in obs:
            on_obs(o)
        return obs, []
    finally:
        log.close_writer()
    deadline = time.monotonic() + spec.plan.startup_timeout_s + spec.plan.per_case_timeout_s
    offset, pending = 0, ""
    timed_out = False
    try:
        with chunk.out_file.open() as out:
            while True:
                rc = proc.poll()
                pending += out.read()
                while "\n" in pending and len(results) < len(chunk.cases):
                    line, pending = pending.split("\n", 1)
                    if not line.strip():
                        continue
                    case = chunk.cases[len(results)]
                    obs = accept_document(spec, case, line, f"{spec.name} adapter ({chunk.out_file.name} line {len(results) + 1})")
                    results.append(obs)
                    on_obs(obs)
                    deadline = time.monotonic() + spec.plan.per_case_timeout_s
                if rc is not None or len(results) == len(chunk.cases):
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(POLL_S)
    except BaseException:  # Ctrl-C or a failing callback: never leave the adapter running
        kill_group(proc)
        proc.wait()
        log.finish(0)
        raise
    if timed_out or proc.poll() is None:
        kill_group(proc)
    rc = proc.wait()
    kill_group(proc)   # whatever it started (its group, and any descendant that called setsid) goes too
    log.finish()
    if len(results) == len(chunk.cases):
        return results, []
    culprit = chunk.cases[len(results)]
    if timed_out and not results:
        why = (f"timed out: no observation within {spec.plan.startup_timeout_s + spec.plan.per_case_timeout_s:.0f} s of starting "
               f"the adapter (startup_timeout_s {spec.plan.startup_timeout_s:.0f} s + per_case_timeout_s "
               f"{spec.plan.per_case_timeout_s:.0f} s) (killed)")
    elif timed_out:
        why = f"timed out: no observation within {spec.plan.per_case_timeout_s:.0f} s (killed)"
    elif rc == 0:
        why = "adapter process exited 0 without writing an observation for this case"
    elif rc == 3:
        why = "adapter could not be loaded in the engine's environment"
    else:
        why = f"adapter process {describe_exit(rc)} while planning this case"
    if pending.strip():
        why += f"; unterminated output: {pending.strip()[:200]!r}"
    if log.note("adapter log"):
        why += f" ({log.note('adapter log')})"
    obs = fail(spec, culprit, f"{why}\n--- last lines of {chunk.log_file} ---\n{tail(chunk.log_file)}")
    results.append(obs)
    on_obs(obs)
    rest = chunk.cases[len(results):]
    if rc == 3:  # loading fails the same way for every case
        for c in rest:
            o = fail(spec, c, f"{why}\n--- last lines of {chunk.log_file} ---\n{tail(chunk.log_file)}")
            results.append(o)
            on_obs(o)
        rest = []
    return results, rest


def plan_cases(engine: EngineFile | str, cases: Sequence[Case], on_observation: OnObservation | None = None,
               log_dir: Path | None = None, argv_prefix: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Plan every case on one engine (an engine file, or a name / path the registry resolves).
    `argv_prefix` replaces the probe command (fault-injection tests)."""
    if isinstance(engine, str):
        from conformance.engines.registry import resolve_engine

        engine = resolve_engine(engine)
    spec = engine
    on_obs = on_observation or (lambda o: None)
    if not cases:
        return []
    workdir = Path(log_dir) if log_dir else new_log_dir(spec.name)
    workdir.mkdir(parents=True, exist_ok=True)
    if not isinstance(spec.plan, ModulePlan):
        from conformance.harness.plan_command import plan_one

        results = []
        for i, case in enumerate(cases):
            obs = plan_one(spec, case, workdir, i)
            results.append(obs)
            on_obs(obs)
        return results
    python = _python(spec) if argv_prefix is None else Path(sys.executable)
    per_proc = spec.plan.max_cases_per_process or len(cases)
    todo = list(cases)
    results: list[dict[str, Any]] = []
    index = 0
    while todo:
        batch, todo = todo[:per_proc], todo[per_proc:]
        chunk = _Chunk(spec, batch, workdir, index, python, argv_prefix)
        index += 1
        got, rest = _run_chunk(chunk, on_obs)
        results += got
        todo = list(rest) + todo
    return results
