"""Engine processes get argv lists, never a shell string built from case data; servers bind
loopback unless told otherwise."""

from __future__ import annotations

import ast
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.documents.cases import find_case, load_case
from conformance.engines.manifest import case_values, load_manifest, render_argv, shipped_live_engines
from conformance.harness.plan_runner import plan_cases

SOURCE_DIRS = ("conformance", "engine_under_test")
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
               ("asyncio", "create_subprocess_shell")}
# Directory names a shell would run; each creates a file named pwned-* in the cwd if executed.
HOSTILE_NAMES = ("$(touch pwned-dollar)", "`touch pwned-backtick`", "x;touch pwned-semicolon;", "x|touch pwned-pipe",
                 "x && touch pwned-and", "{port} {model_dir}")


def _shell_uses(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in SHELL_CALLS:
            out.append(f"{path}:{node.lineno}: {f.value.id}.{f.attr}(...)")
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                out.append(f"{path}:{node.lineno}: shell={ast.unparse(kw.value)}")
    return out


def test_no_shell_in_the_framework_or_the_engine():
    files = [p for d in SOURCE_DIRS for p in sorted((paths.REPO_ROOT / d).rglob("*.py"))]
    assert len(files) > 20
    uses = [u for f in files for u in _shell_uses(f)]
    assert not uses, "processes must get argv lists:\n" + "\n".join(uses)


def hostile_case(tmp_path: Path) -> tuple[Path, Path]:
    """A case whose model dirs and file live under directory names full of shell syntax."""
    base = find_case("tiny-dflash-c4-k8")
    root = tmp_path
    for name in HOSTILE_NAMES:
        root = root / name
    target, draft = root / "target model", root / "draft;model"
    shutil.copytree(base.target_dir, target)
    shutil.copytree(base.draft_dir, draft)
    doc = copy.deepcopy(base.spec)
    doc.update(id="hostile-paths", target=str(target), draft=str(draft))
    case_file = root / "case $(touch pwned-file).yaml"
    case_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return case_file, root


def _pwned(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in d.rglob("pwned-*") if p.name.startswith("pwned-")]


@pytest.mark.parametrize("manifest", shipped_live_engines())
def test_manifest_argv_keeps_each_path_in_one_element(manifest, tmp_path):
    case_file, _ = hostile_case(tmp_path)
    case = load_case(case_file).to_json()
    m = load_manifest(manifest)
    # Where each oracle's executable lives only matters to a live run; rendering needs a value.
    values = case_values(case, port=8123, mapping_module=m.mapping_module,
                         overrides={"vllm": "/opt/vllm env/bin/vllm", "sglang_python": "/opt/sglang env/bin/python",
                                    "mem_fraction_static": 0.8})
    argv = render_argv(m.command, values)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    target = case["resolved"]["target_dir"]
    assert target in argv, f"the model dir must be one argv element, verbatim: {argv}"
    spliced = [a for a in argv if target in a and a != target and not a.startswith("{")]
    assert not spliced, f"the model dir was spliced into a longer argument: {spliced}"
    assert argv[argv.index("--host") + 1] == "127.0.0.1", f"{manifest}: servers bind loopback by default"


def test_hostile_case_paths_are_never_executed(tmp_path):
    case_file, root = hostile_case(tmp_path)
    logs = tmp_path / "logs $(touch pwned-logs)"
    got = plan_cases("reference", [load_case(case_file)], log_dir=logs)
    assert got[0]["status"] == "ok", got[0]["message"]
    proc = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--case", str(case_file)],
                          capture_output=True, text=True, cwd=str(root), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["case_id"] == "hostile-paths"
    assert _pwned(tmp_path, paths.REPO_ROOT / "conformance", Path.cwd()) == []
    assert not list(paths.REPO_ROOT.glob("pwned-*"))


def test_reference_server_binds_loopback_by_default():
    """Start the real server on a free port with no --host: its listening socket is 127.0.0.1."""
    tiny = find_case("tiny-dflash-c4-k8").target_dir
    argv = [sys.executable, "-m", "engine_under_test.serve", "--model", str(tiny), "--port", "0",
            "--max-model-len", "512", "--max-num-seqs", "2", "--kv-cache-memory-bytes", str(16 * 1024 * 1024)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(paths.REPO_ROOT))
    try:
        url, lines = None, []
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "serving:" in line and "url=" in line:
                url = line.split("url=", 1)[1].split()[0]
        assert url, "the server never said where it serves:\n" + "".join(lines[-20:])
        host, port = url.removeprefix("http://").rsplit(":", 1)
        assert host == "127.0.0.1", url
        assert _listening_addresses(int(port)) == {"127.0.0.1"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port`, from /proc/net/tcp{,6} (state 0A)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for row in open(table).read().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                out.add(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(addr) == 8 else addr)
    return out


def test_the_shell_scan_sees_a_shell(tmp_path):
    """The scan above can fail: it finds each form of shell use in a sample."""
    sample = tmp_path / "sample.py"
    sample.write_text("import os, subprocess\nsubprocess.run('ls', shell=True)\nos.system('ls')\n"
                      "subprocess.Popen(['ls'], shell=False)\nsubprocess.call(cmd, shell=flag)\n")
    found = _shell_uses(sample)
    assert [u.split(": ", 1)[1] for u in found] == ["shell=True", "os.system(...)", "shell=flag"]
