"""Plan one case through an executable: the `plan.command` and `plan.log` kinds of engine file.

Contract: `plan_one(engine, case, workdir, index)` runs the engine's argv (placeholders filled
from the case, `{case_file}` and the engine file) as a child in a session of its own, with the
case JSON on stdin, its cwd the engine file's directory, `CONFORMANCE_ENGINE_DEFECTS` in its
environment, and returns exactly one schema-valid observation, whatever the child does:
- command: exit 0 and one observation JSON on stdout -> that observation (stamped with the
  engine file's name); an exit code in `refusal_exit_codes` -> `refused` with its last stderr
  lines; anything else -> `error` with how it ended and its stderr tail;
- log: a `fatal` line or a refusal exit code -> `refused` with that message, keeping every figure
  printed before the fatal line; exit 0 -> the fields its regexes found (`harness.plan_log`);
  anything else -> `error`;
- past `timeout_s` the child's whole group is killed and the case is an `error` saying so.
stdout and stderr are kept as files in `workdir`, each read through a byte cap while the child
runs (`harness.capture`): stdout past `MAX_OUTPUT_BYTES` is an error; stderr past `MAX_LOG_BYTES`
is discarded, and the observation says so (a `provenance.glue` note, and in its message when it
is not ok). Nothing the child starts survives its answer (`supervise.kill_group`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.engines.engine_file import PLAN_PLACEHOLDERS, CommandPlan, EngineFile, LogPlan
from conformance.engines.manifest import ManifestError, case_values, render_argv, render_env
from conformance.harness.accept import accept_document, fail, stamp
from conformance.harness.bounded_regex import Matcher
from conformance.harness.capture import CappedOutput
from conformance.harness.engine_version import resolved_version
from conformance.harness.plan_log import build_observation, fatal_message
from conformance.harness.supervise import argv_line, describe_exit, kill_group, spawn, tail

MAX_OUTPUT_BYTES = 64 << 20   # stdout: an observation (more is an error)
MAX_LOG_BYTES = 8 << 20       # stderr: kept while the child runs; the rest is discarded, with a note


def plan_values(engine: EngineFile, case_json: dict[str, Any], case_file: Path) -> dict[str, Any]:
    values = case_values(case_json, port=0)
    values.update({"case_file": str(case_file), "case_id": case_json["id"], "device_profile": case_json["device"],
                   "engine_dir": str(engine.engine_dir), "engine_name": engine.name,
                   "defects": ",".join(engine.defects) or "none"})
    values.update(workload_values(case_json))
    return values


def workload_values(case_json: dict[str, Any]) -> dict[str, Any]:
    """The workload placeholders (engine_file.PLAN_PLACEHOLDERS): what a port that prints a trace
    needs without parsing the case JSON."""
    from conformance.documents.devices import get_profile

    work, acc, sched = case_json["workload"], case_json.get("acceptance") or {}, case_json["scheduler"]
    async_on = sched.get("async_scheduling", get_profile(case_json["device"]).async_scheduling)
    return {"num_requests": work["num_requests"], "prompt_tokens": work["prompt_tokens"],
            "output_tokens": work["output_tokens"],
            "accepted_tokens": acc.get("accepted_tokens") if acc.get("mode") == "fixed" else None,
            "async_scheduling": "true" if async_on else "false",
            "chunked_prefill": "true" if sched.get("chunked_prefill", True) else "false"}


def _refused(engine: EngineFile, case: Case, message: str) -> dict[str, Any]:
    return observation.failed(case.id, engine.name, resolved_version(engine), "plan", case.spec["device"],
                              "refused", message)


def _last_lines(path: Path, n: int = 6) -> str:
    text = tail(path, n)
    return "" if text in ("(no log)", "(log is empty)") else text


def plan_one(engine: EngineFile, case: Case, workdir: Path, index: int) -> dict[str, Any]:
    plan = engine.plan
    assert isinstance(plan, (CommandPlan, LogPlan))  # plan_runner dispatches module plans itself
    case_json = case.to_json()
    stem = workdir / f"{engine.name}-{index}-{case.id}"
    case_file = stem.with_suffix(".case.json")
    out_file, err_file = stem.with_suffix(".stdout"), stem.with_suffix(".log")
    case_file.write_text(json.dumps(case_json, sort_keys=True))
    values = plan_values(engine, case_json, case_file)
    try:
        argv = render_argv(plan.argv, values, f"{engine.path}: plan.{plan.kind}.argv")
        extra_env = render_env(plan.env, values)
    except ManifestError as exc:
        return fail(engine, case, f"the engine file's argv cannot be filled for this case: {exc}")
    env = dict(os.environ, CONFORMANCE_ENGINE_DEFECTS=values["defects"], CONFORMANCE_ENGINE_NAME=engine.name,
               PYTHONUNBUFFERED="1", **extra_env)
    t0 = time.perf_counter()
    out = CappedOutput(out_file, MAX_OUTPUT_BYTES)
    err = CappedOutput(err_file, MAX_LOG_BYTES, header=(argv_line(argv) + "\n").encode())
    try:
        try:
            proc = spawn(argv, stdin=subprocess.PIPE, stdout=out.fileno(), stderr=err.fileno(), env=env,
                         cwd=str(engine.engine_dir))
        except OSError as exc:
            return fail(engine, case, f"could not start {argv[0]!r} (plan.{plan.kind}.argv[0] of {engine.path}): "
                                      f"{exc.strerror or exc}")
        finally:
            out.close_writer()
            err.close_writer()
        try:
            proc.communicate(input=json.dumps(case_json).encode(), timeout=plan.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            err.finish()
            return fail(engine, case, f"timed out: no answer within plan.{plan.kind}.timeout_s {plan.timeout_s:.0f} s "
                                      f"(killed)\n--- last lines of {err_file} ---\n{tail(err_file)}")
        except BaseException:
            kill_group(proc)
            proc.wait()
            raise
        kill_group(proc)   # nothing it started outlives its answer
    finally:
        out.finish()
        err.finish()
    rc = proc.returncode
    wall_s = round(time.perf_counter() - t0, 3)
    if out.dropped_bytes:
        return fail(engine, case, f"wrote {out.kept_bytes + out.dropped_bytes} bytes on stdout, more than "
                                  f"{MAX_OUTPUT_BYTES} (the rest was discarded unread)")
    stdout = out_file.read_bytes().decode("utf-8", errors="replace")
    obs = _judge_output(engine, plan, case, case_json, rc, stdout, err_file)
    obs.setdefault("timing", {})["plan_wall_s"] = wall_s
    capped = err.note("stderr")
    if capped:
        obs["provenance"]["glue"] = list(obs["provenance"].get("glue") or []) + [
            {"name": "conformance.harness.capture", "description": capped}]
        if obs["status"] != "ok":
            obs["message"] = f"{obs.get('message') or ''}\n({capped})".strip()
    return obs


def _refused_with_figures(engine: EngineFile, plan: LogPlan, case: Case, case_json: dict[str, Any], text: str,
                          message: str) -> dict[str, Any]:
    """A `refused` observation that keeps every figure the engine printed before its fatal line (its
    budget, its bound, ...): what it had planned when it refused. Figures that cannot be read, or that do
    not make an observation, leave the refusal with its message alone."""
    import re

    m = re.search(plan.fatal, text, re.MULTILINE) if plan.fatal else None
    before = text[:m.start()] if m else text
    try:
        obs = build_observation(plan, before, case_json, engine.name, resolved_version(engine))
    except ValueError:
        return _refused(engine, case, message)
    obs.update(status="refused", message=message, trace=None)
    stamp(engine, obs)
    try:
        return observation.validate(obs, f"{engine.name} (plan.log, {engine.path})")
    except observation.ObservationError:
        return _refused(engine, case, message)


def _judge_output(engine: EngineFile, plan: CommandPlan | LogPlan, case: Case, case_json: dict[str, Any], rc: int,
                  stdout: str, err_file: Path) -> dict[str, Any]:
    source = f"{engine.name} (plan.{plan.kind}, {engine.path})"
    if isinstance(plan, LogPlan):
        text = stdout + "\n" + err_file.read_text(errors="replace")
        matcher = Matcher()
        try:
            fatal = fatal_message(plan, text, matcher)
        except ValueError as exc:
            return fail(engine, case, f"{source}: {exc}")
        if fatal is not None or rc in plan.refusal_exit_codes:
            return _refused_with_figures(engine, plan, case, case_json, text, fatal or _last_lines(err_file)
                                         or stdout.strip()[-2000:]
                                         or f"{describe_exit(rc)} (a refusal exit code) with no message")
        if rc != 0:
            return fail(engine, case, f"dry run {describe_exit(rc)}\n--- last lines ---\n{tail(err_file)}")
        try:
            obs = build_observation(plan, text, case_json, engine.name, resolved_version(engine), matcher)
        except ValueError as exc:
            return fail(engine, case, f"{source}: {exc}")
        stamp(engine, obs)
        try:
            return observation.validate(obs, source)
        except observation.ObservationError as exc:
            return fail(engine, case, f"{source}: the parsed figures do not make an observation:\n{exc}")
    if rc in plan.refusal_exit_codes:
        return _refused(engine, case, _last_lines(err_file) or f"{describe_exit(rc)} (a refusal exit code) "
                                                                 f"with no message")
    if rc != 0:
        return fail(engine, case, f"plan command {describe_exit(rc)}\n--- last lines of {err_file} ---\n"
                                  f"{tail(err_file)}")
    if not stdout.strip():
        return fail(engine, case, f"plan command exited 0 without writing an observation on stdout\n"
                                  f"--- last lines of {err_file} ---\n{tail(err_file)}")
    return accept_document(engine, case, stdout, source)
