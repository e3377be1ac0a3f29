"""The live checks on one GPU: the engine's whole device footprint (NVML) against the bound, and the
concurrency served at the top rung, for the reference engine and the stand-in port (sound, and with a
draft KV store beside its pool), all on examples/defective-port/live-case.yaml. Not a CI gate.

    python benchmarks/live_checks.py --out DIR [--concurrency 1,32]

Writes one run observation per engine (DIR/live-<engine>.json) and prints each live verdict with
its figures. Exit status 0 when every verdict is what it should be: the reference and the sound port
pass both checks, the defective port fails the device-memory check (1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.checks.check_table import judge_live  # noqa: E402
from conformance.documents.cases import load_case  # noqa: E402
from conformance.engines.manifest import manifest_from_engine_file  # noqa: E402
from conformance.engines.registry import resolve_engine  # noqa: E402
from conformance.harness.live import run_live  # noqa: E402
from conformance.loadgen import LoadgenSettings  # noqa: E402

ENGINES = (("reference", "pass"), ("examples/defective-port/live-engine.yaml", "pass"),
           ("examples/defective-port/live-engine-draft-outside.yaml", "fail"))
CASE = ROOT / "examples" / "defective-port" / "live-case.yaml"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--concurrency", default="1,32")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    case = load_case(CASE)
    settings = LoadgenSettings(concurrencies=tuple(int(c) for c in args.concurrency.split(",")), num_warmup_waves=1,
                               min_requests_per_slot=1, request_timeout_s=300.0)
    ok = True
    for ref, want in ENGINES:
        engine = resolve_engine(str(ROOT / ref) if ref.endswith(".yaml") else ref)
        manifest = manifest_from_engine_file(engine.live, engine.path, engine.name)
        obs = run_live(manifest, case.to_json(), settings, {"device": "cuda"}, log_dir=args.out,
                       on_rung=lambda r: print(f"  {engine.name} c={r['concurrency']} {r['status']} "
                                               f"{r.get('output_tok_per_s')} tok/s", flush=True))
        obs["engine"]["name"] = engine.name
        (args.out / f"live-{engine.name}.json").write_text(json.dumps(obs, indent=2, sort_keys=True) + "\n")
        print(f"{engine.name}: {obs['status']} {obs.get('message') or ''}", flush=True)
        for v in judge_live(obs, case.spec):
            print(f"  {v.check}: {v.outcome}: {v.message}")
            for d in v.details:
                print(f"    {d}")
            expected = want if v.check == "live.device_memory_within_bound" else "pass"
            if v.outcome != expected:
                ok = False
                print(f"  UNEXPECTED: {v.check} should be {expected}")
    print("live checks: as expected" if ok else "live checks: NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
