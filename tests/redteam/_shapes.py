"""Case files and model directories for the attacks on what the framework reads from disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conformance import paths

CASE = (paths.cases_dir() / "tiny-dflash-c4-k8.yaml").read_text()


def model_dir(tmp_path: Path, shape: str, name: str, **changes: Any) -> Path:
    """A copy of a shipped shape with top-level keys changed (None removes a key)."""
    out = tmp_path / name
    shutil.copytree(paths.MODELS_DIR / shape, out)
    cfg = json.loads((out / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def case_file(tmp_path: Path, name: str = "attack.yaml", target: Path | str = "tiny-hybrid",
              draft: Path | str = "tiny-dflash", replace: dict[str, str] | None = None) -> Path:
    text = CASE.replace("id: tiny-dflash-c4-k8", "id: attack")
    text = text.replace("target: tiny-hybrid", f"target: {target}").replace("draft: tiny-dflash", f"draft: {draft}")
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path
