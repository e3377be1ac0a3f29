"""Engine files: an engine is declared, not coded in.

An engine file (YAML, schema `conformance/documents/schemas/engine.schema.json`) names the engine, its role
and version, and says how it plans, one of:

    plan: {module: {name: pkg.adapter, environment: project | venv, pip: [...]}}
        a Python adapter module run by `python -m conformance.harness.probe` inside the engine's
        environment (the in-env adapter contract below);
    plan: {command: {argv: [...]}}
        any executable: it gets the case (`Case.to_json()`) on stdin and as the file {case_file},
        and writes ONE observation JSON on stdout (schema `observation.schema.json`);
    plan: {log: {argv: [...], fields: {...}, fatal: REGEX}}
        a dry run whose output lines are parsed by named regexes into observation fields; a
        `fatal` line or an exit code in `refusal_exit_codes` is `refused` with that message;

and optionally how it serves live (`live:`, a process manifest). `role` decides what is judged:
`oracle` engines are the expectation, `under-test` engines are judged against them; no check
selects an engine by its name.

The in-env adapter contract (plan.module):

    ENGINE: str                       # engine name (the engine file's name wins in observations)
    def engine_version() -> str       # read from the installed package, never hard-coded
    def plan(case: dict) -> dict      # a full observation: ok, or refused with the engine's message
    def plan_setup() -> None          # optional: once per process, before the first plan

Contract: `load_engine_file(path)` returns an `EngineFile` or raises `EngineFileError` with one
line per problem, each `file: json.path: message`. A shipped oracle's name (vllm, sglang) is taken
only by that oracle's shipped file (`conformance.engines.shipped`): any other file of that name is refused.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from conformance.documents.observation import STEP_FIELDS as TRACE_GROUPS
from conformance.documents.schemas import error_lines
from conformance.documents.yaml_file import YamlFileError, read_yaml
from conformance.engines.roles import ORACLE, ROLES
from conformance.engines.shipped import reserved_name_problem
from conformance.errors import ConformanceError

# Placeholders a plan command (or log dry run) may use besides the case's (engines.manifest.PLACEHOLDERS).
PLAN_PLACEHOLDERS = {
    "case_file": "the case as JSON (Case.to_json()) in a file",
    "case_id": "the case's id", "device_profile": "the case's device profile (h200, ...)",
    "engine_dir": "the directory of the engine file",
    "engine_name": "the engine file's name",
    "defects": "the engine file's defects, comma-separated, or 'none'",
    "num_requests": "workload.num_requests: how many requests the trace schedules",
    "prompt_tokens": "workload.prompt_tokens: each request's prompt length in tokens",
    "output_tokens": "workload.output_tokens: each request's output length in tokens",
    "accepted_tokens": "acceptance fixed n: the drafts accepted per step (n); unset for synthetic and model acceptance",
    "async_scheduling": "'true' or 'false': scheduler.async_scheduling of the case, else the device profile's GPU "
                        "default (vLLM's AsyncScheduler on every shipped profile)",
    "chunked_prefill": "'true' or 'false': scheduler.chunked_prefill",
}
# A version names directories in the cache (`<cache>/oracles/<name>-<version>`): one safe path component
SAFE_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")
# How a capture with `unit:` is read: a number with optional thousands separators and a unit.
BYTE_UNITS = {"B": 1, "byte": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
              "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12}
TOKEN_UNITS = {"": 1, "token": 1, "tokens": 1}


class EngineFileError(ConformanceError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ModulePlan:
    module: str
    environment: str = "project"               # project | venv
    pip: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    max_cases_per_process: int | None = None   # None: one process plans every case
    startup_timeout_s: float = 180.0           # import + first config
    per_case_timeout_s: float = 180.0
    kind: str = "module"


@dataclass(frozen=True)
class CommandPlan:
    argv: tuple[Any, ...]
    env: Mapping[str, str | None] = field(default_factory=dict)
    timeout_s: float = 120.0
    refusal_exit_codes: tuple[int, ...] = ()
    kind: str = "command"


@dataclass(frozen=True)
class FieldRule:
    regex: str
    type: str | None = None      # int | float | bool | str; None: int when it looks like one, else float
    scale: float | None = None   # multiply a number (MiB -> bytes: 1048576)
    map: Mapping[str, Any] | None = None
    unit: str | None = None      # bytes | tokens: `160.312 MiB`, `8,192 tokens` read into an integer


@dataclass(frozen=True)
class LogPlan:
    argv: tuple[Any, ...]
    env: Mapping[str, str | None] = field(default_factory=dict)
    timeout_s: float = 120.0
    refusal_exit_codes: tuple[int, ...] = ()
    fields: Mapping[str, FieldRule] = field(default_factory=dict)
    lists: tuple[tuple[str, str, str], ...] = ()      # (path, value, regex)
    trace_step: str | None = None
    message: str | None = None
    fatal: str | None = None
    kind: str = "log"


@dataclass(frozen=True)
class EngineFile:
    """One declared engine. `path` is the file it came from (None for none)."""

    name: str
    role: str
    plan: ModulePlan | CommandPlan | LogPlan
    path: Path | None = None
    description: str = ""
    version: str | None = None
    version_command: tuple[str, ...] | None = None
    defects: tuple[str, ...] = ()
    live: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def is_oracle(self) -> bool:
        return self.role == ORACLE

    @property
    def engine_dir(self) -> Path:
        from conformance import paths

        return self.path.parent if self.path else paths.REPO_ROOT

    @property
    def uses_venv(self) -> bool:
        return isinstance(self.plan, ModulePlan) and self.plan.environment == "venv"

    @property
    def timeout_s(self) -> float:
        """How long one of its commands may run: the plan's timeout (a module plan's startup timeout)."""
        plan = self.plan
        return plan.startup_timeout_s if isinstance(plan, ModulePlan) else plan.timeout_s

    def describe_plan(self) -> str:
        if isinstance(self.plan, ModulePlan):
            return f"module {self.plan.module} ({self.plan.environment})"
        return f"{self.plan.kind} {' '.join(str(a) for a in self.plan.argv if isinstance(a, str))[:80]}"


def fill(template: str, values: Mapping[str, Any], where: str) -> str:
    """`template` with {placeholders} from `values`; `EngineFileError` for one it does not know."""
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name not in values or values[name] is None:
            from conformance.engines.manifest import unknown_placeholder

            raise EngineFileError([f"{where}: {unknown_placeholder(name, values)}"])
        out.append(str(values[name]))
    return "".join(out)


def _field_rule(raw: Any) -> FieldRule:
    if isinstance(raw, str):
        return FieldRule(raw)
    return FieldRule(raw["regex"], raw.get("type"), raw.get("scale"), raw.get("map"), raw.get("unit"))


def _regex_problems(path: Path, where: str, regex: str | None, groups: int = 1,
                    named: tuple[str, ...] = ()) -> list[str]:
    if regex is None:
        return []
    try:
        compiled = re.compile(regex)
    except re.error as exc:
        return [f"{path}: {where}: not a valid regex: {exc}"]
    if named:
        missing = [g for g in named if g not in compiled.groupindex]
        return [f"{path}: {where}: needs the named group(s) {', '.join(missing)}"] if missing else []
    if compiled.groups < groups:
        return [f"{path}: {where}: needs one capturing group"]
    return []


def _plan(doc: dict[str, Any], path: Path) -> tuple[ModulePlan | CommandPlan | LogPlan, list[str]]:
    plan = doc["plan"]
    problems: list[str] = []
    if "module" in plan:
        m = plan["module"]
        env_kind = m.get("environment", "project")
        if env_kind == "venv" and not m.get("pip"):
            problems.append(f"{path}: plan.module.pip: a venv environment names what it installs (exact pins)")
        if env_kind == "venv" and not doc.get("version"):
            problems.append(f"{path}: version: a venv environment is keyed by the pinned version: give `version`")
        return ModulePlan(m["name"], env_kind, tuple(m.get("pip") or ()), dict(m.get("env") or {}),
                          m.get("max_cases_per_process"), float(m.get("startup_timeout_s", 180.0)),
                          float(m.get("per_case_timeout_s", 180.0))), problems
    if "command" in plan:
        c = plan["command"]
        return CommandPlan(tuple(c["argv"]), dict(c.get("env") or {}), float(c.get("timeout_s", 120.0)),
                           tuple(c.get("refusal_exit_codes") or ())), problems
    lg = plan["log"]
    fields = {k: _field_rule(v) for k, v in (lg.get("fields") or {}).items()}
    for k, rule in fields.items():
        problems += _regex_problems(path, f"plan.log.fields.{k}", rule.regex)
        if k.split(".")[0] not in ("budget", "memory", "message"):
            problems.append(f"{path}: plan.log.fields.{k}: a field lies under budget. or memory. (or is message)")
    lists = tuple((e["path"], e["value"], e["regex"]) for e in (lg.get("lists") or ()))
    for i, (_p, _v, rx) in enumerate(lists):
        problems += _regex_problems(path, f"plan.log.lists[{i}].regex", rx, groups=0)
    problems += _regex_problems(path, "plan.log.trace_step", lg.get("trace_step"), named=TRACE_GROUPS)
    problems += _regex_problems(path, "plan.log.fatal", lg.get("fatal"))
    problems += _regex_problems(path, "plan.log.message", lg.get("message"))
    return LogPlan(tuple(lg["argv"]), dict(lg.get("env") or {}), float(lg.get("timeout_s", 120.0)),
                   tuple(lg.get("refusal_exit_codes") or ()), fields, lists, lg.get("trace_step"),
                   lg.get("message"), lg.get("fatal")), problems


def _placeholder_problems(path: Path, where: str, argv: tuple[Any, ...], env: Mapping[str, Any]) -> list[str]:
    """Every {placeholder} of a plan's argv and env must be one the harness fills."""
    from conformance.engines.manifest import BRACE_HINT, PLACEHOLDERS, unknown_placeholder

    known = set(PLACEHOLDERS) | set(PLAN_PLACEHOLDERS)
    items: list[tuple[str, str]] = []
    for i, item in enumerate(argv):
        if isinstance(item, str):
            items.append((f"{where}.argv[{i}]", item))
        else:
            items.append((f"{where}.argv[{i}].if", "{" + str(item.get("if")) + "}"))
            items += [(f"{where}.argv[{i}].{b}[{j}]", t) for b in ("then", "else") for j, t in enumerate(item.get(b) or [])]
    items += [(f"{where}.env.{k}", v) for k, v in env.items() if isinstance(v, str)]
    problems = []
    for at, template in items:
        try:
            names = {n for _, n, _, _ in string.Formatter().parse(template) if n is not None}
        except ValueError as exc:
            problems.append(f"{path}: {at}: bad placeholder syntax: {exc} ({BRACE_HINT})")
            continue
        problems += [f"{path}: {at}: {unknown_placeholder(n, known)}" for n in sorted(names - known)]
    return problems


def parse_engine_file(doc: Any, path: Path) -> EngineFile:
    """Validate a parsed document as an engine file read from `path`."""
    if not isinstance(doc, dict):
        raise EngineFileError([f"{path}: (root): an engine file is a YAML mapping, got "
                               f"{'nothing' if doc is None else type(doc).__name__}"])
    problems = error_lines("engine", doc, str(path))
    if problems:
        raise EngineFileError(problems)
    reserved = reserved_name_problem(doc["name"], doc["role"], path)
    if reserved:
        raise EngineFileError([reserved])
    plan, problems = _plan(doc, path)
    version = doc.get("version")
    if version is not None and not SAFE_VERSION.fullmatch(version):
        problems.append(f"{path}: version: {version!r} is not a version: it names a directory in the cache, so it "
                        f"is letters, digits and . _ + ~ - only, starting with a letter or digit (no '/', no '..')")
    if not isinstance(plan, ModulePlan):
        problems += _placeholder_problems(path, f"plan.{plan.kind}", plan.argv, plan.env)
    live = doc.get("live")
    if live is not None:
        from conformance.engines.manifest import ManifestError, manifest_from_engine_file

        try:
            manifest_from_engine_file(live, path, doc["name"])
        except ManifestError as exc:
            problems += [p if p.startswith(str(path)) else f"{path}: live: {p}" for p in exc.problems]
    if problems:
        raise EngineFileError(problems)
    return EngineFile(name=doc["name"], role=doc["role"], plan=plan, path=path,
                      description=" ".join(str(doc.get("description") or "").split()),
                      version=doc.get("version"),
                      version_command=tuple(doc["version_command"]) if doc.get("version_command") else None,
                      defects=tuple(doc.get("defects") or ()), live=live)


def load_engine_file(path: Path | str) -> EngineFile:
    path = Path(path).expanduser().absolute()
    try:
        doc = read_yaml(path, "engine file")
    except YamlFileError as exc:
        raise EngineFileError(exc.problems) from None
    return parse_engine_file(doc, path)
