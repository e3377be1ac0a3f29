"""Finding engines: shipped engine files by name, any other by path or entry point.

Contract: `resolve_engine(ref)` returns an `EngineFile` for
- a path to an engine file (`./port.yaml`, anything ending .yaml/.yml or containing a `/`);
- a shipped engine's name (`conformance/engines/engine_files/<name>.yaml`: reference, vllm, sglang);
- a name registered by an installed package in the entry-point group `dflash_conformance.engines`
  (the entry point loads to a path of an engine file, or to a callable returning one);
and raises `UnknownEngineError` naming what is known otherwise, or `EngineFileError` for a bad
file. `resolve_engines("reference,vllm,./port.yaml")` resolves a comma list (duplicates dropped,
two files of one name refused). `default_engines()` is every shipped and registered engine (two
engines of one name refused there too, entry points included). A file that takes a shipped
oracle's name without being its shipped file is refused when loaded (`conformance.engines.shipped`).
Nothing here caches: each call reads the files it needs.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Iterable

from conformance.engines.engine_file import EngineFile, EngineFileError, load_engine_file
from conformance.engines.shipped import SHIPPED_DIR
from conformance.errors import ConformanceError, UnknownEngineError

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
    try:
        return load_engine_file(Path(path))
    except EngineFileError as exc:
        raise EngineFileError([f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}): {p}"
                               for p in exc.problems]) from None


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
    return _unique("--engines", [(ref, resolve_engine(ref)) for ref in items])


def _unique(where: str, resolved: list[tuple[str, EngineFile]]) -> list[EngineFile]:
    """The engines, one per name (the same file named twice counts once); two files of one name
    are refused, naming both and how each was found."""
    out: dict[str, tuple[str, EngineFile]] = {}
    for ref, engine in resolved:
        if engine.name in out and out[engine.name][1].path != engine.path:
            first_ref, first = out[engine.name]
            raise ConformanceError(f"{where}: two engines are named {engine.name!r}: {first.path} (from {first_ref!r}) "
                                   f"and {engine.path} (from {ref!r}); names key observations, goldens and reports, "
                                   f"so they must differ")
        out.setdefault(engine.name, (ref, engine))
    return [engine for _, engine in out.values()]


def default_engines() -> list[EngineFile]:
    """Every shipped engine and every entry point's (an entry point named like a shipped engine, or
    two engines of one name, are refused: one run cannot hold two engines of one name)."""
    resolved = [(n, resolve_engine(n)) for n in shipped_names()]
    shipped = set(shipped_names())
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        name = ep.name
        if name in shipped:
            raise ConformanceError(f"entry point {name} = {ep.value} ({ENTRY_POINT_GROUP}) is named like the shipped "
                                   f"engine {SHIPPED_DIR / (name + '.yaml')}; one run cannot hold two engines of "
                                   f"one name: rename the entry point")
        resolved.append((f"entry point {name}", _from_entry_point(ep)))
    return _unique("engines", resolved)


def oracles(engines: Iterable[EngineFile]) -> list[EngineFile]:
    return [e for e in engines if e.is_oracle]
