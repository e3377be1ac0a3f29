"""Helpers: run tests/adapters/live_argv_check.py in an oracle venv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conformance import paths

CHECK = Path(__file__).with_name("live_argv_check.py")


def oracle_python(engine: str, version: str) -> Path:
    py = paths.oracle_envs_dir() / f"{engine}-{version}" / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no {engine} {version} oracle venv at {py}")
    return py


def parse_in_oracle(engine: str, version: str, argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_TARGET_DEVICE="cpu", HOME=str(paths.oracle_home_dir(engine, version)))
    out = subprocess.run([str(oracle_python(engine, version)), str(CHECK), engine, json.dumps(argv)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=str(paths.REPO_ROOT))
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"parser failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])
