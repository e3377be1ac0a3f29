"""An engine that reports whatever an attack wants: a `plan.command` engine file whose planner prints a
given JSON text, `@CASE@` replaced by the id of the case it was asked to plan.

Contract: `reference_observation(case_id)` is the reference engine's real observation of a shipped
case (planned through the real runner; the attacks start from figures an engine does report);
`forged_engine(directory, name, text, role)` writes `<name>.yaml` (and the text it prints) into
`directory` and returns the engine file's path (its planner waits `delay_s` before answering).
`text` is JSON text (so an attack can write what
`json.dumps` would not: `301.0`, a 5,000-digit number, `\\ud800`), or a document to dump.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PRINTER = """import json, sys, time
case = json.load(sys.stdin)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
sys.stdout.write(open(sys.argv[1], encoding="utf-8").read().replace("@CASE@", case["id"]))
"""


def reference_observation(case_id: str = "tiny-dflash-c4-k8") -> dict[str, Any]:
    from conformance.documents.cases import find_case
    from conformance.harness.plan_runner import plan_cases

    (obs,) = plan_cases("reference", [find_case(case_id)])
    assert obs["status"] == "ok", obs["message"]
    obs.pop("timing", None)
    return obs


def forged_engine(directory: Path, name: str, text: str | dict[str, Any], role: str = "under-test",
                  version: str = "0.1.0", delay_s: float = 0.0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if not isinstance(text, str):
        doc = dict(text, case_id="@CASE@")
        text = json.dumps(doc)
    (directory / "forge_print.py").write_text(PRINTER)
    (directory / f"{name}.json").write_text(text, encoding="utf-8")
    engine = directory / f"{name}.yaml"
    engine.write_text(f"name: {name}\nrole: {role}\nversion: {json.dumps(version)}\nplan:\n  command:\n"
                      f"    argv: [{json.dumps(sys.executable)}, \"{{engine_dir}}/forge_print.py\", "
                      f"\"{{engine_dir}}/{name}.json\", \"{delay_s}\"]\n    timeout_s: 60\n")
    return engine
