"""Replay the attacks of issue 17 (items 1-7) and issue 28 against a fresh reference server and the CLI; print a table.

Not a CI gate: it reports what it sees. Per attack: the exit code (CLI) or HTTP status (server),
seconds, peak memory (the CLI child's max RSS from wait4; the server's VmHWM), and for server
attacks whether the server still answers a normal completion afterwards. A server that died is
restarted (fresh) before the next attack, so one fatal row does not hide the others.

    .venv/bin/python benchmarks/redteam.py            # everything (about 2-4 minutes on a CPU)
    .venv/bin/python benchmarks/redteam.py --cli      # only the CLI attacks
    .venv/bin/python benchmarks/redteam.py --runtime  # only issue 28's attacks on what runs (redteam_runtime)
    .venv/bin/python benchmarks/redteam.py --issue28  # only issue 28's attacks (items 1, 2, 3, 5, 11)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODELS = REPO / "conformance" / "models"
CASE = (REPO / "suites" / "cases" / "tiny-dflash-c4-k8.yaml").read_text()
TIMEOUT_S = 30.0
NORMAL = {"prompt": [1, 2, 3], "max_tokens": 2}


def bomb(indent: str = "  ", levels: int = 9) -> str:
    n = "abcdefghij"
    lines = [f'{indent}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{indent}{n[i]}: &{n[i]} [" + ",".join([f"*{n[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


# --- CLI -------------------------------------------------------------------------------------------

def run_cli(args: list[str], tmp: Path, timeout_s: float = TIMEOUT_S) -> tuple[str, float, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO), DFLASH_CONFORMANCE_CACHE=str(tmp / "cache"))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "conformance", *args], cwd=str(REPO), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - t0 > timeout_s:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            rc = f"killed after {timeout_s:.0f} s"
            break
        time.sleep(0.02)
    proc.returncode = 0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    tb = " (traceback)" if "Traceback" in err else ""
    return f"exit {rc}{tb}", time.monotonic() - t0, usage.ru_maxrss / 1024


def model(tmp: Path, name: str, shape: str, **changes) -> Path:
    out = tmp / name
    shutil.copytree(MODELS / shape, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(changes)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def case(tmp: Path, name: str, text: str = CASE, **repl: str) -> Path:
    text = text.replace("id: tiny-dflash-c4-k8", "id: attack")
    for old, new in repl.items():
        text = text.replace(old, new)
    p = tmp / f"{name}.yaml"
    p.write_text(text)
    return p


def cli_attacks(tmp: Path) -> list[tuple[str, str, list[str]]]:
    """(item, attack, argv) rows; files are written as the rows are built."""
    rows = []
    plan = lambda p: ["plan", "--engine", "reference", "--case", str(p)]  # noqa: E731
    rows.append(("2", "alias bomb under an unknown key (case)", plan(case(tmp, "b1", CASE + "junk:\n" + bomb()))))
    b2 = case(tmp, "b2", CASE + "intended_differences:\n  - oracle: vllm\n    engines: [reference]\n    field: budget\n    reason: x\n"
              "    expected:\n" + bomb("      "))
    rows.append(("2", "alias bomb in intended_differences[].expected (run)",
                 ["run", "--engines", "reference", "--cases", str(b2), "--out", str(tmp / "reports")]))
    eng = tmp / "bomb-engine.yaml"
    eng.write_text("name: bomb\nrole: under-test\nplan:\n  command:\n    argv: [/bin/true]\njunk:\n" + bomb())
    rows.append(("2", "alias bomb in an engine file", ["plan", "--engine", str(eng), "--case", "tiny-dflash-c4-k8"]))
    man = tmp / "bomb-manifest.yaml"
    live = yaml.safe_load((REPO / "conformance/engines/engine_files/reference.yaml").read_text())["live"]
    man.write_text(yaml.safe_dump({"engine": "reference", **live}, sort_keys=False) + "\njunk:\n" + bomb())
    rows.append(("2", "alias bomb in a manifest", ["ladder", "--manifest", str(man), "--case", "tiny-dflash-c4-k8"]))
    zero = model(tmp, "t-zero", "tiny-hybrid")
    (zero / "config.json").unlink()
    os.symlink("/dev/zero", zero / "config.json")
    rows.append(("4", "config.json -> /dev/zero", plan(case(tmp, "c-zero", **{"target: tiny-hybrid": f"target: {zero}"}))))
    fifo = model(tmp, "t-fifo", "tiny-hybrid")
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")
    rows.append(("4", "config.json is a FIFO", plan(case(tmp, "c-fifo", **{"target: tiny-hybrid": f"target: {fifo}"}))))
    deep = model(tmp, "t-deep", "tiny-hybrid")
    (deep / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    rows.append(("4", "config.json nested 200k deep", plan(case(tmp, "c-deep", **{"target: tiny-hybrid": f"target: {deep}"}))))
    big = model(tmp, "t-int", "tiny-hybrid")
    (big / "config.json").write_text((big / "config.json").read_text()[:-1] + ', "x": ' + "9" * 5000 + "}")
    rows.append(("4", "config.json with a 5000-digit integer", plan(case(tmp, "c-int", **{"target: tiny-hybrid": f"target: {big}"}))))
    rows.append(("5", "max_model_len: 2048.0", plan(case(tmp, "c-f1", **{"max_model_len: 2048": "max_model_len: 2048.0"}))))
    rows.append(("5", "num_requests: 8.0", plan(case(tmp, "c-f2", **{"num_requests: 8": "num_requests: 8.0"}))))
    for key, value in (("head_dim", "64"), ("max_position_embeddings", "32768"), ("num_key_value_heads", 0),
                       ("hidden_size", 0), ("num_attention_heads", 0), ("head_dim", 0), ("tie_word_embeddings", "no"),
                       ("num_hidden_layers", 10_000_000)):
        d = model(tmp, f"t-{key}-{value}", "tiny-hybrid", **{key: value})
        rows.append(("6", f"config.json {key}: {value!r}", plan(case(tmp, f"c-{key}-{value}", **{"target: tiny-hybrid": f"target: {d}"}))))
    return rows


# --- server ----------------------------------------------------------------------------------------

class Server:
    def __init__(self, log: Path):
        argv = [sys.executable, "-m", "engine_under_test.serve", "--model", str(MODELS / "tiny-hybrid"),
                "--speculative-config", json.dumps({"method": "dflash", "model": str(MODELS / "tiny-dflash"),
                                                    "num_speculative_tokens": 4}),
                "--max-num-seqs", "2", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20), "--port", "0"]
        self.log = log
        self.proc = subprocess.Popen(argv, cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)),
                                     stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"url=http://[\d.]+:(\d+)", log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.2)
        raise RuntimeError(f"server did not start:\n{log.read_text()[-2000:]}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def peak_mib(self) -> float:
        try:
            m = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{self.proc.pid}/status").read_text())
            return int(m.group(1)) / 1024 if m else float("nan")
        except OSError:
            return float("nan")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        self.proc.wait()


def raw(port: int, data: bytes, timeout_s: float = 10.0, read: bool = True) -> str:
    """Send bytes, return the status line (or what happened)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(data)
            if not read:
                return "sent"
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            line = buf.split(b"\r\n", 1)[0].decode(errors="replace")
            return f"HTTP {line.split()[1]}" if line.startswith("HTTP/") and len(line.split()) > 1 else (line or "no response")
    except socket.timeout:
        return f"no response in {timeout_s:.0f} s"
    except OSError as exc:
        return f"connection error ({exc.__class__.__name__})"


def post(port: int, body: bytes | str, path: str = "/v1/completions", extra: str = "", timeout_s: float = 20.0) -> str:
    body = body.encode() if isinstance(body, str) else body
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode()
    return raw(port, head + body, timeout_s)


def normal_ok(port: int) -> bool:
    return post(port, json.dumps(NORMAL), timeout_s=30) == "HTTP 200"


def server_attacks():
    smuggle_inner = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\n\r\n" + json.dumps(NORMAL).encode()
    def smuggle(port):
        body = b"0\r\n\r\n" + smuggle_inner
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
        return raw(port, head + body)
    def idle(port):
        socks = []
        for _ in range(50):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
                socks.append(s)
            except OSError:
                break
        t0 = time.monotonic()
        ok = normal_ok(port)
        for s in socks:
            s.close()
        return f"normal request behind 50 half-sent: {'200' if ok else 'failed'} in {time.monotonic() - t0:.1f} s"
    body = lambda **kw: json.dumps(dict(NORMAL, **kw))  # noqa: E731
    return [
        ("1", 'seed "abc"', lambda p: post(p, body(seed="abc"))),
        ("1", "seed 1.5", lambda p: post(p, body(seed=1.5))),
        ("1", "temperature NaN", lambda p: post(p, '{"prompt": [1, 2], "max_tokens": 2, "temperature": NaN}')),
        ("1", "temperature 1e-320", lambda p: post(p, '{"prompt": [1, 2], "max_tokens": 2, "temperature": 1e-320}')),
        ("7", "Content-Length + Transfer-Encoding (smuggling)", smuggle),
        ("7", "JSON body nested 100k deep", lambda p: post(p, "[" * 100_000 + "]" * 100_000)),
        ("7", 'stream_options "x"', lambda p: post(p, body(stream=True, stream_options="x"))),
        ("7", "20 MB body", lambda p: post(p, b'{"prompt": "' + b"x" * (20 << 20) + b'"}', timeout_s=30)),
        ("7", "Content-Length: -1", lambda p: raw(p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 10)),
        ("7", "garbage bytes", lambda p: raw(p, os.urandom(512) + b"\r\n\r\n")),
        ("7", "unknown model", lambda p: post(p, body(model="no-such-model"))),
        ("7", "n=1000", lambda p: post(p, body(n=1000))),
        ("7", "stop_token_ids [1]", lambda p: post(p, body(stop_token_ids=[1]))),
        ("7", "50 half-sent requests (idle timeout)", idle),
    ]


# --- issue 28 (items 1, 2, 3, 5, 11): what an engine reports, and the machine the run is on ----------------
# Each attack runs the real CLI (or pytest) as a child and prints what became of it: refused with a message,
# an error observation naming the field, a failing verdict naming the check, or survived.

def _forge():
    sys.path.insert(0, str(REPO / "tests"))
    from redteam._forge import forged_engine, reference_observation  # noqa: E402

    return forged_engine, reference_observation


def run28(args: list[str], tmp: Path, module: str = "conformance", limit_bytes: int | None = None,
          **env_extra: str) -> tuple[int | str, str, float, float]:
    """(exit status, stdout + stderr, seconds, peak MiB) of `python -m MODULE ARGS`."""
    import resource

    env = dict(os.environ, PYTHONPATH=str(REPO), DFLASH_CONFORMANCE_CACHE=str(tmp / "cache"), COLUMNS="300")
    env.update(env_extra)
    out_f = tmp / f"run28-{time.monotonic_ns()}.out"
    preexec = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))) if limit_bytes else None
    t0 = time.monotonic()
    with out_f.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=str(REPO), env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=preexec)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc: int | str = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - t0 > 300:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                rc = "killed after 300 s"
                break
            time.sleep(0.02)
    proc.returncode = 0
    return rc, out_f.read_bytes().decode("utf-8", "backslashreplace"), time.monotonic() - t0, usage.ru_maxrss / 1024


def _said(text: str, *phrases: str) -> str:
    flat = " ".join(text.split())
    return next((p for p in phrases if p in flat), "")


def _run_dir(out: Path) -> Path | None:
    latest = out / "latest"
    return out / os.readlink(latest) if latest.is_symlink() else None


def _outcome_of(engine: str, out: Path, checks: tuple[str, ...] = ()) -> str:
    """What a run made of `engine`'s observation: its status (and the field an error names) and the
    checks it failed; whether index.html and junit.xml were written."""
    import xml.etree.ElementTree as ET

    run_dir = _run_dir(out)
    if run_dir is None:
        return "no run directory"
    obs = [json.loads(l) for l in (run_dir / "observations.jsonl").read_text().splitlines() if l.strip()]
    mine = [o for o in obs if o["engine"]["name"] == engine]
    files = "report ok" if (run_dir / "index.html").is_file() and ET.parse(run_dir / "junit.xml") else "NO REPORT"
    if not mine:
        return f"no observation; {files}"
    o = mine[0]
    if o["status"] == "error":
        m = re.search(r"\): ([\w.\[\]\"]+): ", o["message"].splitlines()[-1])
        return f"{files}; error obs: {m.group(1) if m else o['message'][:30]}"
    root = ET.parse(run_dir / "junit.xml").getroot()
    failed = sorted(tc.get("name").split("[")[0] for tc in root.iter("testcase")
                    if tc.get("classname", "").startswith(f"conformance.{engine}") and tc.find("failure") is not None
                    and (not checks or tc.get("name").split("[")[0] in checks))
    return f"{files}; {o['status']}, fails {','.join(c.split('.', 1)[1] for c in failed) or 'nothing'}"


def _hostile_texts(obs: dict) -> list[tuple[str, str, str]]:
    """(item, attack, observation text) of the schema-valid observations that crashed judging or rendering."""
    text = json.dumps(dict(obs, case_id="@CASE@"))
    step = obs["trace"]["steps"][0]["total_num_scheduled_tokens"]
    deep = '{"a": ' * 520 + "1" + "}" * 520
    short = dict(obs, message="seats " + "7" * 5000 + " full-length", case_id="@CASE@")
    short["memory"] = dict(obs["memory"], max_concurrency=2.5)
    return [
        ("2", "trace step written 301.0", text.replace(f'"total_num_scheduled_tokens": {step}',
                                                     f'"total_num_scheduled_tokens": {step}.0', 1)),
        ("2", "lone surrogate in a message", json.dumps(dict(obs, message="a \ud800 b", case_id="@CASE@"))),
        ("2", "lone surrogate in the version", json.dumps(dict(obs, engine={"name": "x", "version": "1\ud800"},
                                                               case_id="@CASE@"))),
        ("2", "5,000-digit number in a message", json.dumps(short)),
        ("2", "provenance nested 520 deep", text.replace('"mapping": {', '"mapping": {"d": ' + deep + ", ", 1)),
        ("2", "400-digit integer in the budget", text.replace('"lookahead_tokens": ', '"lookahead_tokens": ' + "9" * 400
                                                             + ', "x": ', 1)),
        ("2", "400-digit integer in the ledger", text.replace('"draft_kv": ', '"draft_kv": ' + "9" * 400 + ', "x": ', 1)),
        ("2", "400-digit integer in a trace step", text.replace(f'"total_num_scheduled_tokens": {step}',
                                                               '"total_num_scheduled_tokens": ' + "9" * 400, 1)),
    ]


def issue28_rows(tmp: Path):
    """(item, attack, thunk) rows; each thunk runs its attack and returns (result, seconds, peak MiB)."""
    forged_engine, reference_observation = _forge()
    obs = reference_observation("tiny-dflash-c4-k8")
    case = "tiny-dflash-c4-k8"
    absurd = json.loads(json.dumps(obs))
    absurd["budget"].update(max_num_scheduled_tokens=1, lookahead_tokens=8)
    absurd["memory"]["max_concurrency"] = 999
    rows = []

    def row(item, name):
        def wrap(fn):
            rows.append((item, name, fn))
            return fn
        return wrap

    @row("1", "under-test engine named vllm (conformance run)")
    def _():
        eng = forged_engine(tmp / "impostor", "vllm", absurd, version="0.33.0")
        rc, text, wall, peak = run28(["run", "--engines", f"reference,{eng}", "--cases", case, "--out",
                                      str(tmp / "r1")], tmp)
        return f"exit {rc}: {_said(text, 'is reserved for the shipped oracle vllm') or text[-50:]}", wall, peak

    @row("1", "copy of vllm.yaml by path (engines check)")
    def _():
        copy = tmp / "copy" / "vllm.yaml"
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(REPO / "conformance/engines/engine_files/vllm.yaml", copy)
        rc, text, wall, peak = run28(["engines", "check", str(copy)], tmp)
        return f"exit {rc}: {_said(text, 'is reserved for the shipped oracle vllm') or text[-50:]}", wall, peak

    def site(files: dict[str, Path]) -> str:
        root = tmp / f"site-{len(files)}-{time.monotonic_ns()}"
        (root / "impostor_pkg").mkdir(parents=True)
        (root / "impostor_pkg" / "__init__.py").write_text(
            "".join(f"def {n}():\n    return {str(p)!r}\n" for n, p in files.items()))
        dist = root / "impostor_pkg-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor-pkg\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text("[dflash_conformance.engines]\n"
                                               + "".join(f"{n} = impostor_pkg:{n}\n" for n in files))
        return os.pathsep.join([str(root), str(REPO)])

    @row("1", "entry point to a copy of vllm.yaml (default run)")
    def _():
        copy = tmp / "copy-ep" / "vllm.yaml"
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(REPO / "conformance/engines/engine_files/vllm.yaml", copy)
        rc, text, wall, peak = run28(["run", "--no-build", "--cases", case, "--out", str(tmp / "r1b")], tmp,
                                     PYTHONPATH=site({"fastvllm": copy}))
        return f"exit {rc}: {_said(text, 'is reserved for the shipped oracle vllm') or text[-50:]}", wall, peak

    @row("1", "two entry points of one name (default run)")
    def _():
        a, b = forged_engine(tmp / "ta", "twin", obs), forged_engine(tmp / "tb", "twin", obs)
        rc, text, wall, peak = run28(["run", "--no-build", "--cases", case, "--out", str(tmp / "r1c")], tmp,
                                     PYTHONPATH=site({"twin_a": a, "twin_b": b}))
        return f"exit {rc}: {_said(text, 'two engines are named') or text[-50:]}", wall, peak

    @row("1", "--snapshot-update with a port named vllm (pytest)")
    def _():
        goldens = tmp / "goldens"
        if not goldens.exists():
            shutil.copytree(REPO / "goldens", goldens)
        (golden,) = goldens.glob(f"budget/*/*[[]vllm-{case}[]].json")
        before = golden.read_bytes()
        eng = forged_engine(tmp / "impostor", "vllm", absurd, version="0.33.0")
        rc, text, wall, peak = run28(["suites/budget", "--engines", str(eng), "--cases", case, "--snapshot-update",
                                      "-p", "no:randomly", "-p", "no:cacheprovider", "-q"], tmp, module="pytest",
                                     DFLASH_CONFORMANCE_GOLDENS=str(goldens))
        kept = "vLLM golden unchanged" if golden.read_bytes() == before else "vLLM GOLDEN REWRITTEN"
        return f"exit {rc}: {kept}", wall, peak

    for item, name, text in _hostile_texts(obs):
        @row(item, name)
        def _(text=text, n=len(rows)):
            eng = forged_engine(tmp / f"h{n}", f"hostile{n}", text)
            out = tmp / f"r2-{n}"
            rc, said, wall, peak = run28(["run", "--engines", f"reference,{eng}", "--cases", case, "--out", str(out)], tmp)
            tb = " (traceback)" if "Traceback" in said else ""
            return f"exit {rc}{tb}: {_outcome_of(f'hostile{n}', out)}", wall, peak

    @row("2", "conformance report of a run holding all the above")
    def _():
        run_dir = tmp / "pre-rules"
        run_dir.mkdir(exist_ok=True)
        lines = [json.dumps(obs)]
        for i, (_, _, text) in enumerate(_hostile_texts(obs)):
            doc = json.loads(text.replace("@CASE@", case))
            doc["engine"]["name"] = f"old{i}"
            lines.append(json.dumps(doc))
        (run_dir / "observations.jsonl").write_text("\n".join(lines) + "\n")
        rc, text, wall, peak = run28(["report", str(run_dir)], tmp)
        ok = (run_dir / "index.html").is_file() and (run_dir / "junit.xml").is_file()
        return f"exit {rc}: {'index.html + junit.xml written' if ok else 'NO REPORT'}", wall, peak

    @row("2", "pytest --parity-report, lone surrogate in a message")
    def _():
        eng = forged_engine(tmp / "ps", "surrogate", _hostile_texts(obs)[1][2])
        report = tmp / "parity"
        rc, text, wall, peak = run28(["suites/budget", "--engines", str(eng), "--cases", case, "--parity-report",
                                      str(report), "-p", "no:randomly", "-p", "no:cacheprovider", "-q"], tmp,
                                     module="pytest")
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return f"exit {rc}: report {'written' if (report / 'index.html').is_file() else 'MISSING'}; {last[:30]}", wall, peak

    attack_case = tmp / "attack-case.yaml"   # a case with no vLLM golden, so no vLLM budget backs the engine's
    attack_case.write_text(CASE.replace("id: tiny-dflash-c4-k8", "id: attack-no-golden"))
    null_ledger = json.loads(json.dumps(obs))
    null_ledger["memory"]["ledger_bytes"].update(attention_kv=None, recurrent_state=None, draft_kv=None)
    null_budget = json.loads(json.dumps(obs))
    null_budget["budget"] = {k: None for k in obs["budget"]}
    null_budget["trace"]["steps"][0]["total_num_scheduled_tokens"] = 100_000
    for name, doc, checks in (("null ledger", null_ledger, ("memory.inside_bound", "memory.ledger_holds_seats")),
                              ("null budget, a 100,000-token step, no vLLM golden", null_budget,
                               ("trace.steps_within_budget",))):
        @row("3", name)
        def _(doc=doc, checks=checks, n=len(rows)):
            eng = forged_engine(tmp / f"n{n}", f"nulls{n}", doc)
            out = tmp / f"r3-{n}"
            rc, _, wall, peak = run28(["run", "--engines", str(eng), "--cases", str(attack_case), "--out", str(out)], tmp)
            return f"exit {rc}: {_outcome_of(f'nulls{n}', out, checks)}", wall, peak

    @row("5", "run --engines vllm,sglang --no-build, cold cache")
    def _():
        cold = tmp / "cold"
        cold.mkdir(exist_ok=True)
        rc, text, wall, peak = run28(["run", "--engines", "vllm,sglang", "--no-build", "--cases", case, "--out",
                                      str(tmp / "r5")], tmp, DFLASH_CONFORMANCE_CACHE=str(cold))
        return f"exit {rc}: {_said(text, 'nothing was planned', 'checks failed: 0 of 0')}", wall, peak

    @row("11", "escape sequences in an engine's message")
    def _():
        bad = dict(obs, status="error", message="\x1b[2J\x1b[HALL CHECKS PASSED \x1b]8;;http://x\x07y\x1b]8;;\x07")
        eng = forged_engine(tmp / "esc", "escapes", bad)
        rc, text, wall, peak = run28(["run", "--engines", str(eng), "--cases", case, "--out", str(tmp / "r11")], tmp)
        return f"exit {rc}: {text.count(chr(27))} ESC bytes reached the console", wall, peak

    @row("11", "latest: an older run finishing after a newer one")
    def _():
        slow, fast = forged_engine(tmp / "slow", "slow", obs, delay_s=8), forged_engine(tmp / "fast", "fast", obs)
        out = tmp / "r11b"
        argv = lambda e: [sys.executable, "-m", "conformance", "run", "--engines", str(e), "--cases", case,  # noqa: E731
                          "--out", str(out)]
        env = dict(os.environ, PYTHONPATH=str(REPO), DFLASH_CONFORMANCE_CACHE=str(tmp / "cache"))
        t0 = time.monotonic()
        first = subprocess.Popen(argv(slow), cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.5)
        subprocess.run(argv(fast), cwd=str(REPO), env=env, capture_output=True, timeout=120)
        first.wait(120)
        run_dir = _run_dir(out)
        name = json.loads((run_dir / "observations.jsonl").read_text().splitlines()[0])["engine"]["name"]
        return f"latest -> the {'newer' if name == 'fast' else 'OLDER'} run ({name})", time.monotonic() - t0, float("nan")

    size = len(json.dumps(obs))
    for name, limit in (("full disk writing the report", 2 * size + 4096),
                        ("full disk while planning", size + size // 2)):
        @row("11", name + " (RLIMIT_FSIZE)")
        def _(limit=limit, n=len(rows)):
            eng = forged_engine(tmp / f"d{n}", "port", obs)
            out = tmp / f"r11-{n}"
            rc, text, wall, peak = run28(["run", "--engines", str(eng), "--cases", case, "tiny-dflash-c4-k8-h100",
                                          "--out", str(out)], tmp, limit_bytes=limit)
            (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
            kept = sum(1 for l in (run_dir / "observations.jsonl").read_text().split("\n")[:-1] if l)
            tb = " (traceback)" if "Traceback" in text else ""
            return f"exit {rc}{tb}: {kept} observation(s) kept, {_said(text, 'could not write') or 'no message'}", wall, peak
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", action="store_true", help="only the CLI attacks")
    ap.add_argument("--server", action="store_true", help="only the server attacks")
    ap.add_argument("--runtime", action="store_true",
                    help="only issue 28's attacks on processes, output, the live path, server clients, the cache")
    ap.add_argument("--issue28", action="store_true", help="only the attacks of issue 28 items 1, 2, 3, 5 and 11")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="redteam-"))
    print(f"{'item':<5}{'attack':<52}{'result':<58}{'s':>7}{'peak MiB':>10}  serves after")
    try:
        if args.runtime:
            runtime_attacks(tmp)
            return 0
        if args.issue28 or not (args.cli or args.server):
            for item, name, attack in issue28_rows(tmp):
                t0 = time.monotonic()
                try:
                    result, wall, peak = attack()
                except Exception as exc:  # noqa: BLE001 -- what the attack left could not be read: say so
                    result, wall, peak = f"outcome unreadable ({type(exc).__name__})", time.monotonic() - t0, float("nan")
                print(f"{item:<5}{name:<52}{result[:57]:<58}{wall:>7.1f}{peak:>10.0f}  -", flush=True)
        if args.issue28:
            return 0
        if not args.server:
            for item, name, argv in cli_attacks(tmp):
                result, wall, peak = run_cli(argv, tmp)
                print(f"{item:<5}{name:<52}{result:<58}{wall:>7.1f}{peak:>10.0f}  -", flush=True)
        if not args.cli:
            server = Server(tmp / "server.log")
            for item, name, attack in server_attacks():
                t0 = time.monotonic()
                result = (attack(server.port).splitlines() or ["(empty)"])[0]
                wall = time.monotonic() - t0
                peak = server.peak_mib()
                time.sleep(0.3)
                serves = server.alive() and normal_ok(server.port)
                state = "yes" if serves else "NO (server " + ("exited" if not server.alive() else "unresponsive") + ")"
                print(f"{item:<5}{name:<52}{result[:57]:<58}{wall:>7.1f}{peak:>10.0f}  {state}", flush=True)
                if not serves:   # the next attack gets a fresh server
                    server.stop()
                    server = Server(tmp / "server.log")
            server.stop()
        if not (args.cli or args.server):
            runtime_attacks(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


# --- issue 28: engine processes, their output, the live path, server clients, the cache ----------------
# (benchmarks/redteam_runtime.py holds the attacks; the rows print in the table above's format)

def runtime_attacks(tmp: Path) -> None:
    from benchmarks import redteam_runtime as rt

    for item, name, result, wall, peak, after in rt.rows(tmp / "runtime"):
        print(f"{item:<5}{name:<52}{result[:57]:<58}{wall:>7.1f}{peak:>10.0f}  {after}", flush=True)
    server = Server(tmp / "server28.log")
    try:
        for item, name, attack in rt.server_attacks():
            t0 = time.monotonic()
            result = (attack(server.port).splitlines() or ["(empty)"])[0]
            wall = time.monotonic() - t0
            serves = server.alive() and normal_ok(server.port)
            state = "yes" if serves else "NO (server " + ("exited" if not server.alive() else "unresponsive") + ")"
            print(f"{item:<5}{name:<52}{result[:57]:<58}{wall:>7.1f}{server.peak_mib():>10.0f}  {state}", flush=True)
            if not serves:
                server.stop()
                server = Server(tmp / "server28.log")
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
