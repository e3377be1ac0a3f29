"""Adapters: one in-env plan adapter per engine that plans through a Python module (reference/, vllm/,
sglang/), run inside the engine's environment by `conformance.harness.probe`; `conformance.harness.plan_runner`
starts them as subprocesses and turns every way they can fail into observations."""
