"""The process adapter: any engine with an OpenAI-compatible server, run live through a manifest.

Contract: `run_live(manifest, case, settings)` returns one schema-valid `run`-mode observation,
whatever the engine does. It starts the engine as a subprocess (argv list, its own process
group, stdout + stderr kept in a log file), waits for the health URL, reads the plan figures
from the startup lines (`throughput.plan`), drives the load generator's ladder, and stops the
whole process group on every exit path (SIGTERM, then SIGKILL after `stop_timeout_s`). An
engine that dies, hangs at startup or fails a rung yields an `error` observation whose message
ends with the engine's last log lines; rungs already measured are kept. An exit code the
manifest lists as a refusal yields `refused`. A mapping the case cannot be expressed in
(`ValueError` from the manifest's mapping module) is `refused` with that message. A
KeyboardInterrupt (Ctrl-C, or SIGTERM where the caller turns it into one) stops the engine and is
re-raised carrying, as `exc.observation`, an `error` observation with the rungs measured so far.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import httpx

from conformance import paths
from conformance.documents import observation
from conformance.documents.json_file import vocab_size
from conformance.engines.manifest import Manifest, case_values, render, render_argv, render_env
from conformance.harness.bounded_regex import Matcher, clip_lines
from conformance.harness.capture import CappedOutput, run_capped
from conformance.harness.hardware import describe
from conformance.harness.live_sampler import LiveSampler
from conformance.harness.supervise import argv_line, describe_exit, kill_group, spawn, tail
from conformance.loadgen import LoadgenSettings, Workload, run_ladder
from conformance.loadgen.client import REQUEST_PROTOCOLS

HEALTH_POLL_S = 0.25
SAMPLE_INTERVAL_S = 0.05   # the live sampler's period: NVML and one /metrics scrape, a few ms each
LOG_TAIL_LINES = 30
MAX_LOG_BYTES = 64 << 20      # the engine's log, kept while it runs; the rest is discarded (noted)
MAX_VERSION_BYTES = 1 << 16   # a version command's stdout


ERROR_EXIT_GRACE_S = 2.0   # after a failed rung: how long to wait for the engine's exit to be visible


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _version(m: Manifest, values: Mapping[str, Any], env: dict[str, str], workdir: Path) -> str:
    """`version`, else the last line `version_command` prints: run under the manifest's startup
    timeout, its output read through `MAX_VERSION_BYTES`, nothing it starts left running."""
    if m.version_command:
        try:
            rc, text, _ = run_capped(render_argv(m.version_command, values, "version_command"), m.startup_timeout_s,
                                     MAX_VERSION_BYTES, workdir, env=env)
        except OSError:
            return "unknown"
        lines = text.strip().splitlines()
        return lines[-1].strip()[:200] if rc == 0 and lines else "unknown"
    return render(m.version, values, "version") if m.version else "unknown"


def parse_plan_figures(log_text: str, regexes: Mapping[str, str]) -> dict[str, float | int | None]:
    """First match of each regex; group 1 with thousands separators dropped, as int or float. Lines
    are cut and the regexes time-bounded (`harness.bounded_regex`); a group that is not a finite
    number, or a regex past the budget, raises ValueError naming the figure and what was printed."""
    out: dict[str, float | int | None] = {}
    text_in, _ = clip_lines(log_text)
    matcher = Matcher()
    for name, rx in regexes.items():
        m = matcher.search(rx, text_in, f"startup_regexes.{name}", multiline=True)
        if not m:
            out[name] = None
            continue
        text = (m.group(1) or "").replace(",", "").strip()
        try:
            value: float | int = float(text) if any(c in text for c in ".eEnN") else int(text)
        except ValueError:
            raise ValueError(f"startup_regexes.{name}: the engine printed {m.group(0)[:200]!r}, and "
                             f"{text[:80]!r} is not a number") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"startup_regexes.{name}: the engine printed {m.group(0)[:200]!r}, not a finite number")
        out[name] = value
    return out


class EngineProcess:
    """One engine subprocess in its own session / process group. Use as a context manager."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, stop_timeout_s: float):
        self.argv, self.env, self.log_path, self.stop_timeout_s = argv, env, log_path, stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log: CappedOutput | None = None

    def __enter__(self) -> "EngineProcess":
        """Start the engine under a lingering subreaper (`supervise.spawn`): a launcher that detaches
        its server (`nohup ... &`, `setsid -f`) and exits leaves the server watched, and killed at
        `stop()`. Its output goes through a `MAX_LOG_BYTES` cap into `log_path`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = CappedOutput(self.log_path, MAX_LOG_BYTES, header=(argv_line(self.argv) + "\n").encode())
        try:
            self.proc = spawn(self.argv, linger=True, stdout=self.log.fileno(), stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=self.env, cwd=str(paths.REPO_ROOT))
        except OSError:
            self.log.finish(0)
            raise
        finally:
            self.log.close_writer()
        return self

    def log_note(self) -> str | None:
        return self.log.note("engine log") if self.log else None

    def log_text(self) -> str:
        """What the engine printed so far (at most `MAX_LOG_BYTES`)."""
        try:
            with self.log_path.open("rb") as fh:
                return fh.read(MAX_LOG_BYTES + (1 << 16)).decode("utf-8", errors="replace")
        except OSError:
            return ""

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def exited(self, grace_s: float = 0.0) -> str | None:
        """None while running, else how it ended ("exited with code 3", "was killed by SIGKILL").
        `grace_s`: wait that long for an exit first (a killed engine drops its connections a moment
        before the kernel reports it gone)."""
        if self.proc is None:
            return None
        if grace_s > 0:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        rc = self.proc.poll()
        return None if rc is None else f"engine {describe_exit(rc)}"

    def stop(self) -> None:
        """SIGTERM to the supervisor (it passes it once to every process of the tree, detached ones
        included), `stop_timeout_s` to exit, then SIGKILL to the whole tree (`kill_group`)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=self.stop_timeout_s)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass
        kill_group(self.proc)
        self.proc.wait()
        if self.log is not None:
            self.log.finish()

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, n)


def wait_healthy(url: str, engine: EngineProcess, timeout_s: float) -> str | None:
    """None once `url` answers 200; else why not (the engine exited, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            gone = engine.exited()
            if gone:
                return f"{gone} before {url} answered"
            try:
                if client.get(url).status_code == 200:
                    # NOTE: another process on the same port answers too; our engine must still be alive
                    gone = engine.exited(grace_s=HEALTH_POLL_S)
                    return f"{gone}, yet {url} answered: another process holds the port" if gone else None
            except (httpx.HTTPError, OSError):
                pass
            time.sleep(HEALTH_POLL_S)
    return f"{url} did not answer 200 within {timeout_s:g} s"


def rung_phases(settings: LoadgenSettings) -> list[str]:
    """The live sampler's phase label of each rung, in order: `c=N` (closed loop), `rate=R/s` (open loop)."""
    if settings.open_loop:
        return [f"rate={r:g}/s" for r in settings.request_rates_per_s]
    return [f"c={c}" for c in settings.concurrencies]


def _settings_json(settings: LoadgenSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "open" if settings.open_loop else "closed",
                           "num_repeats": settings.num_repeats, "num_warmup_waves": settings.num_warmup_waves,
                           "min_requests_per_slot": settings.min_requests_per_slot}
    if settings.open_loop:
        out.update(request_rates_per_s=list(settings.request_rates_per_s), arrival=settings.arrival,
                   burstiness=settings.burstiness, max_concurrency=settings.max_concurrency)
    else:
        out["concurrencies"] = list(settings.concurrencies)
    return out


def _with_log(message: str, engine: EngineProcess) -> str:
    return f"{message}\n--- engine log ({engine.log_path.name}, last lines) ---\n{engine.log_tail()}"


def run_live(m: Manifest, case: dict[str, Any], settings: LoadgenSettings, overrides: Mapping[str, Any] | None = None,
             log_dir: Path | None = None, on_rung: Callable[[dict[str, Any]], None] = lambda r: None,
             on_started: Callable[[EngineProcess], None] = lambda e: None) -> dict[str, Any]:
    """See the module doc. `on_rung` sees each rung as it is measured; `on_started` the engine process."""
    t0 = time.perf_counter()
    profile = case["device"]
    port = int((overrides or {}).get("port") or free_port())
    try:
        values = case_values(case, port, overrides, m.mapping_module)
    except ValueError as exc:   # the engine has no knob for what the case asks
        return observation.failed(case["id"], m.engine, "unknown", "run", profile, "refused", str(exc))
    argv = render_argv(m.command, values)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(paths.REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(render_env(m.env, values))
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"live-{m.engine}-"))
    version = _version(m, values, env, log_dir)
    obs = observation.new(case["id"], m.engine, version, "run", profile)
    obs["device"]["hardware"] = describe(str(values.get("device", "cpu")))
    obs["provenance"]["mapping"] = {"argv": argv, "env": render_env(m.env, values), "manifest": str(m.path)}
    obs["provenance"]["glue"] = [
        {"name": "conformance.loadgen",
         "description": f"{'open' if settings.open_loop else 'closed'}-loop streaming client: requests, clock, seeds, "
                        "throughput and latency figures, acceptance from /metrics deltas"},
        {"name": "conformance.harness.live.parse_plan_figures",
         "description": f"plan figures read from the engine's startup log by the manifest's regexes ({m.path.name})"}]
    obs["provenance"]["functions"] = [f"{m.engine} server: POST {REQUEST_PROTOCOLS[m.request_protocol][0]} (stream)",
                                      f"{m.engine} server: GET /metrics"]
    log_path = log_dir / f"{m.engine}-{case['id']}.log"
    workload = Workload.from_case(case, vocab_size(case["resolved"]["target_dir"]))
    timing: dict[str, Any] = {"log_file": str(log_path)}
    obs["timing"] = timing
    engine = EngineProcess(argv, env, log_path, m.stop_timeout_s)
    try:
        engine.__enter__()
    except OSError as exc:   # a missing or non-executable binary: an error observation, not a traceback
        out = observation.failed(case["id"], m.engine, version, "run", profile, "error",
                                 f"could not start {argv[0]!r} (command[0] of {m.path}): {exc.strerror or exc}")
        out.update(device=obs["device"], provenance=obs["provenance"], timing=timing)
        return observation.validate(out, f"process adapter ({m.path.name})")
    done: list[dict[str, Any]] = []
    plan: dict[str, Any] = {}
    sampler: LiveSampler | None = None
    try:   # started once above: the with-statement would start it a second time on the same port
        on_started(engine)
        why = wait_healthy(render(m.health_url, values, "health_url"), engine, m.startup_timeout_s)
        timing["startup_s"] = time.perf_counter() - t0
        if why:
            rc = engine.proc.poll()
            status = "refused" if rc is not None and rc in m.refusal_exit_codes else "error"
            out = observation.failed(case["id"], m.engine, version, "run", profile, status, _with_log(why, engine))
            out.update(device=obs["device"], provenance=obs["provenance"], timing=timing)
            return observation.validate(out, f"process adapter ({m.path.name})")
        try:
            plan = parse_plan_figures(engine.log_text(), m.startup_regexes)
        except ValueError as exc:
            out = observation.failed(case["id"], m.engine, version, "run", profile, "error",
                                     _with_log(f"the startup lines cannot be read ({m.path.name}): {exc}", engine))
            out.update(device=obs["device"], provenance=obs["provenance"], timing=timing)
            return observation.validate(out, f"process adapter ({m.path.name})")
        t1 = time.perf_counter()
        base_url = render(m.base_url, values, "base_url")
        sampler = LiveSampler(engine.proc.pid, f"{base_url.rstrip('/')}/metrics", m.running_requests_metric,
                              interval_s=SAMPLE_INTERVAL_S, device=str(values.get("device", "cuda")))
        sampler.start()
        sampler.wait_for_samples(2)   # the idle footprint, before any request
        phases = rung_phases(settings)
        sampler.mark(phases[0])

        def rung_done(rung: dict[str, Any]) -> None:   # rungs come in the settings' order
            done.append(rung)
            if len(done) < len(phases):
                sampler.mark(phases[len(done)])
            on_rung(rung)

        try:
            result = run_ladder(base_url, workload, settings, m.metrics,
                                int(case["speculative"]["num_speculative_tokens"]), on_rung=rung_done,
                                alive=lambda: engine.exited(grace_s=ERROR_EXIT_GRACE_S), extra_body=m.request_extra,
                                protocol=m.request_protocol)
        finally:
            sampler.stop()
        timing["ladder_s"] = time.perf_counter() - t1
        live = sampler.summary()
        # open loop holds no fixed number in flight: live.concurrency_served has nothing to compare
        live["top_rung"] = None if settings.open_loop else phases[-1]
        live["mode"] = "open" if settings.open_loop else "closed"
        timing["rungs"] = [{"concurrency": r["concurrency"], "wall_s": r.pop("wall_s", None)} for r in result.rungs]
        obs["throughput"] = {"model": result.model, "plan": plan, "rungs": result.rungs, "live": live,
                             "workload": {"prompt_tokens": workload.prompt_tokens,
                                          "output_tokens": workload.output_tokens, "seed": workload.seed},
                             "settings": _settings_json(settings)}
        failed = result.message or next((r["message"] for r in result.rungs if r["status"] == "error"), None)
        gone = engine.exited()
        if gone and not failed:
            failed = (f"{gone} during the ladder, yet its rungs were answered: another process holds port {port}, "
                      f"and the figures are not this engine's")
        if failed:
            obs["status"], obs["message"] = "error", _with_log(failed, engine)
    except KeyboardInterrupt as exc:   # Ctrl-C / SIGTERM: the rungs measured so far ride on the exception
        if sampler is not None:
            sampler.stop()
        engine.stop()
        timing["rungs"] = [{"concurrency": r["concurrency"], "wall_s": r.pop("wall_s", None)} for r in done]
        if done or sampler is not None:
            obs["throughput"] = {"model": None, "plan": plan, "rungs": done,
                                 "live": sampler.summary() if sampler is not None else None,
                                 "workload": {"prompt_tokens": workload.prompt_tokens,
                                              "output_tokens": workload.output_tokens, "seed": workload.seed},
                                 "settings": _settings_json(settings)}
        why = str(exc) or "SIGINT"
        obs["status"], obs["message"] = "error", (f"interrupted ({why}) after {len(done)} measured rung(s); the "
                                                  f"measured rungs are kept, the rest were not run")
        timing["wall_s"] = time.perf_counter() - t0
        try:
            exc.observation = observation.validate(obs, f"process adapter ({m.path.name})")
        except observation.ObservationError:
            pass
        raise
    finally:
        engine.stop()
        note = engine.log_note()
        if note:
            obs["provenance"]["glue"].append({"name": "conformance.harness.capture", "description": note})
    timing["wall_s"] = time.perf_counter() - t0
    return observation.validate(obs, f"process adapter ({m.path.name})")
