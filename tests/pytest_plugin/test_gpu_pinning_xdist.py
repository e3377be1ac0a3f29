"""With `-m gpu -n 2`, each xdist worker sees exactly one GPU of its own (no GPU needed: the
pinning reads CUDA_VISIBLE_DEVICES, which the test sets as a host with two GPUs would)."""

from __future__ import annotations

import json

pytest_plugins = ["pytester"]


def test_two_workers_two_gpus(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    out_dir = pytester.path / "seen"
    out_dir.mkdir()
    pytester.makepyfile(test_pin=f"""
        import json, os, pytest

        @pytest.mark.gpu
        @pytest.mark.parametrize("i", range(6))
        def test_record(i):
            worker = os.environ["PYTEST_XDIST_WORKER"]
            with open({str(out_dir)!r} + f"/{{worker}}-{{i}}.json", "w") as fh:
                json.dump({{"worker": worker, "cuda": os.environ["CUDA_VISIBLE_DEVICES"]}}, fh)
    """)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: gpu\n")
    result = pytester.runpytest_subprocess("-m", "gpu", "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=6)
    seen = [json.loads(p.read_text()) for p in out_dir.iterdir()]
    by_worker = {}
    for s in seen:
        by_worker.setdefault(s["worker"], set()).add(s["cuda"])
    assert set(by_worker) == {"gw0", "gw1"}
    assert by_worker["gw0"] == {"6"} and by_worker["gw1"] == {"7"}


def test_three_workers_two_gpus_refused(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    pytester.makepyfile(test_pin="""
        import pytest

        @pytest.mark.gpu
        def test_x():
            pass
    """)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: gpu\n")
    result = pytester.runpytest_subprocess("-m", "gpu", "-n", "3", "-p", "xdist")
    assert result.ret != 0
    assert "only 2 GPU(s) visible" in result.stdout.str() + result.stderr.str()
