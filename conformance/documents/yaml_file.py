"""Reading the YAML files a user hands the framework (cases, engine files, manifests), safely.

Contract: `read_yaml(path, what)` returns the parsed document, or raises `YamlFileError` with one
line `path: (root): why` for anything that is not a small, plain YAML file: not a regular file (a
FIFO, a device, a directory), larger than `MAX_YAML_BYTES`, not UTF-8, not valid YAML, a duplicate
key (PyYAML silently keeps the last one), or an alias (`*name`): aliases let a 1 KB file expand to
gigabytes, and no document of this framework needs one. It never raises anything else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent

from conformance.errors import ConformanceError

MAX_YAML_BYTES = 1 << 20


class YamlFileError(ConformanceError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases and duplicate keys."""

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not accepted",
                                              event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_text_checked(path: Path, what: str, max_bytes: int = MAX_YAML_BYTES) -> str:
    """The text of a small regular file, or `YamlFileError` naming why not."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise YamlFileError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    if not stat.S_ISREG(st.st_mode):
        raise YamlFileError([f"{path}: (root): not a regular file (a {what} must be a plain file)"])
    if st.st_size > max_bytes:
        raise YamlFileError([f"{path}: (root): {st.st_size} bytes, larger than the {max_bytes} bytes a {what} may be"])
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise YamlFileError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    if len(data) > max_bytes:
        raise YamlFileError([f"{path}: (root): larger than the {max_bytes} bytes a {what} may be"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError([f"{path}: (root): not UTF-8 text (byte {exc.start}): is this a {what}?"]) from None


def parse_yaml(text: str, path: Path | str) -> Any:
    try:
        return yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlFileError([f"{path}: (root): not valid YAML{where}: {problem}"]) from None
    except RecursionError:
        raise YamlFileError([f"{path}: (root): not valid YAML: nested too deeply"]) from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise YamlFileError([f"{path}: (root): not valid YAML: {exc}"]) from None


def read_yaml(path: Path | str, what: str = "YAML file") -> Any:
    path = Path(path)
    return parse_yaml(read_text_checked(path, what), path)
