"""`vllm bench serve`, run many times in one interpreter of the vLLM venv (run with that venv's python).

    ~/.cache/dflash-conformance/oracles/vllm-0.33.0/bin/python benchmarks/vllm_bench_resident.py

Reads one JSON list of `vllm bench serve` arguments per stdin line and runs the CLI's own entry
function (`vllm.entrypoints.cli.main.main`, with `sys.argv = ["vllm", "bench", "serve", *args]`:
the same parser, the same code path as the command), then answers one JSON line on stdout:
{"ok": true} or {"ok": false, "error": ...}. vLLM's own printing goes to stderr. The first line
on stdout, {"ready": true}, comes once vLLM is imported.

A line {"samples": [args]} answers {"ok": true, "prompts": [...]}: the prompts the bench draws
for those arguments (its own parser, tokenizer loader and `get_samples`, as `main_async` calls
them), so another client can send the same ones. Dataset draws that hash (timed_trace's prompt
expansion uses `hash()`) are stable within this interpreter, so they match the runs it makes.

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


def samples(args: list[str]) -> list:
    from vllm.benchmarks.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    ns = parser.parse_args(args)
    if ns.dataset_name == "timed_trace" and ns.self_timed is None:
        ns.self_timed = True
    tokenizer = get_tokenizer(ns.tokenizer or ns.model, tokenizer_mode=ns.tokenizer_mode,
                              trust_remote_code=ns.trust_remote_code)
    return [r.prompt for r in get_samples(ns, tokenizer)]


def serve() -> int:
    from vllm.entrypoints.cli.main import main

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        ask = json.loads(line)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                if isinstance(ask, dict):
                    answer = {"ok": True, "prompts": samples(ask["samples"])}
                else:
                    sys.argv = ["vllm", "bench", "serve", *ask]
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
