"""Adapters: one per engine. Plan adapters run inside the engine's env via `conformance.harness.probe`;
`runner` starts them as subprocesses and turns every way they can fail into observations."""
