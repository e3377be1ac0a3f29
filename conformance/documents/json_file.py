"""Reading a JSON file a user points the framework at (a model directory's config.json), safely.

Contract: `read_json(path, what, max_bytes)` returns the parsed document, or raises `YamlFileError`
(a `ConformanceError`) with one line `path: (root): why` for anything that is not a small, plain
JSON file: not a regular file (a FIFO would block forever, a symlink to /dev/zero would read until
memory runs out), larger than `max_bytes`, not UTF-8, not valid JSON, nested deeper than
`MAX_DEPTH`, or an integer past Python's digit limit. The size is checked before reading and the
read itself stops at `max_bytes + 1`. It never raises anything else. `vocab_size(model_dir)` is the
one reader of a model directory's vocabulary (its config.json, or the `text_config` inside it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conformance.documents.yaml_file import YamlFileError, read_text_checked

MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 64


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _depth(text: str) -> int:
    """Deepest bracket nesting outside strings (cheap; json.loads would recurse that deep)."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        tok = m.group(0)
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth -= 1
    return deepest


def parse_json(text: str, path: Path | str) -> Any:
    if _depth(text) > MAX_DEPTH:
        raise YamlFileError([f"{path}: (root): nested deeper than {MAX_DEPTH} levels"])
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise YamlFileError([f"{path}: (root): not valid JSON: {exc.msg} (line {exc.lineno})"]) from None
    except RecursionError:
        raise YamlFileError([f"{path}: (root): not valid JSON: nested too deeply"]) from None
    except ValueError as exc:   # an integer past Python's digit limit
        raise YamlFileError([f"{path}: (root): not usable JSON: {exc}"]) from None


def read_json(path: Path | str, what: str = "JSON file", max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    path = Path(path)
    return parse_json(read_text_checked(path, what, max_bytes), path)


def vocab_size(model_dir: Path | str) -> int:
    """The vocabulary size a model directory's config.json gives (a multimodal config's `text_config`);
    raises `YamlFileError` as `read_json` does, KeyError where the config has none."""
    cfg = read_json(Path(model_dir) / "config.json", "model config (config.json)")
    return int(cfg.get("text_config", cfg)["vocab_size"])
