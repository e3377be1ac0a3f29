"""What a live engine really does, measured from outside while its ladder runs.

Contract: `LiveSampler(pid, metrics_url, running_metric, device=...)` samples, every `interval_s` on a
thread of its own, the device memory of the engine's whole process tree from NVML (every GPU; the CUDA
context included: NVML's per-process figure; an engine served on the CPU: the resident memory of the
tree against the host's total) and the engine's running-requests gauge from its
/metrics (when the manifest names one). `mark(label)` tags the samples that follow ("idle", then
one label per rung); `summary()` returns, per label, the peak device bytes and the most requests
running, plus the device's total memory (NVML's, and the CUDA runtime's: NVML's less what the driver
reserves) and how the figures were measured ("nvml", or why not).
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


def _cuda_runtime_total(nv, handles: list) -> int | None:
    """The device memory the CUDA runtime reports as total (`cudaMemGetInfo`, `torch.cuda.mem_get_info()[1]`,
    what vLLM multiplies gpu_memory_utilization by): NVML's total less what the driver reserves (NVML's
    v2 memory info), read without creating a CUDA context in this process. None where NVML has no v2."""
    try:
        total = 0
        for h in handles:
            info = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            total += int(info.total) - int(info.reserved)
        return total or None
    except Exception:  # noqa: BLE001 - an older NVML: the bound falls back to NVML's total, said so
        return None


class _Nvml:
    def __init__(self) -> None:
        self.ok, self.note, self.total_bytes, self.cuda_total_bytes = False, "", None, None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.total_bytes = sum(pynvml.nvmlDeviceGetMemoryInfo(h).total for h in self.handles) or None
            self.cuda_total_bytes = _cuda_runtime_total(pynvml, self.handles)
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


class _HostMemory:
    """An engine served on the CPU: its device is the host, so its footprint is the resident memory (VmRSS)
    of its process tree and the total is the host's MemTotal (/proc). The CUDA runtime total is the same."""

    def __init__(self) -> None:
        self.ok, self.note, self.total_bytes = False, "", None
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemTotal:"):
                        self.total_bytes = int(line.split()[1]) * 1024
            self.ok = self.total_bytes is not None
            self.note = "host: VmRSS of the process tree (an engine served on the CPU)"
        except (OSError, ValueError) as exc:
            self.note = f"host memory not measured: {exc}"
        self.cuda_total_bytes = self.total_bytes

    def used_bytes(self, pids: set[int]) -> int | None:
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except (OSError, ValueError):
                continue   # the process ended between the listing and the read
        return total


class LiveSampler(threading.Thread):
    def __init__(self, pid: int, metrics_url: str | None, running_metric: str | None, interval_s: float = 0.1,
                 device: str = "cuda"):
        super().__init__(daemon=True, name="live-sampler")
        self.pid, self.metrics_url, self.running_metric, self.interval_s = pid, metrics_url, running_metric, interval_s
        self.label = "idle"
        self.samples: list[tuple[str, int | None, int | None]] = []
        self.notes: list[str] = []
        self._stop_event = threading.Event()
        self._memory = _HostMemory() if device == "cpu" else _Nvml()
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
                used = self._memory.used_bytes(process_tree(self.pid))
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
        return {"source": self._memory.note, "device_total_bytes": self._memory.total_bytes,
                "cuda_total_bytes": self._memory.cuda_total_bytes, "by_phase": by,
                "notes": self.notes, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
