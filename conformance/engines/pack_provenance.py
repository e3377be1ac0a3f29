"""What an oracle pack (`conformance envs pack`) put on a host, for a live observation's provenance.

Contract: `pack_provenance(pack_dir)` reads `<pack_dir>/oracle-pack.json` and returns {engine, version,
python, platform, packages: {name: version}, left_out: [...], deviations: [...]}; a missing or malformed
file raises `ConformanceError` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

from conformance.errors import ConformanceError

PACK_FILE = "oracle-pack.json"
_REQUIRED = ("engine", "version", "python", "platform", "packages", "left_out", "deviations")


def read_pack(pack_dir: Path | str) -> dict:
    """The whole `oracle-pack.json` of a pack directory, checked for the keys provenance needs."""
    path = Path(pack_dir) / PACK_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConformanceError(f"{path}: no such file (is {pack_dir} a pack made by `conformance envs pack`?)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConformanceError(f"{path}: unreadable: {exc}") from None
    missing = [k for k in _REQUIRED if k not in doc] if isinstance(doc, dict) else list(_REQUIRED)
    if missing:
        raise ConformanceError(f"{path}: missing {', '.join(missing)}")
    bad = [p for p in doc["packages"] if not isinstance(p, dict) or not {"name", "version"} <= set(p)]
    if bad:
        raise ConformanceError(f"{path}: packages: an entry without name and version: {bad[0]!r}")
    return doc


def pack_provenance(pack_dir: Path | str) -> dict:
    doc = read_pack(pack_dir)
    return {
        "engine": doc["engine"],
        "version": doc["version"],
        "python": doc["python"],
        "platform": doc["platform"],
        "packages": {p["name"]: p["version"] for p in doc["packages"]},
        "left_out": list(doc["left_out"]),
        "deviations": list(doc["deviations"]),
    }
