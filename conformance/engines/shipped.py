"""The shipped engine files, and the names of the shipped oracles, which no other file may take.

An oracle is the expectation: every check that compares with vLLM or SGLang reads the document (its
goldens, or its observation of the run) of the engine of that name, and goldens are stored under
it. An engine file that calls itself `vllm` but is not the shipped vLLM would be judged against
itself and, under `--snapshot-update`, would rewrite vLLM's goldens. So the shipped oracles' names
are reserved.

Contract: `SHIPPED_DIR` holds the shipped engine files, `<name>.yaml` each.
`reserved_oracle_names()` is the name of every shipped engine file of role oracle (data: the check
table's oracles, each check's `against`, are among them, which its tests hold). `reserved_name_problem(name, role, path)`
is None unless `name` is reserved and the file is not that shipped oracle's own file of role oracle
(a copy found by path or entry point, or a file of role under-test); then a message naming the file.
Nothing here caches: each call reads the shipped files it needs.
"""

from __future__ import annotations

from pathlib import Path

from conformance import paths
from conformance.documents.yaml_file import YamlFileError, read_yaml
from conformance.engines.roles import ORACLE

SHIPPED_DIR = paths.PACKAGE_DIR / "engines" / "engine_files"


def _declared_role(path: Path) -> tuple[str | None, str | None]:
    """(name, role) a shipped file declares, (None, None) where it cannot be read."""
    try:
        doc = read_yaml(path, "engine file")
    except YamlFileError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    return doc.get("name"), doc.get("role")


def reserved_oracle_names() -> frozenset[str]:
    names = set()
    for f in SHIPPED_DIR.glob("*.yaml"):
        name, role = _declared_role(f)
        if role == ORACLE and name == f.stem:
            names.add(f.stem)
    return frozenset(names)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def reserved_name_problem(name: str, role: str, path: Path) -> str | None:
    if name not in reserved_oracle_names():
        return None
    shipped = SHIPPED_DIR / f"{name}.yaml"
    if _same_file(Path(path), shipped) and role == ORACLE:
        return None
    what = (f"is of role {role}" if _same_file(Path(path), shipped) else
            f"is not the shipped oracle's file ({shipped})" + (f" and is of role {role}" if role != ORACLE else ""))
    return (f"{path}: name: {name!r} is reserved for the shipped oracle {name} and this file {what}; the checks "
            f"compare engines with {name} by this name and its goldens are stored under it, so an engine of "
            f"its own must have a name of its own (e.g. 'my-{name}')")
