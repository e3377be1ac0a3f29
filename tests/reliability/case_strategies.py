"""Hypothesis strategies for bad case files: mutated valid cases and raw garbage.

A `FuzzInput` is the bytes of one case file plus what the fuzzer knows about it: the mutation
`kind`, whether every such input must be rejected (`must_reject`), and the JSON path the
rejection must name (`expected_path`, `(root)` for file-level problems). Mutations start from
the shipped cases and from two variants of them (synthetic acceptance, a utilization bound), so
every section of the schema is reached. The schema itself tells which types a field allows, so a
"wrong type" is wrong by construction, not by a list kept here.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from conformance.documents.cases import case_files
from conformance.documents.schemas import load_schema

# Faulty model dirs the fuzz root holds (see `make_faulty_model_dirs`), by name.
FAULTY_MODEL_DIRS = ("no-config", "config-not-json", "config-not-object", "config-not-utf8", "config-is-dir",
                     "a-file", "does-not-exist")


@dataclass(frozen=True)
class FuzzInput:
    kind: str
    content: bytes
    must_reject: bool
    expected_path: str | None


def make_faulty_model_dirs(root: Path) -> None:
    """Model dirs a case may point at, each broken in one way."""
    (root / "no-config").mkdir()
    (root / "config-not-json").mkdir()
    (root / "config-not-json" / "config.json").write_text('{"architectures": [')
    (root / "config-not-object").mkdir()
    (root / "config-not-object" / "config.json").write_text("[1, 2, 3]")
    (root / "config-not-utf8").mkdir()
    (root / "config-not-utf8" / "config.json").write_bytes(b"\xff\xfe{\x80}")
    (root / "config-is-dir" / "config.json").mkdir(parents=True)
    (root / "a-file").write_text("not a directory\n")


@lru_cache(maxsize=1)
def base_documents() -> tuple[dict[str, Any], ...]:
    """The shipped cases, parsed, plus variants reaching the synthetic and utilization branches.
    Cached: callers copy before they mutate (`with_value`, `without` do)."""
    docs = [yaml.safe_load(p.read_text()) for p in case_files()]
    for d in docs:   # every optional section present, so a mutation anywhere in the schema lands in a whole one
        d.setdefault("live", {"concurrencies": [1, 2], "device": "cpu", "num_repeats": 2,
                              "parity": {"min_output_tok_per_s_ratio": 0.9}, "regression": {"max_ttft_ratio": 2.5},
                              "acceptance_tolerance": {"mean_length": 0.1}})
        d["live"].setdefault("transformers_peer", {"output_tokens": 16})
    first = copy.deepcopy(docs[0])
    synthetic = copy.deepcopy(first)
    synthetic["id"] = "fuzz-synthetic"
    synthetic["acceptance"] = {"mode": "synthetic", "acceptance_rates": [0.9, 0.7, 0.5]}
    util = copy.deepcopy(first)
    util["id"] = "fuzz-util"
    util["memory"] = {"gpu_memory_utilization": 0.9}
    util["acceptance"] = {"mode": "synthetic", "mean_acceptance_length": 3.5}
    return tuple(docs + [synthetic, util])


# --- schema walking --------------------------------------------------------------------------

def _property_paths(node: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        out.append((path, sub))
        out += _property_paths(sub, path)
    return out


def schema_paths() -> dict[str, dict[str, Any]]:
    return dict(_property_paths(load_schema("case")))


def required_paths() -> list[str]:
    def walk(node: dict[str, Any], prefix: str) -> list[str]:
        out = [f"{prefix}.{r}" if prefix else r for r in node.get("required", [])]
        for key, sub in node.get("properties", {}).items():
            out += walk(sub, f"{prefix}.{key}" if prefix else key)
        return out
    return walk(load_schema("case"), "")


def allowed_types(node: dict[str, Any]) -> set[str]:
    if "enum" in node:
        kinds = {type(v).__name__ for v in node["enum"]}
        return {{"str": "string", "int": "integer", "float": "number", "bool": "boolean"}[k] for k in kinds}
    t = node.get("type", [])
    types = {t} if isinstance(t, str) else set(t)
    if "number" in types:
        types.add("integer")
    return types


def _value_of_type(json_type: str) -> st.SearchStrategy:
    return {
        "string": st.text(max_size=12),
        "integer": st.integers(min_value=-10**6, max_value=10**6),
        "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not float(x).is_integer()),
        "boolean": st.booleans(),
        "null": st.none(),
        "array": st.lists(st.integers(min_value=0, max_value=9), max_size=3),
        "object": st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 9), max_size=2),
    }[json_type]


def wrong_type_value(node: dict[str, Any]) -> st.SearchStrategy:
    allowed = allowed_types(node)
    wrong = [t for t in ("string", "integer", "number", "boolean", "null", "array", "object") if t not in allowed]
    return st.one_of([_value_of_type(t) for t in wrong])


def numeric_paths() -> list[tuple[str, dict[str, Any]]]:
    return [(p, n) for p, n in schema_paths().items() if allowed_types(n) & {"integer", "number"}
            and not (allowed_types(n) & {"string", "object", "array"})]


def enum_paths() -> list[tuple[str, dict[str, Any]]]:
    return [(p, n) for p, n in schema_paths().items() if "enum" in n]


def object_paths() -> list[str]:
    return [""] + [p for p, n in schema_paths().items() if n.get("type") == "object"]


# --- document surgery ------------------------------------------------------------------------

def _parent_and_key(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    return node, leaf


def with_value(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    for p in path.split(".")[:-1]:   # an optional section the base document lacks (`live.parity`) is made empty
        if isinstance(node, dict) and p not in node:
            node[p] = {}
        node = node[p]
    parent, key = _parent_and_key(doc, path)
    parent[key] = value
    return doc


def without(doc: dict[str, Any], path: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    parent, key = _parent_and_key(doc, path)
    parent.pop(key, None)
    return doc


def dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def parent_path(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else "(root)"


# --- strategies ------------------------------------------------------------------------------

MUTATION_KINDS = ("missing_field", "wrong_type", "negative", "huge", "nan", "unknown_field", "unknown_enum",
                  "bad_model_dir", "bad_id", "bad_rate", "random_value", "huge_digits", "duplicate_key")
RAW_KINDS = ("not_mapping", "invalid_yaml", "empty", "binary", "deep_nesting", "yaml_tag", "random_text", "truncated")
# Kinds whose every input may happen to be valid (only the no-traceback contract applies).
MAYBE_VALID_KINDS = ("random_value", "truncated")


@st.composite
def mutated_case(draw, kinds: tuple[str, ...] = MUTATION_KINDS) -> FuzzInput:
    bases = base_documents()
    doc = draw(st.sampled_from(bases))
    kind = draw(st.sampled_from(kinds))
    if kind == "missing_field":
        path = draw(st.sampled_from([p for p in required_paths() if _present(doc, p)] + ["draft"]))
        if path == "draft" and doc["speculative"]["method"] not in ("dflash", "eagle3"):
            path = "target"
        return FuzzInput(kind, dump(without(doc, path)), True, "draft" if path == "draft" else parent_path(path))
    if kind == "wrong_type":
        path, node = draw(st.sampled_from(sorted(schema_paths().items())))
        return FuzzInput(kind, dump(with_value(doc, path, draw(wrong_type_value(node)))), True, path)
    if kind in ("negative", "huge", "nan"):
        path, node = draw(st.sampled_from(numeric_paths()))
        if kind == "negative":
            value = draw(st.one_of(st.integers(max_value=-1, min_value=-10**30),
                                   st.floats(max_value=-1e-9, allow_infinity=True, allow_nan=False)))
        elif kind == "huge":
            top = node.get("maximum", 0)
            value = draw(st.one_of(st.integers(min_value=int(top) + 1, max_value=10**300), st.just(math.inf)))
        else:
            value = math.nan
        return FuzzInput(kind, dump(with_value(doc, path, value)), True, path)
    if kind == "unknown_field":
        path = draw(st.sampled_from(object_paths()))
        known = set(schema_paths()[path]["properties"]) if path else set(load_schema("case")["properties"])
        name = draw(st.text(min_size=1, max_size=10).filter(lambda s: s not in known))
        target = doc if not path else _get(doc, path)
        mutated = copy.deepcopy(doc)
        (mutated if not path else _get(mutated, path))[name] = draw(st.integers(0, 9))
        return FuzzInput(kind, dump(mutated), target is not None, path or "(root)")
    if kind == "unknown_enum":
        path, node = draw(st.sampled_from(enum_paths()))
        value = draw(st.text(max_size=12).filter(lambda s: s not in node["enum"]))
        return FuzzInput(kind, dump(with_value(doc, path, value)), True, path)
    if kind == "bad_model_dir":
        path = draw(st.sampled_from(("target", "draft")))
        name = draw(st.sampled_from(FAULTY_MODEL_DIRS))
        ref = draw(st.sampled_from((f"./{name}", f"{name}/", f"./{name}/../{name}")))
        return FuzzInput(kind, dump(with_value(doc, path, ref)), True, path)
    if kind == "bad_id":
        value = draw(st.one_of(st.just(""), st.just("Upper-case"), st.just("a b"), st.just("-lead"),
                               st.just("x" * 121), st.text(max_size=8).filter(lambda s: not s.isascii())))
        return FuzzInput(kind, dump(with_value(doc, "id", value)), True, "id")
    if kind == "bad_rate":
        rates = [0.5, draw(st.one_of(st.floats(min_value=1.0, exclude_min=True, allow_nan=False),
                                     st.floats(max_value=0.0, exclude_max=True, allow_nan=False), st.just(math.nan)))]
        acc = {"mode": "synthetic", "acceptance_rates": rates}
        return FuzzInput(kind, dump(with_value(doc, "acceptance", acc)), True, "acceptance.acceptance_rates[1]")
    if kind == "huge_digits":
        path, _ = draw(st.sampled_from(numeric_paths()))
        text = dump(with_value(doc, path, 7)).decode()
        key = path.rsplit(".", 1)[-1]
        text = text.replace(f"{key}: 7", f"{key}: {'9' * draw(st.integers(4301, 6000))}", 1)
        return FuzzInput(kind, text.encode(), True, "(root)")
    if kind == "duplicate_key":
        key = draw(st.sampled_from(sorted(doc)))
        return FuzzInput(kind, dump(doc) + f"{key}: {draw(st.integers(0, 9))}\n".encode(), True, "(root)")
    # random_value: anything anywhere; may be valid (e.g. a new description), only the contract holds
    path, _ = draw(st.sampled_from(sorted(schema_paths().items())))
    return FuzzInput(kind, dump(with_value(doc, path, draw(json_values()))), False, None)


def _present(doc: dict[str, Any], path: str) -> bool:
    try:
        parent, key = _parent_and_key(doc, path)
    except (KeyError, TypeError):
        return False
    return isinstance(parent, dict) and key in parent


def _get(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for p in path.split("."):
        node = node.get(p) if isinstance(node, dict) else None
    return node


def json_values() -> st.SearchStrategy:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                        max_leaves=8)


@st.composite
def raw_file(draw, kinds: tuple[str, ...] = RAW_KINDS) -> FuzzInput:
    """Files that are not a case at all (or a valid one cut short)."""
    kind = draw(st.sampled_from(kinds))
    if kind == "not_mapping":
        value = draw(st.one_of(st.lists(json_values(), max_size=3), st.integers(), st.text(max_size=10),
                               st.booleans(), st.floats(allow_nan=False)))
        return FuzzInput(kind, dump(value), True, "(root)")
    if kind == "invalid_yaml":
        text = draw(st.sampled_from(("id: [1, 2", "a: b: c", "- a\nb: c", "key: 'unterminated", "{a: 1", "? |\n-",
                                     "id: x\n  bad: indent\n y: 1", "\t- tab", "@reserved", "a: *undefined")))
        return FuzzInput(kind, text.encode(), True, "(root)")
    if kind == "empty":
        return FuzzInput(kind, draw(st.sampled_from((b"", b"\n", b"   \n\n", b"# only a comment\n", b"---\n", b"~\n"))),
                         True, "(root)")
    if kind == "binary":
        return FuzzInput(kind, draw(st.binary(min_size=1, max_size=200)), True, "(root)")
    if kind == "deep_nesting":
        opener = draw(st.sampled_from(("[", "{a: ", "- ")))
        # NOTE: PyYAML scans flow "[" runs in O(depth x 1024) before it gives up; keep those short.
        depth = draw(st.integers(200, 1000 if opener == "[" else 30000))
        return FuzzInput(kind, (opener * depth).encode(), True, "(root)")
    if kind == "yaml_tag":
        tag = draw(st.sampled_from(("!!binary aGVsbG8=", "!!set {a, b}", "!!python/object:os.system [ls]",
                                    "!!timestamp 2020-01-01", "!custom 1", "2020-01-01")))
        text = dump(base_documents()[0]).decode().replace("id: ", f"id: {tag}\nx_was_id: ", 1)
        return FuzzInput(kind, text.encode(), True, None)
    if kind == "random_text":
        text = draw(st.text(max_size=200))
        return FuzzInput(kind, text.encode("utf-8", "surrogatepass"), True, None)
    # truncated: a valid file cut short; may still parse (cut in the trailing newline): contract only
    content = dump(draw(st.sampled_from(base_documents())))
    cut = draw(st.integers(0, len(content) - 1))
    return FuzzInput(kind, content[:cut], False, None)


def any_input() -> st.SearchStrategy:
    return st.one_of(mutated_case(), raw_file())


def input_of_kind(kind: str) -> st.SearchStrategy:
    return mutated_case((kind,)) if kind in MUTATION_KINDS else raw_file((kind,))
