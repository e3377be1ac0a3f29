"""Small hand-written observations: renderer input for the report tests (not goldens, not oracle output)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.documents import observation
from conformance.report.model import CaseEntry, EngineEntry, RunReport

MIB = 1 << 20


def make_obs(engine: str, case_id: str, *, status: str = "ok", message: str | None = None,
             bound_bytes: int = 256 * MIB, ledger: dict[str, int] | None = None, outside: tuple[str, ...] = (),
             steps: list[int] | None = None, max_num_scheduled_tokens: int = 256, max_concurrency: float = 8.0,
             rungs: list[tuple[int, float]] | None = None, version: str = "1.0") -> dict[str, Any]:
    if status != "ok":
        obs = observation.failed(case_id, engine, version, "plan", "h200", status, message or f"{engine} {status}")
        return observation.validate(obs, "test")
    obs = observation.new(case_id, engine, version, "plan", "h200")
    obs["budget"] = {"max_num_batched_tokens": 256, "max_num_scheduled_tokens": max_num_scheduled_tokens,
                     "drafting_slots_per_request": 0, "lookahead_tokens": 9, "max_num_seqs": 8, "max_active_seqs": 8}
    obs["memory"] = {
        "bound_bytes": bound_bytes,
        "ledger_bytes": ledger or {"attention_kv": 60 * MIB, "recurrent_state": 80 * MIB, "draft_kv": 60 * MIB},
        "outside_bound": list(outside),
        "per_sequence": {"attention_kv_bytes": 2 * MIB, "recurrent_state_bytes": 3 * MIB, "draft_kv_bytes": 2 * MIB,
                         "state_slots": 9},
        "pool": {"num_blocks": 100, "block_size_tokens": 96, "page_size_bytes": 49152, "unified": True},
        "max_concurrency": max_concurrency,
    }
    steps = steps if steps is not None else [256, 256, 120, 40, 40, 8]
    obs["trace"] = {"steps": [{"total_num_scheduled_tokens": t, "num_scheduled_requests": 4, "num_spec_tokens": 0,
                               "num_preempted": 0} for t in steps]}
    if rungs:
        obs["mode"] = "run"
        obs["throughput"] = {"rungs": [{"concurrency": c, "status": "ok", "output_tok_per_s": t} for c, t in rungs]}
    obs["provenance"]["functions"] = [f"{engine}.plan"]
    return observation.validate(obs, "test")


def make_report(observations: list[dict[str, Any]], verdicts=(), engines: list[str] | None = None,
                interrupted: bool = False, case_ids: list[str] | None = None) -> RunReport:
    names = engines or list(dict.fromkeys(o["engine"]["name"] for o in observations))
    cids = case_ids or list(dict.fromkeys(o["case_id"] for o in observations))
    return RunReport(
        run_id="test-run", title="DFlash parity report",
        engines=tuple(EngineEntry(n, "1.0", "planned") for n in names),
        cases=tuple(CaseEntry(c, {"id": c, "description": f"case {c}", "tags": ["test"],
                                  "memory": {"kv_cache_bytes": 256 * MIB}}) for c in cids),
        observations={(o["case_id"], o["engine"]["name"]): o for o in observations},
        verdicts=tuple(verdicts), interrupted=interrupted,
    )


@pytest.fixture
def three_engine_report() -> RunReport:
    """Two cases on three engines: the reference within its bound, 'vllm' agreeing, 'sglang' keeping
    its draft KV outside the bound with a different trace; a refusal carrying markup."""
    obs = [
        make_obs("reference", "case-a", rungs=[(1, 100.0), (2, 180.0), (4, 300.0)]),
        make_obs("vllm", "case-a", rungs=[(1, 95.0), (2, 170.0), (4, 310.0)]),
        make_obs("sglang", "case-a", ledger={"attention_kv": 120 * MIB, "recurrent_state": 80 * MIB,
                                             "draft_kv": 90 * MIB},
                 outside=("draft_kv",), steps=[200, 200, 200, 64, 64, 64, 16], max_concurrency=6.0),
        make_obs("reference", "case-b", status="refused", message="<script>alert(1)</script> no room"),
        make_obs("vllm", "case-b", status="refused", message="not enough KV cache for 1 sequence"),
        make_obs("sglang", "case-b", status="error", message="adapter crashed & <b>burned</b>"),
    ]
    return make_report(obs)


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None"):
        self.tag, self.attrs, self.parent, self.children, self.text_parts = tag, attrs, parent, [], []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(self.text_parts) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list["Node"]:
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}


def parse_html(text: str) -> Node:
    """A small DOM of a page (stdlib html.parser): enough to count elements and read their text."""
    from html.parser import HTMLParser

    root = Node("#root", {}, None)

    class Builder(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.cur = root

        def handle_starttag(self, tag, attrs):
            node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
            self.cur.children.append(node)
            if tag not in VOID:
                self.cur = node

        def handle_startendtag(self, tag, attrs):
            self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

        def handle_endtag(self, tag):
            n = self.cur
            while n is not None and n.tag != tag:
                n = n.parent
            if n is not None and n.parent is not None:
                self.cur = n.parent

        def handle_data(self, data):
            self.cur.text_parts.append(data)

    Builder().feed(text)
    return root


@pytest.fixture
def dom():
    """`dom(html_text)` -> the page's Node tree."""
    return parse_html


@pytest.fixture
def obs_factory():
    return make_obs


@pytest.fixture
def report_factory():
    return make_report


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


class Chromium:
    """Headless Chromium driven from the command line: the rendered DOM, and a screenshot."""

    def __init__(self, exe: str, profile_dir):
        self.exe, self.profile_dir = exe, profile_dir

    def _run(self, *args: str, timeout_s: float = 120.0):
        import subprocess

        return subprocess.run([self.exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile_dir}", *args],
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    def dump_dom(self, page) -> str:
        out = self._run("--dump-dom", page.resolve().as_uri())
        assert out.returncode == 0 and out.stdout.strip(), f"chromium --dump-dom failed: {out.stderr[-2000:]}"
        return out.stdout

    def screenshot(self, page, png, size: str = "1400,3000"):
        out = self._run(f"--screenshot={png}", f"--window-size={size}", page.resolve().as_uri())
        assert out.returncode == 0 and png.is_file() and png.stat().st_size > 0, \
            f"chromium --screenshot failed: {out.stderr[-2000:]}"
        return png


@pytest.fixture
def chromium(tmp_path_factory) -> Chromium:
    import shutil

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium is not installed (scripts/setup installs Debian's chromium package)")
    return Chromium(exe, tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture
def screenshot_dir(tmp_path):
    """Where screenshots go: CONFORMANCE_SCREENSHOT_DIR when set (to look at them), else tmp."""
    import os
    from pathlib import Path

    d = Path(os.environ.get("CONFORMANCE_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d
