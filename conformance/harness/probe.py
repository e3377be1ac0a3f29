"""The adapter entry point run inside an engine's own environment.

    python -m conformance.harness.probe --adapter MODULE --cases CASES.json --out OBS.jsonl

Reads a JSON list of cases (`Case.to_json()`), calls the adapter's `plan(case)` for each,
validates each observation against the project's schema in this process, and appends one JSON
line per case to OBS.jsonl, flushed as it is written (the harness reads it while we run).
Anything the adapter raises becomes an `error` observation with the traceback's tail; this
process then goes on with the next case. Engine logs go to stdout/stderr, never to OBS.jsonl.
Exit status: 0 when every case got a line, 3 when the adapter could not be imported or set up.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from typing import Any


def _error_obs(adapter: Any, case: dict, message: str) -> dict:
    from conformance.documents import observation

    engine = getattr(adapter, "ENGINE", "unknown")
    try:
        version = adapter.engine_version()
    except Exception:  # the version itself may be what failed
        version = "unknown"
    return observation.failed(case.get("id", "?"), engine, version, "plan", case.get("device", "?"), "error", message)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="conformance.harness.probe")
    ap.add_argument("--adapter", required=True, help="in-env adapter module (see conformance.engines.engine_file)")
    ap.add_argument("--cases", required=True, help="JSON file: a list of cases")
    ap.add_argument("--out", required=True, help="JSONL file to append observations to")
    args = ap.parse_args(argv)

    with open(args.cases) as fh:
        cases = json.load(fh)
    try:
        adapter = importlib.import_module(args.adapter)
        setup = getattr(adapter, "plan_setup", None)
        if setup is not None:
            setup()
    except Exception:
        sys.stderr.write(f"probe: adapter {args.adapter} failed to load:\n{traceback.format_exc()}")
        return 3

    from conformance.documents import observation

    with open(args.out, "a") as out:
        for case in cases:
            t0 = time.perf_counter()
            try:
                obs = adapter.plan(case)
                observation.validate(obs, f"{args.adapter}.plan({case.get('id')})")
            except observation.ObservationError as exc:
                obs = _error_obs(adapter, case, "adapter produced a schema-invalid observation:\n" + str(exc))
            except Exception as exc:
                tb = traceback.format_exc().splitlines()
                obs = _error_obs(adapter, case, f"{type(exc).__name__}: {exc}\n" + "\n".join(tb[-12:]))
            obs.setdefault("timing", {})["plan_wall_s"] = round(time.perf_counter() - t0, 3)
            try:
                line = json.dumps(obs, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:  # schema-valid but not JSON (a set, bytes, NaN)
                bad = _error_obs(adapter, case, f"adapter produced an observation that is not JSON: {type(exc).__name__}: {exc}")
                line = json.dumps(dict(bad, timing=obs["timing"]), sort_keys=True)
            out.write(line + "\n")
            out.flush()
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
