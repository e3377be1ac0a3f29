"""`conformance envs list|install`: the oracles' pinned, cached virtualenvs."""

from __future__ import annotations

import argparse

from conformance import envs
from conformance.harness.registry import default_engines, resolve_engine

NAME = "envs"
HELP = "list or build the oracles' pinned virtualenvs (cached outside the checkout)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="engine, version, path, state")
    inst = sub.add_parser("install", help="build the pinned venv; a no-op when present")
    inst.add_argument("engines", nargs="*", default=None, help="engine names or files (default: every engine that plans in a venv)")
    inst.add_argument("--force", action="store_true", help="rebuild even when present")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = envs.list_envs(default_engines())
        print(f"{'engine':8s} {'version':8s} {'state':10s} {'pip check':10s} path")
        for r in rows:
            print(f"{r['engine']:8s} {r['version']:8s} {r['state']:10s} {r['pip_check'][:10]:10s} {r['path']}")
        return 0
    specs = [resolve_engine(n) for n in args.engines] if args.engines else [e for e in default_engines() if e.uses_venv]
    for spec in specs:
        name = spec.name
        if not spec.uses_venv:
            print(f"{name}: plans in {spec.describe_plan()}, no venv to build")
            continue
        env = envs.install(spec, progress=lambda m: print(m, flush=True), force=args.force)
        print(f"{name} {env.version}: {env.state()} at {env.path}")
    return 0
