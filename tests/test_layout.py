"""The README's layout table holds for the tree: every folder of `conformance/` is a row of it, every
row names a folder that exists, and each part imports only the parts listed above it (imports inside
functions count); nothing imports a face (`cli/`, `pytest_plugin/`) but the face itself, and the
checks import neither the harness nor the run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conformance import paths

PACKAGE = paths.PACKAGE_DIR
TOP = {"paths", "errors", "__init__", "__main__"}   # the modules that may stay at the top (any part imports them)
FACES = ("cli", "pytest_plugin")


def _table_parts() -> list[str]:
    text = (paths.REPO_ROOT / "README.md").read_text()
    layout = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `conformance/([a-z_]+)/` \|", layout, re.M)


def _part_of(module: str) -> str | None:
    """The part a module `conformance.<part>...` belongs to, None for the top modules."""
    bits = module.split(".")
    if bits[0] != "conformance" or len(bits) < 2 or bits[1] in TOP:
        return None
    return bits[1]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)   # `from conformance import paths`
    return {m for m in found if m.startswith("conformance.")}


def test_every_folder_of_the_package_is_a_row_and_every_row_a_folder():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert sorted(_table_parts()) == folders
    loose = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert set(loose) <= TOP, f"modules loose at the top of conformance/: {sorted(set(loose) - TOP)}"


def test_each_part_imports_only_the_parts_above_it():
    order = _table_parts()
    rank = {part: i for i, part in enumerate(order)}
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        here = rel.parts[0] if len(rel.parts) > 1 else None
        if here is None:
            continue
        for module in sorted(_imports(path)):
            there = _part_of(module)
            if there is None or there == here or there not in rank:
                continue
            if rank[there] > rank[here]:
                wrong.append(f"conformance/{rel} imports {module}: {there}/ is listed below {here}/")
            if there in FACES:
                wrong.append(f"conformance/{rel} imports the face {module}")
    assert not wrong, "\n".join(wrong)
    assert rank["checks"] < rank["harness"] and rank["checks"] < rank["run"]
