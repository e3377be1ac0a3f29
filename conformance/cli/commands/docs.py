"""`conformance docs [--check]`: write the reference docs generated from the code (conformance.cli.docs_gen):
docs/placeholders.md and docs/observation.md in the framework's checkout. With --check nothing is
written: exit 1 naming each committed doc that differs from what the code generates, 0 when all match."""

from __future__ import annotations

import argparse

from conformance import paths

NAME = "docs"
HELP = "write docs/placeholders.md and docs/observation.md from the code (--check: exit 1 if they are stale)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a committed doc is stale")


def run(args: argparse.Namespace) -> int:
    from conformance.cli.docs_gen import documents

    stale = 0
    for rel, text in documents().items():
        path = paths.REPO_ROOT / rel
        current = path.read_text() if path.is_file() else None
        if current == text:
            print(f"{rel}: up to date")
            continue
        if args.check:
            print(f"{rel}: stale ({'missing' if current is None else 'differs from the code'}): "
                  f"run `conformance docs` and commit it")
            stale += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"{rel}: written")
    return 1 if stale else 0
