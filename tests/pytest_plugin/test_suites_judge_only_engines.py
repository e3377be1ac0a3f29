"""`pytest suites/ --engines X` collects the checks of the engines asked for and nothing else: every
item it would run is a suite test parametrized by engine (or the GPU nightly, which skips on a CPU); the
framework's own self-tests live under tests/ and run with `pytest tests/` (the live suite's options in
tests/pytest_plugin/test_live_options.py, where the old throughput suite's self-tests went when it folded into suites/live)."""

from __future__ import annotations

import subprocess
import sys

from conformance import paths


def test_suites_collect_only_engine_checks():
    run = subprocess.run([sys.executable, "-m", "pytest", "suites/", "--engines", "reference", "--cases", "tiny-dflash-c4-k8",
                          "--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "not gpu"],
                         cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    items = [line for line in run.stdout.splitlines() if "::" in line]
    assert items
    not_engine = [i for i in items if not i.endswith("reference-tiny-dflash-c4-k8]")]
    assert not_engine == []
