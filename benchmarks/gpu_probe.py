"""Measurements beside the engine for benchmarks/gpu_runtime.py: device facts, NVML memory,
the two ceilings (copy bandwidth, bf16 matrix rate) and a decode step's floors.

Contract: every function returns plain numbers or dicts (JSON-ready); NVML figures are None
where NVML is absent; nothing here changes device settings.
"""

from __future__ import annotations

import os

import torch


def nvml_memory(device_index: int = 0) -> dict | None:
    """{device_used_bytes, process_used_bytes}: the device's used memory and this process's
    (None where NVML does not report per-process memory), or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        mine = None
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                    mine = int(proc.usedGpuMemory)
        except pynvml.NVMLError:
            pass
        return {"device_used_bytes": used, "process_used_bytes": mine}
    except Exception:  # NVML absent (CPU runs): reported as null
        return None


def hardware(device: str) -> tuple[str, dict]:
    """(device.hardware in words, the same facts as a dict)."""
    if not device.startswith("cuda"):
        return "cpu", {"device": "cpu", "torch": torch.__version__}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:
        pass
    capacity = torch.cuda.mem_get_info()[1]
    facts = {"name": torch.cuda.get_device_name(), "capacity_bytes": capacity, "driver": driver,
             "cuda": torch.version.cuda, "torch": torch.__version__, "num_sms": props.multi_processor_count}
    from conformance.harness.hardware import visible_device_note

    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    words = (f"one {facts['name']} ({capacity / 2**30:.1f} GiB), driver {driver}, CUDA {torch.version.cuda}, "
             f"torch {torch.__version__}{visible_device_note()}")
    return words, facts


def _median_ms(fn, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def ceilings(reps: int = 10) -> dict:
    """Device-to-device copy bandwidth (bytes read + written) and a bf16 8192^3 matrix rate,
    measured on random data after warm-up (median of `reps`)."""
    n = 1 << 30                                          # 2 GiB of bf16 per buffer
    src = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    copy_ms = _median_ms(lambda: dst.copy_(src), reps)
    del src, dst
    m = 8192
    a = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    mm_ms = _median_ms(lambda: a @ b, reps)
    del a, b
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": 2 * n * 2 / (copy_ms / 1e3), "bf16_matmul_flop_per_s": 2 * m ** 3 / (mm_ms / 1e3)}


def param_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def step_floors(engine, contexts: list[int], ceil: dict) -> dict:
    """The bytes and operations a decode step at these context lengths must at least take, and
    the times they need at the ceilings: weights read once, target + draft KV read once, every
    recurrent state read once and written k + 1 times (snapshots); matrix FLOPs of the target
    on c (k + 1) tokens, its LM head on those rows, the drafter on c (k + 1) query tokens."""
    k = engine.cfg.num_speculative_tokens
    runner, target, drafter = engine.runner, engine.target, engine.drafter
    weights = param_bytes(target) + (param_bytes(drafter) if drafter is not None else 0)
    kv_per_token = sum(2 * c.first[0, 0].numel() * c.first.element_size() for c in runner.kv.values())
    state = sum(c.first[0].numel() * c.first.element_size() + c.second[0].numel() * c.second.element_size()
                for c in runner.state.values())
    c = len(contexts)
    num_bytes = weights + sum(contexts) * kv_per_token + c * state * (1 + (k + 1))
    cfg = target.config
    head = cfg.vocab_size * cfg.hidden_size
    body = sum(p.numel() for p in target.parameters()) - head
    tokens = c * (k + 1)
    flops = 2 * body * tokens + 2 * head * tokens
    if drafter is not None:
        flops += 2 * sum(p.numel() for p in drafter.parameters()) * tokens + 2 * head * c * k
    memory_s = num_bytes / ceil["copy_bytes_per_s"]
    compute_s = flops / ceil["bf16_matmul_flop_per_s"]
    return {"bytes": num_bytes, "flops": flops, "memory_floor_s": memory_s, "compute_floor_s": compute_s,
            "floor_s": max(memory_s, compute_s)}
