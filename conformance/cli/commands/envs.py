"""`conformance envs list|install|pack`: the oracles' pinned, cached virtualenvs, and their offline packs."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.engines import env_pack, envs
from conformance.engines.env_pack_fetch import Target
from conformance.engines.registry import default_engines, resolve_engine

NAME = "envs"
HELP = "list or build the oracles' pinned virtualenvs (cached outside the checkout), or pack one for an offline host"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="engine, version, path, state")
    inst = sub.add_parser("install", help="build the pinned venv; a no-op when present")
    inst.add_argument("engines", nargs="*", default=None, help="engine names or files (default: every engine that plans in a venv)")
    inst.add_argument("--force", action="store_true", help="rebuild even when present")
    pk = sub.add_parser("pack", help="a wheelhouse of a built venv's exact versions for an offline host "
                                     "(another Python/platform), with install.sh and bin/ launchers")
    pk.add_argument("engine", help="engine name or file (one that plans in a venv, built here)")
    pk.add_argument("--python", required=True, help="the host's CPython minor version, e.g. 3.12")
    pk.add_argument("--platform", required=True, help="the host's wheel platform, e.g. manylinux_2_28_x86_64 "
                                                      "(older manylinux tags of the same arch are accepted too)")
    pk.add_argument("--out", required=True, type=Path, help="pack directory (wheels/, oracle-pack.json, install.sh, bin/)")
    pk.add_argument("--host-freeze", type=Path, help="the host's `pip freeze`: exact-version matches are left out")
    pk.add_argument("--use-host", nargs="+", action="extend", default=[], metavar="GLOB",
                    help="packages the host provides at whatever version (globs over names, e.g. 'nvidia-*'); "
                         "each is recorded as a deviation")
    pk.add_argument("--need", nargs="+", action="extend", default=[], metavar="NAME",
                    help="pack these even when a --use-host glob matches (e.g. nvidia-nccl-cu13)")
    pk.add_argument("--leave-out", nargs="+", action="extend", default=[], metavar="NAME",
                    help="leave these packages out (recorded)")
    pk.add_argument("--only", nargs="+", action="extend", default=[], metavar="NAME",
                    help="pack only these packages (a partial pack)")
    pk.add_argument("--deviation-env", action="append", default=[], metavar="K=V",
                    help="an env var the launchers export (a deviation from the engine's defaults)")
    pk.add_argument("--deviation-arg", action="append", default=[], metavar="ARG",
                    help="an argument the launchers append (after `serve` for vllm); use --deviation-arg=--flag")
    pk.add_argument("--deviation-reason", default="given when the pack was made, without a reason",
                    help="why the deviations are needed (recorded with each)")
    pk.add_argument("--wheel-cache", type=Path, help="a directory of already-downloaded wheels, reused by exact "
                                                    "name and version")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = envs.list_envs(default_engines())
        print(f"{'engine':8s} {'version':8s} {'state':10s} {'pip check':10s} path")
        for r in rows:
            print(f"{r['engine']:8s} {r['version']:8s} {r['state']:10s} {r['pip_check'][:10]:10s} {r['path']}")
        return 0
    if args.action == "pack":
        req = env_pack.PackRequest(
            engine=resolve_engine(args.engine), target=Target(args.python, args.platform), out=args.out,
            host_freeze=args.host_freeze, use_host=args.use_host, need=args.need, leave_out=args.leave_out,
            only=args.only, deviation_env=args.deviation_env, deviation_args=args.deviation_arg,
            deviation_reason=args.deviation_reason, wheel_cache=args.wheel_cache)
        env_pack.pack(req, progress=lambda m: print(m, flush=True))
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
