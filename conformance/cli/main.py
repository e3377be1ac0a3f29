"""`conformance` command line. Each subcommand lives in `conformance/cli/commands/<name>.py` and
exposes `NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> int`.

User errors (`ConformanceError`) print their message and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from conformance.errors import ConformanceError

COMMAND_MODULES = (
    "conformance.cli.commands.cases",
    "conformance.cli.commands.plan",
    "conformance.cli.commands.engines",
    "conformance.cli.commands.envs",
    "conformance.cli.commands.run",
    "conformance.cli.commands.report",
    "conformance.cli.commands.merge",
    "conformance.cli.commands.history",
    "conformance.cli.commands.package",
    "conformance.cli.commands.verify",
    "conformance.cli.commands.ladder",
    "conformance.cli.commands.docs",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conformance",
        description="Parity and conformance tests for LLM inference engines under DFlash speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command not built yet
                continue
            raise
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except ConformanceError as exc:
        print(f"conformance {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"conformance {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
