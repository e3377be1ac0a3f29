"""The transformers peer of one live case, run beside the engines served in the same session.

Contract: `run_peer(case, served, out_dir)` measures `transformers_peer.hf_ladder` on the case's target
(its config, seeded random weights) on the case's live device with the case's workload and
`live.transformers_peer` settings, stamps the same hardware line as `harness.live_measure` does, and writes into
`out_dir`: `<case>.json` (the peer's run observation, schema-valid) and `<case>-ratios.json` ({engine:
transformers_peer.ratios(engine's observation, the peer's)} for every engine in `served`). Returns
(peer observation, ratios). The peer never judges an engine: it is a baseline shown beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.documents.json_file import vocab_size
from conformance.documents.live_spec import live_spec


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def run_peer(case: Case, served: Mapping[str, dict[str, Any]], out_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from conformance.harness.hardware import describe_with_versions
    from conformance.harness.transformers_peer import hf_ladder, peer_settings, ratios
    from conformance.loadgen import Workload

    spec, settings = live_spec(case.spec), peer_settings(case.spec)
    if spec is None:
        raise ValueError(f"case {case.id} has no `live:` section: it has no peer")
    w = Workload.from_case(case.spec, vocab_size(case.target_dir))
    workload = Workload(w.num_requests, w.prompt_tokens, settings.output_tokens, w.seed, w.vocab_size)
    peer = hf_ladder(case.id, case.spec["device"], str(case.target_dir), workload, settings.concurrencies,
                     spec.device, settings.max_total_s,
                     on_rung=lambda r: print(f"transformers c={r['concurrency']} {r['status']} "
                                             f"{r.get('output_tok_per_s')} tok/s", flush=True))
    peer["device"]["hardware"] = describe_with_versions(spec.device)
    observation.validate(peer, f"transformers peer on {case.id}")
    doc = {name: ratios(obs, peer) for name, obs in sorted(served.items())}
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(out_dir / f"{case.id}.json", peer)
    _write(out_dir / f"{case.id}-ratios.json", doc)
    return peer, doc
