"""`vllm bench serve`, run many times in one interpreter of the vLLM venv (run with that venv's python).

    ~/.cache/dflash-conformance/oracles/vllm-0.33.0/bin/python benchmarks/vllm_bench_resident.py

Reads one JSON list of `vllm bench serve` arguments per stdin line and runs the CLI's own entry
function (`vllm.entrypoints.cli.main.main`, with `sys.argv = ["vllm", "bench", "serve", *args]`:
the same parser, the same code path as the command), then answers one JSON line on stdout:
{"ok": true} or {"ok": false, "error": ...}. vLLM's own printing goes to stderr. The first line
on stdout, {"ready": true}, comes once vLLM is imported.

Why: importing vLLM costs 10-20 CPU seconds here. Paid before every run on a 2-core host, it ran
right before each measurement and pushed the host's other load onto the server's core, and it
made side-by-side rounds minutes apart; paid once, rounds are seconds apart. Imports nothing of
this project (it runs in vLLM's venv).
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback


def serve() -> int:
    from vllm.entrypoints.cli.main import main

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.argv = ["vllm", "bench", "serve", *json.loads(line)]
        try:
            with contextlib.redirect_stdout(sys.stderr):
                main()
            answer = {"ok": True}
        except SystemExit as exc:   # argparse, or the CLI exiting
            answer = {"ok": exc.code in (0, None), "error": f"exit {exc.code}"}
        except Exception:
            answer = {"ok": False, "error": traceback.format_exc()[-3000:]}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
