"""Finding engines: shipped engine files by name, any other by path or entry point.

Contract: `resolve_engine(ref)` returns an `EngineFile` for
- a path to an engine file (`./port.yaml`, anything ending .yaml/.yml or containing a `/`);
- a shipped engine's name (`conformance/engine_files/<name>.yaml`: reference, vllm, sglang);
- a name registered by an installed package in the entry-point group `dflash_conformance.engines`
  (the entry point loads to a path of an engine file, or to a callable returning one);
and raises `UnknownEngineError` naming what is known otherwise, or `EngineFileError` for a bad
file. `resolve_engines("reference,vllm,./port.yaml")` resolves a comma list (duplicates dropped,
two files of one name refused). `default_engines()` is every shipped and registered engine.
Nothing here caches: each call reads the files it needs.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Iterable

from conformance import paths
from conformance.errors import ConformanceError, UnknownEngineError
from conformance.harness.engine_file import EngineFile, EngineFileError, load_engine_file

SHIPPED_DIR = paths.PACKAGE_DIR / "engine_files"
ENTRY_POINT_GROUP = "dflash_conformance.engines"
SHIPPED_ORDER = ("reference", "vllm", "sglang")


def shipped_names() -> list[str]:
    names = sorted(f.stem for f in SHIPPED_DIR.glob("*.yaml"))
    return sorted(names, key=lambda n: (SHIPPED_ORDER.index(n) if n in SHIPPED_ORDER else len(SHIPPED_ORDER), n))


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def known_names() -> list[str]:
    return list(dict.fromkeys(shipped_names() + sorted(_entry_points())))


def _is_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).is_file()


def _from_entry_point(ep: metadata.EntryPoint) -> EngineFile:
    try:
        target = ep.load()
        path = target() if callable(target) else target
    except Exception as exc:  # a third party's package: say whose and why
        raise EngineFileError([f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}): "
                               f"could not be loaded: {type(exc).__name__}: {exc}"]) from None
    return load_engine_file(Path(path))


def resolve_engine(ref: str) -> EngineFile:
    ref = ref.strip()
    if not ref:
        raise UnknownEngineError("an engine is named by a shipped name, an entry point or a path to an engine file")
    if _is_path(ref):
        if not Path(ref).expanduser().exists():
            raise UnknownEngineError(f"engine file {ref} does not exist")
        return load_engine_file(ref)
    shipped = SHIPPED_DIR / f"{ref}.yaml"
    if shipped.is_file():
        return load_engine_file(shipped)
    eps = _entry_points()
    if ref in eps:
        return _from_entry_point(eps[ref])
    raise UnknownEngineError(f"unknown engine {ref!r} (known: {', '.join(known_names())}; "
                             f"or give a path to an engine file, e.g. ./my-engine.yaml)")


def resolve_engines(refs: str | Iterable[str] | None) -> list[EngineFile]:
    """Engines of a comma list (or iterable) of references; None or empty: `default_engines()`."""
    if refs is None or (isinstance(refs, str) and not refs.strip()):
        return default_engines()
    items = [r.strip() for r in (refs.split(",") if isinstance(refs, str) else refs) if r.strip()]
    if not items:
        raise ConformanceError("--engines: no engine named")
    out: dict[str, EngineFile] = {}
    for ref in items:
        engine = resolve_engine(ref)
        if engine.name in out and out[engine.name].path != engine.path:
            raise ConformanceError(f"--engines: two engines are named {engine.name!r}: {out[engine.name].path} and "
                                   f"{engine.path}; names key observations, goldens and reports, so they must differ")
        out[engine.name] = engine
    return list(out.values())


def default_engines() -> list[EngineFile]:
    return [resolve_engine(n) for n in known_names()]


def oracles(engines: Iterable[EngineFile]) -> list[EngineFile]:
    return [e for e in engines if e.is_oracle]
