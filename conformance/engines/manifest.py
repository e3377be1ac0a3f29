"""Process-adapter manifests: how to start an external engine's server, and what to read from it.

Contract: `load_manifest(ref)` returns a `Manifest` or raises `ManifestError` with one line per
problem (`file: json.path: message`); `ref` is a manifest file, or the name of a shipped engine whose
engine file (`engines/engine_files/<name>.yaml`) holds its manifest inline as its `live:` section (an
engine's plan and live in one file; `shipped_live_engines()` lists them). `case_values(case_json, port, overrides)` is the case
mapping every manifest can use (PLACEHOLDERS); `render_argv(manifest.command, values)` fills an
argv template (strings with {placeholders}, and `{if, then, else}` items spliced in when a
value is set), raising `ManifestError` for a placeholder the case leaves unset.
"""

from __future__ import annotations

import importlib
import json
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from conformance import paths
from conformance.documents.schemas import error_lines
from conformance.documents.yaml_file import YamlFileError, read_yaml
from conformance.engines.shipped import SHIPPED_DIR
from conformance.engines.speculative_config import speculative_config
from conformance.errors import ConformanceError
from conformance.loadgen.client import OPENAI_COMPLETIONS
from conformance.loadgen.settings import MetricNames

PLACEHOLDERS = {
    "python": "the framework's Python interpreter",
    "repo_root": "the framework's checkout",
    "host": "127.0.0.1", "port": "the port picked for this run",
    "model_dir": "case target dir (resolved)", "draft_dir": "case draft dir, or unset",
    "served_model_name": "the target dir's name",
    "method": "speculative.method", "k": "speculative.num_speculative_tokens",
    "num_draft_tokens": "k + 1 (the verify window: drafts plus the anchor token)",
    "max_num_seqs": "scheduler.max_num_seqs", "max_model_len": "scheduler.max_model_len",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "kv_cache_bytes": "memory.kv_cache_bytes, or unset", "gpu_memory_utilization": "memory.gpu_memory_utilization, or unset",
    "prefix_caching": "cache.prefix_caching (set only when true)", "ssm_dtype": "cache.ssm_dtype",
    "kv_cache_dtype": "cache.kv_cache_dtype", "seed": "workload.seed",
    "mean_acceptance_length": "synthetic: the mean; fixed n: n + 1 (exact under vLLM's minimum-variance schedule); model: unset",
    "acceptance_rates_json": "synthetic with per-position rates: the JSON list, else unset",
    "speculative_config": "vLLM's --speculative-config JSON for the case (method, k, draft model, synthetic acceptance) "
                          "with the case's method names (conformance/engines/speculative_config.py)",
    "device": "cuda when torch sees one, else cpu",
}


class ManifestError(ConformanceError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Manifest:
    path: Path
    engine: str
    command: tuple[Any, ...]
    health_url: str
    base_url: str
    env: Mapping[str, str | None]
    version: str | None
    version_command: tuple[Any, ...] | None
    mapping_module: str | None
    startup_timeout_s: float
    stop_timeout_s: float
    refusal_exit_codes: tuple[int, ...]
    metrics: MetricNames
    startup_regexes: Mapping[str, str]
    request_extra: Mapping[str, Any]
    running_requests_metric: str | None = None
    request_protocol: str = OPENAI_COMPLETIONS   # conformance.loadgen.client.REQUEST_PROTOCOLS


def shipped_live_engines() -> list[str]:
    """The shipped engines that can be served live: their engine files have a `live:` section."""
    names = []
    for f in sorted(SHIPPED_DIR.glob("*.yaml")):
        try:
            doc = read_yaml(f, "engine file")
        except YamlFileError:
            continue
        if isinstance(doc, dict) and doc.get("live"):
            names.append(f.stem)
    return names


def _templates(doc: dict[str, Any]):
    """(json path, template string) of every field that takes {placeholders}."""
    for key in ("health_url", "base_url", "version"):
        if isinstance(doc.get(key), str):
            yield key, doc[key]
    for key in ("command", "version_command"):
        for i, item in enumerate(doc.get(key) or []):
            if isinstance(item, str):
                yield f"{key}[{i}]", item
            else:
                for branch in ("then", "else"):
                    for j, s in enumerate(item.get(branch) or []):
                        yield f"{key}[{i}].{branch}[{j}]", s
    for key, value in (doc.get("env") or {}).items():
        if isinstance(value, str):
            yield f"env.{key}", value


def load_manifest(ref: str | Path) -> Manifest:
    """A manifest file, or a shipped engine's name: the `live:` section of its engine file."""
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") or p.exists():
        try:
            doc = read_yaml(p, "manifest")
        except YamlFileError as exc:
            raise ManifestError(exc.problems) from None
        return manifest_from_doc(doc, p)
    shipped = SHIPPED_DIR / f"{ref}.yaml"
    if str(ref) not in shipped_live_engines():
        known = ", ".join(shipped_live_engines())
        raise ManifestError([f"{ref}: not a manifest file and not a shipped engine served live (known: {known})"])
    try:
        live = read_yaml(shipped, "engine file")["live"]
    except YamlFileError as exc:
        raise ManifestError(exc.problems) from None
    return manifest_from_engine_file(live, shipped, str(ref))


def manifest_from_engine_file(live: Any, engine_file: Path, engine: str) -> Manifest:
    """The `live:` section of an engine file: `{manifest: NAME-or-path}` (a path relative to the
    engine file), or a manifest inline (its `engine` defaults to the engine file's name)."""
    if isinstance(live, dict) and set(live) == {"manifest"}:
        ref = str(live["manifest"])
        candidate = engine_file.parent / ref
        return load_manifest(candidate if candidate.is_file() else ref)
    if isinstance(live, dict):
        live = {"engine": engine, **live}
    return manifest_from_doc(live, engine_file)


def manifest_from_doc(doc: Any, path: Path) -> Manifest:
    if not isinstance(doc, dict):
        raise ManifestError([f"{path}: (root): a manifest must be a YAML mapping"])
    problems = error_lines("manifest", doc, str(path))
    if problems:
        raise ManifestError(problems)
    known = set(PLACEHOLDERS)
    if doc.get("mapping_module"):
        try:
            known |= set(getattr(importlib.import_module(doc["mapping_module"]), "EXTRA_PLACEHOLDERS", {}))
        except ImportError as exc:
            problems.append(f"{path}: mapping_module: cannot import {doc['mapping_module']!r}: {exc}")
    for where, template in _templates(doc):
        try:
            names = {n for _, n, _, _ in string.Formatter().parse(template) if n is not None}
        except ValueError as exc:
            problems.append(f"{path}: {where}: bad placeholder syntax: {exc} ({BRACE_HINT})")
            continue
        for name in sorted(names - known):
            problems.append(f"{path}: {where}: {unknown_placeholder(name, known)}")
    for regex_name, regex in (doc.get("startup_regexes") or {}).items():
        try:
            if re.compile(regex).groups < 1:
                problems.append(f"{path}: startup_regexes.{regex_name}: needs one capturing group")
        except re.error as exc:
            problems.append(f"{path}: startup_regexes.{regex_name}: not a valid regex: {exc}")
    if problems:
        raise ManifestError(problems)
    m = doc.get("metrics") or {}
    return Manifest(path=path, engine=doc["engine"], command=tuple(doc["command"]), health_url=doc["health_url"],
                    base_url=doc["base_url"], env=dict(doc.get("env") or {}), version=doc.get("version"),
                    version_command=tuple(doc["version_command"]) if doc.get("version_command") else None,
                    mapping_module=doc.get("mapping_module"),
                    startup_timeout_s=float(doc.get("startup_timeout_s", 300)),
                    stop_timeout_s=float(doc.get("stop_timeout_s", 20)),
                    refusal_exit_codes=tuple(doc.get("refusal_exit_codes") or ()),
                    metrics=MetricNames(accepted_tokens=m.get("accepted_tokens"), draft_tokens=m.get("draft_tokens"),
                                        drafts=m.get("drafts"), acceptance_length_gauge=m.get("acceptance_length_gauge"),
                                        accepted_tokens_per_pos=m.get("accepted_tokens_per_pos")),
                    startup_regexes=dict(doc.get("startup_regexes") or {}), request_extra=dict(doc.get("request_extra") or {}),
                    running_requests_metric=m.get("running_requests"),
                    request_protocol=doc.get("request_protocol", OPENAI_COMPLETIONS))


def _device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def case_values(case: dict[str, Any], port: int, overrides: Mapping[str, Any] | None = None,
                mapping_module: str | None = None) -> dict[str, Any]:
    """Placeholder values for a case (`Case.to_json()`); `overrides` (--set) win over the case."""
    sched, mem, cache, spec = case["scheduler"], case["memory"], case["cache"], case["speculative"]
    served = speculative_config(case, served=True, vllm_names=False)   # the acceptance as a server is given it
    length, rates = served.get("synthetic_acceptance_length"), served.get("synthetic_acceptance_rates")
    k = int(spec["num_speculative_tokens"])
    values: dict[str, Any] = {
        "python": sys.executable, "repo_root": str(paths.REPO_ROOT), "host": "127.0.0.1", "port": port,
        "model_dir": case["resolved"]["target_dir"], "draft_dir": case["resolved"].get("draft_dir"),
        "served_model_name": Path(case["resolved"]["target_dir"]).name,
        "method": spec["method"], "k": k, "num_draft_tokens": k + 1,
        "max_num_seqs": sched["max_num_seqs"], "max_model_len": sched["max_model_len"],
        "max_num_batched_tokens": sched["max_num_batched_tokens"],
        "kv_cache_bytes": mem.get("kv_cache_bytes"), "gpu_memory_utilization": mem.get("gpu_memory_utilization"),
        "prefix_caching": bool(cache["prefix_caching"]) or None, "ssm_dtype": cache["ssm_dtype"],
        "kv_cache_dtype": cache.get("kv_cache_dtype", "bfloat16"), "seed": case["workload"]["seed"],
        "mean_acceptance_length": length, "acceptance_rates_json": json.dumps(rates) if rates else None,
        "speculative_config": json.dumps(served, sort_keys=True),
        "device": _device(),
    }
    if mapping_module:
        values.update(importlib.import_module(mapping_module).placeholders(case, dict(values, **(overrides or {}))))
    values.update(overrides or {})
    return values


BRACE_HINT = "a literal brace is doubled: write {{}} for a literal {}, {{ or }} for one brace"


def unknown_placeholder(name: str, known: Any) -> str:
    """Why `{name}` cannot be filled, in words: `{}` (or `{0}`) is no placeholder at all, a literal
    brace is written doubled; any other name is listed against the known ones."""
    if not name or name.isdigit():
        return f"{{{name}}} is not a placeholder: {BRACE_HINT}"
    return f"unknown placeholder {{{name}}} (known: {', '.join(sorted(known))}; {BRACE_HINT})"


def _is_set(v: Any) -> bool:
    return v is not None and v is not False


def render(template: str, values: Mapping[str, Any], where: str) -> str:
    out = []
    for literal, name, spec, conv in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name not in values:
            raise ManifestError([f"{where}: {unknown_placeholder(name, values)}"])
        if not _is_set(values[name]):
            raise ManifestError([f"{where}: placeholder {{{name}}} is not set for this case "
                                 "(guard it with an {if: ..., then: [...]} item)"])
        v = values[name]
        out.append("true" if v is True else str(v))
    return "".join(out)


def render_argv(template: tuple[Any, ...] | list[Any], values: Mapping[str, Any], where: str = "command") -> list[str]:
    argv: list[str] = []
    for i, item in enumerate(template):
        if isinstance(item, str):
            argv.append(render(item, values, f"{where}[{i}]"))
            continue
        cond = item["if"]
        if cond not in values:
            raise ManifestError([f"{where}[{i}].if: unknown placeholder {cond!r}"])
        branch = item["then"] if _is_set(values[cond]) else item.get("else", [])
        argv += [render(s, values, f"{where}[{i}]") for s in branch]
    return argv


def render_env(env: Mapping[str, str | None], values: Mapping[str, Any]) -> dict[str, str]:
    """Env entries whose template names an unset placeholder (or is null) are left out."""
    out: dict[str, str] = {}
    for key, template in env.items():
        if template is None:
            continue
        names = [n for _, n, _, _ in string.Formatter().parse(template) if n]
        if all(_is_set(values.get(n)) for n in names):
            out[key] = render(template, values, f"env.{key}")
    return out


def placeholder_overrides(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (`--set`, `--live-set`) as the placeholder overrides of a manifest; a pair
    without `=` or without a key raises `ConformanceError` naming it."""
    out: dict[str, Any] = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise ConformanceError(f"--set {p!r}: expected KEY=VALUE")
        out[key] = value
    return out
