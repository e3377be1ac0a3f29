"""What a live engine really does, measured from outside while its ladder runs.

Contract: `LiveSampler(pid, metrics_url, running_metric)` samples, every `interval_s` on a thread of
its own, the device memory of the engine's whole process tree from NVML (every GPU; the CUDA
context included: NVML's per-process figure) and the engine's running-requests gauge from its
/metrics (when the manifest names one). `mark(label)` tags the samples that follow ("idle", then
one label per rung); `summary()` returns, per label, the peak device bytes and the most requests
running, plus the device's total memory and how the figures were measured ("nvml", or why not).
It never raises into the ladder and its thread survives any answer: a figure it cannot read (a
gauge of `1e999`, `NaN`, `-1`, `2.5`) is None with the reason in `notes`. `mark` and `stop` take
a sample themselves, so every label, however short, has at least one.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from typing import Any

import httpx

MAX_NOTES = 5


def process_tree(root_pid: int) -> set[int]:
    """`root_pid` and every descendant, from /proc (a child that called setsid still has its ppid)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


class _Nvml:
    def __init__(self) -> None:
        self.ok, self.note, self.total_bytes = False, "", None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.total_bytes = sum(pynvml.nvmlDeviceGetMemoryInfo(h).total for h in self.handles) or None
            self.ok = bool(self.handles)
            self.note = "nvml" if self.ok else "nvml: no device"
        except Exception as exc:  # no pynvml, no driver, no GPU: the figure is not measured
            self.note = f"device memory not measured: {type(exc).__name__}: {exc}"

    def used_bytes(self, pids: set[int]) -> int | None:
        if not self.ok:
            return None
        total = 0
        for h in self.handles:
            for p in self.nv.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid in pids and p.usedGpuMemory:
                    total += int(p.usedGpuMemory)
        return total


class LiveSampler(threading.Thread):
    def __init__(self, pid: int, metrics_url: str | None, running_metric: str | None, interval_s: float = 0.1):
        super().__init__(daemon=True, name="live-sampler")
        self.pid, self.metrics_url, self.running_metric, self.interval_s = pid, metrics_url, running_metric, interval_s
        self.label = "idle"
        self.samples: list[tuple[str, int | None, int | None]] = []
        self.notes: list[str] = []
        self._stop_event = threading.Event()
        self._nvml = _Nvml()
        if not running_metric:
            self.notes.append("running requests not measured: the manifest names no metrics.running_requests gauge")

    def mark(self, label: str) -> None:
        """Tag the samples that follow with `label`; one sample closes the previous label and one opens
        this one, so a rung shorter than `interval_s` still has a sample of its own."""
        self._sample_now()
        self.label = label
        self._sample_now()

    def _sample_now(self) -> None:
        if not self.is_alive() or self._stop_event.is_set():
            return
        with httpx.Client(trust_env=False) as client:
            self._take(client)

    def wait_for_samples(self, num_samples: int, timeout_s: float = 10.0) -> bool:
        """Block until `num_samples` samples of the current label exist (the idle footprint before any
        request, say); False if the timeout passed first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if sum(1 for label, _, _ in self.samples if label == self.label) >= num_samples:
                return True
            time.sleep(self.interval_s / 4)
        return False

    def _note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES and text not in self.notes:
            self.notes.append(text)

    def _running(self, client: httpx.Client) -> int | None:
        """The gauge's value as a count of requests; None (with a note) when it cannot be read as one."""
        if not (self.metrics_url and self.running_metric):
            return None
        try:
            text = client.get(self.metrics_url, timeout=2.0).text
        except httpx.HTTPError:
            return None
        m = re.search(rf"^{re.escape(self.running_metric)}(?:{{[^}}\n]{{0,4096}}}})?[ \t]+(\S{{1,64}})", text, re.MULTILINE)
        if not m:
            return None
        try:
            value = float(m.group(1))
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or value >= 2 ** 31 or not value.is_integer():
            self._note(f"{self.running_metric} read {m.group(1)[:40]!r}, not a count of requests: sample skipped")
            return None
        return int(value)

    def _take(self, client: httpx.Client) -> None:
        """One sample of the current label; whatever a sample meets is a note, never the thread's end."""
        try:
            try:
                used = self._nvml.used_bytes(process_tree(self.pid))
            except Exception as exc:  # a driver hiccup must not stop the ladder
                used = None
                self._note(f"nvml sample failed: {type(exc).__name__}: {exc}")
            self.samples.append((self.label, used, self._running(client)))
        except Exception as exc:  # noqa: BLE001  the sampler outlives any answer
            self._note(f"sample failed: {type(exc).__name__}: {str(exc)[:200]}")

    def run(self) -> None:
        with httpx.Client(trust_env=False) as client:
            while not self._stop_event.is_set():
                self._take(client)
                self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        """The last sample (the last rung's end), then the thread ends."""
        self._sample_now()
        self._stop_event.set()
        self.join(timeout=5)

    def summary(self) -> dict[str, Any]:
        by: dict[str, dict[str, Any]] = {}
        for label, used, running in self.samples:
            s = by.setdefault(label, {"peak_device_bytes": None, "max_running_requests": None, "num_samples": 0})
            s["num_samples"] += 1
            if used is not None:
                s["peak_device_bytes"] = max(used, s["peak_device_bytes"] or 0)
            if running is not None:
                s["max_running_requests"] = max(running, s["max_running_requests"] or 0)
        return {"source": self._nvml.note, "device_total_bytes": self._nvml.total_bytes, "by_phase": by,
                "notes": self.notes, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
