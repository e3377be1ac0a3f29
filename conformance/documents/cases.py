"""Cases: one DFlash configuration + workload per YAML file, in engine-neutral units.

Contract: `load_case(path)` returns a `Case` whose `spec` is schema-valid with defaults filled
and model directories resolved, or raises `CaseError` with one line per problem, each naming
the file and the JSON path. It never raises anything else for a bad file.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import paths
from conformance.documents.json_file import read_json
from conformance.documents.schemas import error_lines
from conformance.documents.yaml_file import YamlFileError, read_yaml
from conformance.errors import CaseError, UnknownCaseError

# Methods whose drafter is a separate model directory.
DRAFT_MODEL_METHODS = frozenset({"dflash", "eagle3", "p-eagle", "dspark", "draft_model", "pard"})

_DEFAULTS: dict[str, dict[str, Any]] = {
    "scheduler": {"chunked_prefill": True},
    "cache": {"kv_cache_dtype": "bfloat16"},
}


@dataclass(frozen=True)
class Case:
    """A validated case. `spec` is the JSON document adapters receive (see `to_json`)."""

    id: str
    path: Path
    spec: dict[str, Any] = field(repr=False)
    target_dir: Path = field(repr=False)
    draft_dir: Path | None = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        """The case as adapters get it: the spec plus `resolved` absolute model dirs and the source file."""
        doc = copy.deepcopy(self.spec)
        doc["resolved"] = {
            "target_dir": str(self.target_dir),
            "draft_dir": str(self.draft_dir) if self.draft_dir else None,
            "source": str(self.path),
        }
        return doc

    def digest(self) -> str:
        """Stable hash of the spec (not of where it lives on disk)."""
        return hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()[:16]


def resolve_model_dir(ref: str, base: Path) -> Path:
    """A shipped shape name (`conformance/models/<name>`), or a path relative to the case file."""
    shipped = paths.MODELS_DIR / ref
    if "/" not in ref and shipped.is_dir():
        return shipped
    p = Path(ref).expanduser()
    return (p if p.is_absolute() else (base / p)).resolve()


def _read_yaml(path: Path) -> Any:
    try:
        return read_yaml(path, "case file")
    except YamlFileError as exc:
        raise CaseError(exc.problems) from None


def _check_model_dir(path: Path, json_path: str, source: Path) -> list[str]:
    """Problems of a model dir: not a dir, its config.json unreadable (`json_file.read_json`: FIFOs,
    devices, huge or deep files refused before or while reading) or against the shape schema
    (`schemas/shape.schema.json`), each line naming the case, the case's key, the file and its key."""
    cfg = path / "config.json"
    if path.exists() and not path.is_dir():
        return [f"{source}: {json_path}: model dir {path} is not a directory (a shape under conformance/models/ or a dir with config.json)"]
    if not path.is_dir():
        return [f"{source}: {json_path}: model dir {path} does not exist (a shape under conformance/models/ or a path)"]
    try:
        data = read_json(cfg, "model config (config.json)")
    except YamlFileError as exc:
        return [f"{source}: {json_path}: {line}" for line in exc.problems]
    if not isinstance(data, dict):
        return [f"{source}: {json_path}: {cfg} is not a JSON object"]
    return [f"{source}: {json_path}: {line}" for line in error_lines("shape", data, str(cfg))]


def parse_case(document: Any, source: Path) -> Case:
    """Validate a parsed document as a case read from `source` (used for files and for fuzzing)."""
    if not isinstance(document, dict):
        kind = "empty" if document is None else type(document).__name__
        raise CaseError([f"{source}: (root): a case must be a YAML mapping, got {kind}"])
    problems = error_lines("case", document, str(source)) + _renamed_keys(document, source)
    if problems:
        raise CaseError(problems)
    spec = copy.deepcopy(document)
    for section, defaults in _DEFAULTS.items():
        for key, value in defaults.items():
            spec[section].setdefault(key, value)
    method = spec["speculative"]["method"]
    draft = spec.get("draft")
    spec.setdefault("draft", None)
    if method in DRAFT_MODEL_METHODS and not draft:
        problems.append(f"{source}: draft: method {method!r} needs a draft model dir")
    base = source.parent
    target_dir = _resolve_checked(spec["target"], base, "target", source, problems)
    draft_dir = _resolve_checked(draft, base, "draft", source, problems) if draft else None
    if problems:
        raise CaseError(problems)
    return Case(id=spec["id"], path=source, spec=spec, target_dir=target_dir, draft_dir=draft_dir)


def _renamed_keys(document: dict[str, Any], source: Path) -> list[str]:
    """A line per intended difference still written with `engine:` (the oracle, before `engines`
    named the engines under test an entry documents)."""
    entries = document.get("intended_differences")
    if not isinstance(entries, list):
        return []
    return [f"{source}: intended_differences[{i}].engine: renamed to `oracle` (the oracle compared with); "
            f"name the engines under test the difference documents in `engines` ([\"*\"]: every one)"
            for i, d in enumerate(entries) if isinstance(d, dict) and "engine" in d]


def _resolve_checked(ref: str, base: Path, json_path: str, source: Path, problems: list[str]) -> Path | None:
    try:
        path = resolve_model_dir(ref, base)
    except (ValueError, OSError) as exc:  # e.g. an embedded NUL byte
        problems.append(f"{source}: {json_path}: {ref!r} is not a usable path: {exc}")
        return None
    problems += _check_model_dir(path, json_path, source)
    return path


def load_case(path: Path | str) -> Case:
    path = Path(path)
    return parse_case(_read_yaml(path), path)


def case_files(directory: Path | None = None) -> list[Path]:
    directory = directory or paths.cases_dir()
    return sorted(directory.glob("*.yaml"))


def load_all(directory: Path | None = None) -> list[Case]:
    """Every case under `directory`; raises one `CaseError` listing every bad file's problems,
    or on two files sharing an id."""
    cases: list[Case] = []
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for f in case_files(directory):
        try:
            case = load_case(f)
        except CaseError as exc:
            problems += exc.problems
            continue
        if case.id in seen:
            problems.append(f"{f}: id: {case.id!r} is already used by {seen[case.id]}")
            continue
        seen[case.id] = f
        cases.append(case)
    if problems:
        raise CaseError(problems)
    return cases


def find_case(ref: str, directory: Path | None = None) -> Case:
    """`ref` is a shipped case id (suites/cases, then the live cases of suites/live/cases) or a path to a
    case file."""
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return load_case(p)
    if directory is None:
        live = paths.live_cases_dir() / f"{ref}.yaml"
        if live.is_file() and not any(f.stem == ref for f in case_files(None)):
            return load_case(live)
    for f in case_files(directory):
        # Cheap id match first: the file stem is the id by convention, else parse.
        if f.stem == ref:
            case = load_case(f)
            if case.id == ref:
                return case
    for case in load_all(directory):
        if case.id == ref:
            return case
    known = ", ".join(c.stem for c in case_files(directory))
    raise UnknownCaseError(f"unknown case {ref!r}: not a file, and no case under {directory or paths.cases_dir()} has that id (known: {known})")
