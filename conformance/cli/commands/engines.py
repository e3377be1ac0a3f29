"""`conformance engines [list] | check FILE...`: the engines the framework knows, and engine-file validation.

`list` prints each engine's name, role, version, plan kind and environment state (shipped engine
files, entry-point engines, and any files named with --engine). `check` validates engine files and
lints what a plan.log file maps (`checks.engine_lint`): every mapped path must be in the observation schema
(an error), fields the checks read with no rule are warned about, and with `--sample-log FILE` or
`--case CASE` (the port's own output on that case) a printed line that looks like a bound or a refusal
and that no rule maps is a warning. Exit 0 when every file is valid (warnings allowed), 2 (with
`file: json.path: message` lines) otherwise.
"""

from __future__ import annotations

import argparse

from conformance.engines.registry import default_engines, resolve_engine
from conformance.errors import ConformanceError
from conformance.harness.engine_version import resolved_version

NAME = "engines"
HELP = "list the known engines (name, role, version, plan kind, environment) or check engine files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("list", help="name, role, version, plan kind, environment state")
    ls.add_argument("--engine", action="append", default=[], help="also list this engine file (repeatable)")
    chk = sub.add_parser("check", help="validate engine files")
    chk.add_argument("files", nargs="+", help="engine files (YAML)")
    chk.add_argument("--sample-log", metavar="FILE", help="a plan.log engine's sample output: warn about lines that "
                     "look like a bound or a refusal and that no rule maps")
    chk.add_argument("--case", metavar="CASE", help="run each plan.log engine's dry run on this case and lint its "
                     "own output the same way")


def _env_state(engine) -> str:
    if not engine.uses_venv:
        return "project env" if engine.plan.kind == "module" else "own executable"
    from conformance.engines.venv import oracle_env

    env = oracle_env(engine)
    return f"venv {env.state()}"


def _sample(engine, args: argparse.Namespace) -> tuple[str | None, str]:
    """The text to lint lines of: the --sample-log file, or the engine's own output on --case."""
    from pathlib import Path

    if args.sample_log:
        try:
            return Path(args.sample_log).read_text(errors="replace"), args.sample_log
        except OSError as exc:
            raise ConformanceError(f"--sample-log {args.sample_log}: cannot read it: {exc.strerror or exc}") from None
    if args.case and engine.plan.kind == "log":
        import tempfile

        from conformance.documents.cases import find_case
        from conformance.harness.plan_command import plan_one

        case = find_case(args.case)
        with tempfile.TemporaryDirectory(prefix="engines-check-") as tmp:
            plan_one(engine, case, Path(tmp), 0)
            stem = Path(tmp) / f"{engine.name}-0-{case.id}"
            log = stem.with_suffix(".log").read_text(errors="replace").split("\n", 1)   # [0]: the harness's argv line
            text = stem.with_suffix(".stdout").read_text(errors="replace") + "\n" + (log[1] if len(log) > 1 else "")
        return text, f"{engine.name} on {case.id}"
    return None, ""


def _lint(engine, args: argparse.Namespace) -> list:
    from conformance.checks.engine_lint import lint

    text, name = _sample(engine, args)
    return lint(engine, text, name)


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
            findings = _lint(e, args)
            errors = [x for x in findings if x.level == "error"]
            for x in findings:
                print(f"{x.level}: {x.text}")
            if errors:
                bad += 1
                continue
            print(f"{f}: ok ({e.name}, {e.role}, plan {e.plan.kind}{', live' if e.live else ''}"
                  f"{', defects ' + ','.join(e.defects) if e.defects else ''}"
                  f"{f', {len(findings)} warning(s)' if findings else ''})")
        return 2 if bad else 0
    engines = default_engines() + [resolve_engine(f) for f in getattr(args, "engine", []) or []]
    print(f"{'name':28s} {'role':10s} {'version':10s} {'plan':8s} {'live':5s} environment")
    for e in engines:
        print(f"{e.name:28s} {e.role:10s} {resolved_version(e)[:10]:10s} {e.plan.kind:8s} "
              f"{'yes' if e.live else 'no':5s} {_env_state(e)}")
    return 0
