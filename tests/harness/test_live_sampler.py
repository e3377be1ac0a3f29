"""harness.live_sampler on a real process tree and a real /metrics endpoint (no GPU: NVML absent or
without this process, the device figure is None and says why)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conformance.harness.live_sampler import LiveSampler, process_tree


def test_process_tree_finds_children_that_left_the_session():
    child = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; os.setsid(); "
                              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                              "print(p.pid, flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        tree = process_tree(os.getpid())
        assert {child.pid, grandchild} <= tree
    finally:
        child.kill()
        subprocess.run(["kill", str(grandchild)], check=False)


def test_sampler_reads_the_running_gauge_per_phase():
    from conformance.loadgen.stub_server import StubServer

    with StubServer() as srv:
        # the stub serves no running gauge: name one of its counters to read a number from /metrics
        s = LiveSampler(os.getpid(), f"{srv.base_url}/metrics", "stub:num_drafts_total", interval_s=0.05)
        s.start()
        assert s.wait_for_samples(2)
        s.mark("c=1")
        assert s.wait_for_samples(2)
        s.stop()
    summary = s.summary()
    assert set(summary["by_phase"]) == {"idle", "c=1"}
    assert summary["by_phase"]["c=1"]["max_running_requests"] == 0 and summary["by_phase"]["c=1"]["num_samples"] >= 2
    if summary["device_total_bytes"] is None:
        assert summary["source"].startswith("device memory not measured")
