"""Observations of many cases on many engines, computed once per session and shared.

Contract: `ObservationStore(root).get(engine, cases)` returns {case_id: observation} for every
case, planning only what `root` does not hold yet for that (engine, case digest). Parallel
workers (pytest-xdist) share one store directory: a file lock per engine makes the first
worker plan every case in one adapter process while the others wait and then read; it plans through
the run session (`run.session.plan`: the engine's environment installed, then its cases planned).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from filelock import FileLock

from conformance.documents.cases import Case
from conformance.engines.engine_file import EngineFile
from conformance.run.session import plan


class ObservationStore:
    def __init__(self, root: Path, progress: Callable[[str], None] = lambda m: None,
                 on_observation: Callable[[dict[str, Any]], None] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.on_observation = on_observation or (lambda o: None)

    def _file(self, engine: str) -> Path:
        return self.root / f"{engine}.jsonl"

    def _read(self, engine: str) -> dict[tuple[str, str], dict[str, Any]]:
        f = self._file(engine)
        out: dict[tuple[str, str], dict[str, Any]] = {}
        if f.exists():
            for line in f.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    out[(rec["case_id"], rec["digest"])] = rec["observation"]
        return out

    def get(self, spec: EngineFile, cases: Sequence[Case]) -> dict[str, dict[str, Any]]:
        engine = spec.name
        with FileLock(str(self.root / f"{engine}.lock")):
            have = self._read(engine)
            missing = [c for c in cases if (c.id, c.digest()) not in have]
            if missing:
                digests = {c.id: c.digest() for c in missing}
                self.progress(f"{engine}: planning {len(missing)} case(s)")
                with self._file(engine).open("a") as fh:
                    def keep(obs: dict[str, Any]) -> None:
                        rec = {"case_id": obs["case_id"], "digest": digests[obs["case_id"]], "observation": obs}
                        fh.write(json.dumps(rec, sort_keys=True) + "\n")
                        fh.flush()
                        have[(obs["case_id"], rec["digest"])] = obs
                        self.on_observation(obs)

                    plan(spec, missing, self.progress, on_observation=keep, log_dir=self.root / "logs" / engine)
        return {c.id: have[(c.id, c.digest())] for c in cases}
