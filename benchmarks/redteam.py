"""Replay the attacks of issue 17 (items 1-7) against a fresh reference server and the CLI; print a table.

Not a CI gate: it reports what it sees. Per attack: the exit code (CLI) or HTTP status (server),
seconds, peak memory (the CLI child's max RSS from wait4; the server's VmHWM), and for server
attacks whether the server still answers a normal completion afterwards. A server that died is
restarted (fresh) before the next attack, so one fatal row does not hide the others.

    .venv/bin/python benchmarks/redteam.py            # everything (about 2-4 minutes on a CPU)
    .venv/bin/python benchmarks/redteam.py --cli      # only the CLI attacks
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
    man.write_text((REPO / "conformance/manifests/reference.yaml").read_text() + "\njunk:\n" + bomb())
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", action="store_true", help="only the CLI attacks")
    ap.add_argument("--server", action="store_true", help="only the server attacks")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="redteam-"))
    print(f"{'item':<5}{'attack':<52}{'result':<58}{'s':>7}{'peak MiB':>10}  serves after")
    try:
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
