"""`conformance engines [list] | check FILE...`: the engines the framework knows, and engine-file validation.

`list` prints each engine's name, role, version, plan kind and environment state (shipped engine
files, entry-point engines, and any files named with --engine). `check` validates engine files:
exit 0 when every file is valid, 2 (with `file: json.path: message` lines) otherwise.
"""

from __future__ import annotations

import argparse

from conformance.errors import ConformanceError
from conformance.harness.registry import default_engines, resolve_engine

NAME = "engines"
HELP = "list the known engines (name, role, version, plan kind, environment) or check engine files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("list", help="name, role, version, plan kind, environment state")
    ls.add_argument("--engine", action="append", default=[], help="also list this engine file (repeatable)")
    chk = sub.add_parser("check", help="validate engine files")
    chk.add_argument("files", nargs="+", help="engine files (YAML)")


def _env_state(engine) -> str:
    if not engine.uses_venv:
        return "project env" if engine.plan.kind == "module" else "own executable"
    from conformance.envs import oracle_env

    env = oracle_env(engine)
    return f"venv {env.state()}"


def run(args: argparse.Namespace) -> int:
    if args.action == "check":
        bad = 0
        for f in args.files:
            try:
                e = resolve_engine(f)
            except ConformanceError as exc:
                print(str(exc))
                bad += 1
                continue
            print(f"{f}: ok ({e.name}, {e.role}, plan {e.plan.kind}{', live' if e.live else ''}"
                  f"{', defects ' + ','.join(e.defects) if e.defects else ''})")
        return 2 if bad else 0
    engines = default_engines() + [resolve_engine(f) for f in getattr(args, "engine", []) or []]
    print(f"{'name':28s} {'role':10s} {'version':10s} {'plan':8s} {'live':5s} environment")
    for e in engines:
        print(f"{e.name:28s} {e.role:10s} {e.resolved_version[:10]:10s} {e.plan.kind:8s} "
              f"{'yes' if e.live else 'no':5s} {_env_state(e)}")
    return 0
