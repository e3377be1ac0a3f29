"""Issue 28's attacks on what runs (items 4 and 6-11): engine processes and their output, the live path's
answers, the reference server's clients, the cache. Replayed by `benchmarks/redteam.py` (its table);
each row is (item, attack, outcome, seconds, peak MiB, what is left after).

Contract: `rows(tmp)` yields those rows one by one, running each attack for real: `conformance` as a
child process (peak RSS from wait4), engine files written under `tmp`, a cache of its own under `tmp`
(never the user's), a reference server and the hostile live server of `tests/redteam/_hostile_server.py`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO / "tests" / "redteam" / "_hostile_server.py"
CASE = "tiny-dflash-c4-k8"
Row = tuple[str, str, str, float, float, str]


class Ran:
    def __init__(self, rc: int | str, out: str, err: str, wall_s: float, peak_mib: float):
        self.rc, self.out, self.err, self.wall_s, self.peak_mib = rc, out, err, wall_s, peak_mib

    @property
    def head(self) -> str:
        return f"exit {self.rc}" + (" (TRACEBACK)" if "Traceback" in self.err + self.out else "")


def cli(args: list[str], tmp: Path, timeout_s: float = 120, on_start: Callable[[subprocess.Popen], None] | None = None,
        **extra_env: str) -> Ran:
    env = dict(os.environ, PYTHONPATH=str(REPO), DFLASH_CONFORMANCE_CACHE=str(tmp / "cache"))
    env.update(extra_env)
    out_f, err_f = tmp / "rt.stdout", tmp / "rt.stderr"
    t0 = time.monotonic()
    with out_f.open("wb") as out, err_f.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "conformance", *args], cwd=str(REPO), env=env, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)
        if on_start:
            on_start(proc)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc: int | str = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - t0 > timeout_s:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                rc = f"killed after {timeout_s:.0f} s"
                break
            time.sleep(0.02)
    proc.returncode = 0
    return Ran(rc, out_f.read_text(errors="replace"), err_f.read_text(errors="replace"), time.monotonic() - t0,
               usage.ru_maxrss / 1024)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _survivors(pid_file: Path) -> str:
    """'none left' or the pids still running (killed here, so the next row starts clean)."""
    time.sleep(1.0)
    pids = [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []
    left = [p for p in pids if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return ("NO: " + ",".join(map(str, left)) + " left running") if left else ("none left" if pids else "never started")


def _engine(tmp: Path, name: str, doc: dict) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "role": "under-test", **doc}))
    return path


def _obs(ran: Ran) -> dict:
    try:
        return json.loads(ran.out[:ran.out.rindex("}") + 1])
    except ValueError:
        return {}


def _said(ran: Ran, obs: dict | None = None) -> str:
    obs = _obs(ran) if obs is None else obs
    text = obs.get("message") or ran.err.strip().splitlines()[-1:] or [""]
    return (text if isinstance(text, str) else text[0]).splitlines()[0][:60]


# --- items 6, 7: plan and version commands -------------------------------------------------------------

def _daemon(pid_file: Path) -> str:
    return (f"setsid -f sh -c 'echo $$ >> {pid_file}; exec sleep 300' </dev/null >/dev/null 2>&1; "
            f"while [ ! -s {pid_file} ]; do sleep 0.05; done")


def process_rows(tmp: Path) -> Iterator[Row]:
    logs = ["--log-dir", str(tmp / "logs")]
    pid_file = tmp / "plan-daemon.pids"
    eng = _engine(tmp, "daemon-plan", {"version": "1", "plan": {"command": {
        "argv": ["sh", "-c", _daemon(pid_file) + "; sleep 0.3; exit 1"]}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, *logs], tmp)
    yield "7", "plan command detaches a daemon (setsid -f)", f"{ran.head}; {_said(ran)[:30]}", ran.wall_s, \
        ran.peak_mib, f"daemon: {_survivors(pid_file)}"
    pid_file = tmp / "version-daemon.pids"
    eng = _engine(tmp, "daemon-version", {"version_command": ["sh", "-c", _daemon(pid_file) + "; echo 9.9"],
                                          "plan": {"command": {"argv": ["sh", "-c", "exit 1"]}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, *logs], tmp)
    yield "7", "version command detaches a daemon (setsid -f)", f"{ran.head}; version {_obs(ran).get('engine', {}).get('version')}", \
        ran.wall_s, ran.peak_mib, f"daemon: {_survivors(pid_file)}"
    eng = _engine(tmp, "regex-200k", {"version": "1", "plan": {"log": {
        "argv": [sys.executable, "-c", "print('1' * 200_000); print('max_num_seqs=4')"], "timeout_s": 5,
        "fields": {"budget.max_num_seqs": r"(\d+) running", "budget.max_active_seqs": r"max_num_seqs=(\d+)"}}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, *logs], tmp, timeout_s=90)
    obs = _obs(ran)
    cut = "lines cut" if "were cut to" in json.dumps(obs.get("provenance", {})) else "no cut noted"
    yield "6", "(\\d+) running vs one 200k-digit line, timeout 5 s", f"{ran.head}; {obs.get('status')}, {cut}", \
        ran.wall_s, ran.peak_mib, "-"
    eng = _engine(tmp, "regex-backtrack", {"version": "1", "plan": {"log": {
        "argv": [sys.executable, "-c", "print('x' * 3000)"], "timeout_s": 5,
        "fields": {"budget.max_num_seqs": r"((x+x+)+)y"}}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, *logs], tmp, timeout_s=90)
    obs = _obs(ran)
    yield "6", "((x+x+)+)y vs 3,000 x (exponential backtracking)", \
        f"{ran.head}; {obs.get('status')}: {'time budget' if 'did not finish' in obs.get('message', '') else '?'}", \
        ran.wall_s, ran.peak_mib, "-"
    flood_logs = tmp / "flood-logs"
    eng = _engine(tmp, "flood", {"version": "1", "plan": {"command": {
        "argv": ["sh", "-c", "head -c 300000000 /dev/zero | tr '\\0' x 1>&2; exit 1"], "timeout_s": 120}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, "--log-dir", str(flood_logs)], tmp, timeout_s=180)
    size = max((p.stat().st_size for p in flood_logs.rglob("*") if p.is_file()), default=0)
    noted = "noted" if "cap were discarded" in _obs(ran).get("message", "") else "NOT noted"
    yield "6", "300 MB stderr flood", f"{ran.head}; log {size >> 20} MiB, rest discarded ({noted})", ran.wall_s, \
        ran.peak_mib, "-"
    eng = _engine(tmp, "version-flood", {"version_command": ["sh", "-c", "head -c 50000000 /dev/zero; sleep 100"],
                                         "plan": {"command": {"argv": ["sh", "-c", "exit 1"], "timeout_s": 3}}})
    ran = cli(["plan", "--engine", str(eng), "--case", CASE, *logs], tmp, timeout_s=90)
    yield "6", "version_command: 50 MB then hangs (timeout_s 3)", \
        f"{ran.head}; {str(_obs(ran).get('engine', {}).get('version'))[:40]}", ran.wall_s, ran.peak_mib, "-"
    eng = _engine(tmp, "brace", {"version": "1", "plan": {"command": {"argv": ["sh", "-c", "echo {}"]}}})
    ran = cli(["engines", "check", str(eng)], tmp)
    said = (ran.err + ran.out).strip().splitlines()[-1:] or [""]
    yield "11", "a literal {} in argv", f"{ran.head}; {said[0].split(': ', 2)[-1][:40]}", ran.wall_s, ran.peak_mib, "-"


# --- items 9, 7, 11: the live path (conformance ladder against a hostile server) ---------------------

def _live_engine(tmp: Path, attack: str, pid_file: Path, launcher: bool = False) -> Path:
    server = [sys.executable, str(HOSTILE), "--port", "{port}", "--pid-file", str(pid_file), "--attack", attack]
    command = (["sh", "-c", "nohup " + " ".join(json.dumps(a) for a in server) + " >/dev/null 2>&1 &"]
               if launcher else server)
    return _engine(tmp, f"live-{attack}{'-launcher' if launcher else ''}", {"version": "1", "plan": {
        "command": {"argv": ["true"]}}, "live": {
        "version": "1", "command": command, "health_url": "http://{host}:{port}/health",
        "base_url": "http://{host}:{port}", "startup_timeout_s": 60, "stop_timeout_s": 5,
        "metrics": {"running_requests": "vllm:num_requests_running",
                    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
                    "drafts": "vllm:spec_decode_num_drafts_total"},
        "startup_regexes": {"max_concurrency": r"max_concurrency=(\S+)"}}})


LADDER = ["--case", CASE, "--concurrency", "1,2", "--warmup-waves", "0", "--min-requests-per-slot", "1",
          "--request-timeout-s", "20"]


def live_rows(tmp: Path) -> Iterator[Row]:
    for item, attack, name in (("9", "usage-many", 'usage.completion_tokens: "many"'),
                               ("9", "models-null", '/v1/models {"data": [null]}'),
                               ("9", "startup-figure", "startup figure max_concurrency=1.2.3"),
                               ("9", "counter-inf", "accepted-tokens counter +Inf"),
                               ("9", "gauge-huge", "running gauge 1e999 (first scrapes)"),
                               ("7", "none", "launcher detaches the server (nohup &)")):
        pid_file = tmp / f"live-{attack}.pids"
        out = tmp / f"live-{attack}.json"
        eng = _live_engine(tmp, attack, pid_file, launcher=name.startswith("launcher"))
        ran = cli(["ladder", "--engine", str(eng), *LADDER, "--out", str(out)], tmp)
        obs = json.loads(out.read_text()) if out.exists() else {}
        rungs = (obs.get("throughput") or {}).get("rungs") or []
        if obs.get("status") == "ok":
            live = obs["throughput"]["live"]["by_phase"].get("c=2", {})
            what = f"ok, {len(rungs)} rungs, running max {live.get('max_running_requests')}"
        else:
            what = f"{obs.get('status', 'no observation')}: {(obs.get('message') or '').splitlines()[0][:40] if obs else ''}"
        yield item, f"ladder: {name}", f"{ran.head}; {what}", ran.wall_s, ran.peak_mib, f"server: {_survivors(pid_file)}"
    pid_file = tmp / "live-interrupt.pids"
    out = tmp / "live-interrupt.json"
    eng = _live_engine(tmp, "none", pid_file)

    def interrupt(proc: subprocess.Popen) -> None:
        threading.Timer(6.0, lambda: proc.send_signal(signal.SIGINT)).start()

    ran = cli(["ladder", "--engine", str(eng), "--case", CASE, "--concurrency", "1,2,4,8,16,32,64,128", "--warmup-waves",
               "0", "--min-requests-per-slot", "40", "--out", str(out)], tmp, on_start=interrupt)
    obs = json.loads(out.read_text()) if out.exists() else {}
    rungs = (obs.get("throughput") or {}).get("rungs") or []
    yield "11", "ladder Ctrl-C after 6 s", f"{ran.head}; --out {'written' if obs else 'MISSING'}, {len(rungs)} rungs kept", \
        ran.wall_s, ran.peak_mib, f"server: {_survivors(pid_file)}"


# --- items 4, 8: the reference server --------------------------------------------------------------

def _gauges(port: int) -> dict[str, float]:
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^vllm:num_requests_(running|waiting) (\S+)$", text, re.MULTILINE)}


def _hang_up(port: int, body: dict, after_s: float) -> None:
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        time.sleep(after_s)


def server_attacks() -> list[tuple[str, str, Callable[[int], str]]]:
    """(item, attack, fn(port) -> outcome) on a reference server with --max-num-seqs 2."""
    import httpx

    def over_seats(port: int) -> str:
        seen: list[dict[str, float]] = []

        def one() -> None:
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 32,
                       "ignore_eos": True}, timeout=120, trust_env=False)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            seen.append(_gauges(port))
            time.sleep(0.02)
        run = max(g.get("running", -1) for g in seen)
        wait = max(g.get("waiting", -1) for g in seen) if any("waiting" in g for g in seen) else "absent"
        return f"running max {run:g} (max_num_seqs 2), waiting max {wait}"

    def hang_up(stream: bool) -> Callable[[int], str]:
        def attack(port: int) -> str:
            body = {"prompt": [1, 2, 3], "max_tokens": 400, "ignore_eos": True, "stream": stream}
            threads = [threading.Thread(target=_hang_up, args=(port, body, 0.3)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60:
                g = _gauges(port)
                if not g.get("running") and not g.get("waiting"):
                    return f"engine idle {time.monotonic() - t0:.1f} s after the 4 hung up"
                time.sleep(0.1)
            return "engine still busy 60 s after the clients hung up"
        return attack

    def batch(port: int) -> str:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": [[1]] * 20_000, "max_tokens": 16},
                       timeout=600, trust_env=False)
        return f"{r.status_code} {r.text[:120]}"

    return [("4", "8 concurrent at max_num_seqs 2 (gauges)", over_seats),
            ("8", "4 non-streamed clients hang up", hang_up(False)),
            ("8", "4 streamed clients hang up", hang_up(True)),
            ("8", "20,000 one-token prompts in one body", batch)]


# --- item 10: the cache ------------------------------------------------------------------------------

def _wheel(tmp: Path) -> Path:
    files = {"fakeoracle/__init__.py": "__version__ = '1.0'\n", "jsonschema.py": "", "yaml.py": "",
             "fakeoracle-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakeoracle\nVersion: 1.0\n",
             "fakeoracle-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: redteam\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()] + ["fakeoracle-1.0.dist-info/RECORD,,"]
    files["fakeoracle-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    out = tmp / "fakeoracle-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for p, t in files.items():
            zf.writestr(p, t)
    return out


def cache_rows(tmp: Path) -> Iterator[Row]:
    cache = tmp / "cache"
    slow = _engine(tmp, "slow", {"version": "1", "plan": {"command": {"argv": ["sh", "-c", "sleep 4; exit 1"]}}})

    def prune_meanwhile(proc: subprocess.Popen) -> None:
        def fill() -> None:
            root = cache / "logs"
            deadline = time.monotonic() + 60
            while not list(root.glob("slow-*")) and time.monotonic() < deadline:
                time.sleep(0.05)
            env = dict(os.environ, PYTHONPATH=str(REPO), DFLASH_CONFORMANCE_CACHE=str(cache))
            subprocess.run([sys.executable, "-c", "from conformance.harness import log_dirs\n"
                            "for _ in range(60): log_dirs.new_log_dir('filler')"], env=env, check=False)
        threading.Thread(target=fill, daemon=True).start()

    ran = cli(["plan", "--engine", str(slow), "--case", CASE], tmp, on_start=prune_meanwhile)
    yield "10", "prune <cache>/logs while a plan runs", f"{ran.head}; {_said(ran)[:40]}", ran.wall_s, ran.peak_mib, "-"
    wheel = _wheel(tmp)
    venv_engine = _engine(tmp, "fakeoracle", {"version": "1.0", "plan": {"module": {
        "name": "fakeoracle", "environment": "venv", "pip": [str(wheel)]}}})
    venv = cache / "oracles" / "fakeoracle-1.0"
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ran = cli(["envs", "install", str(venv_engine)], tmp, timeout_s=300)
    hint = "hint given" if "has no pip" in ran.out else "no hint"
    yield "10", "venv left without pip (interrupted build)", f"{ran.head}; {hint}", ran.wall_s, ran.peak_mib, \
        "ready" if (venv / "conformance-env.json").is_file() else "not built"
    egg = tmp / "checkout" / "dflash_conformance.egg-info"
    egg.mkdir(parents=True, exist_ok=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: dflash-conformance\nVersion: 0.1.0\n")
    (egg / "requires.txt").write_text("torch>=2.4\n")
    ran = cli(["envs", "install", "--force", str(venv_engine)], tmp, timeout_s=300,
              PYTHONPATH=os.pathsep.join([str(REPO), str(egg.parent)]))
    yield "10", "venv build, checkout egg-info on PYTHONPATH", ran.head, ran.wall_s, ran.peak_mib, \
        "ready" if (venv / "conformance-env.json").is_file() else "not built"
    victim = tmp / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "precious.txt").write_text("keep me")
    bad = _engine(tmp, "fakeoracle-bad", {"version": "1.0/../../../victim", "plan": {"module": {
        "name": "fakeoracle", "environment": "venv", "pip": [str(wheel)]}}})
    ran = cli(["engines", "check", str(bad)], tmp)
    yield "10", "version 1.0/../../../victim: engines check", ran.head, ran.wall_s, ran.peak_mib, "-"
    ran = cli(["envs", "install", str(bad)], tmp, timeout_s=120)
    yield "10", "version 1.0/../../../victim: envs install", ran.head, ran.wall_s, ran.peak_mib, \
        "victim kept" if (victim / "precious.txt").exists() else "VICTIM REMOVED"


def rows(tmp: Path) -> Iterator[Row]:
    """Every CLI-driven row (processes, live, cache); the server rows go through `server_attacks`."""
    tmp.mkdir(parents=True, exist_ok=True)
    yield from process_rows(tmp)
    yield from live_rows(tmp)
    yield from cache_rows(tmp)
