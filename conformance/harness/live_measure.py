"""Serve one live case on one engine: the run observation both faces judge (`conformance run --live`
and `pytest suites/live`), so the two cannot measure differently.

Contract: `measure(engine, case, ...)` returns one schema-valid run observation, whatever the engine
does (`harness.live.run_live`): the case's ladder (`documents.live_spec`) served through the engine file's
`live:` section on the case's live device, with

    engine.name            the engine file's name (a manifest may name the server otherwise)
    device.hardware        the card, its driver and CUDA version, and the framework's torch
    throughput.plan_expected  the startup figures the engine's own plan of the case predicts (engines
                           under test with a `plan:` section; None otherwise): live.plan_matches_run
    provenance.environment {pack: the oracle pack the engine ran from (`engines.pack_provenance`: every
                           package's version, what was left out), host: the host's driver, CUDA and the
                           engine's torch (`harness.host_env`)}, and provenance.deviations, each deviation
                           from the oracle's defaults, when the engine ran from a pack (`pack_dir`)

`expected_startup_figures(plan_obs, case_spec)` maps a plan observation to the startup figure names
the shipped manifests read (vLLM's own definitions: kv_cache_tokens = int(max_concurrency x
max_model_len)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.documents.live_spec import live_spec
from conformance.engines.engine_file import EngineFile
from conformance.engines.roles import UNDER_TEST



def serves(engine: EngineFile, case: Case) -> bool:
    """Whether `engine` serves the live `case` (both faces ask this): engines with a `live:` section do;
    an oracle only on a GPU case (no oracle of this framework serves on a CPU, so a CPU case has no
    oracle figures)."""
    return bool(engine.live) and (engine.role != "oracle" or (case.spec.get("live") or {}).get("device", "cuda") == "cuda")


def expected_startup_figures(plan_obs: dict[str, Any], case_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """{figure: value} that a plan predicts an engine prints when it starts; None for a plan that failed."""
    if plan_obs.get("status") != "ok":
        return None
    budget, memory = plan_obs.get("budget") or {}, plan_obs.get("memory") or {}
    pool = memory.get("pool") or {}
    seats = memory.get("max_concurrency")
    max_model_len = (case_spec.get("scheduler") or {}).get("max_model_len")
    return {
        "kv_cache_tokens": int(seats * max_model_len) if seats is not None and max_model_len else None,
        "max_concurrency": round(seats, 2) if seats is not None else None,
        "max_num_scheduled_tokens": budget.get("max_num_scheduled_tokens"),
        "max_num_seqs": budget.get("max_num_seqs"),
        "max_active_seqs": budget.get("max_active_seqs"),
        "num_blocks": pool.get("num_blocks"),
        "block_size_tokens": pool.get("block_size_tokens"),
    }


def _own_plan(engine: EngineFile, case: Case, log_dir: Path | None) -> dict[str, Any] | None:
    from conformance.harness.plan_runner import plan_cases

    obs = plan_cases(engine, [case], log_dir=log_dir / "plan" if log_dir else None)[0]
    return expected_startup_figures(obs, case.spec)


def measure(engine: EngineFile, case: Case, overrides: Mapping[str, Any] | None = None, log_dir: Path | None = None,
            on_rung: Callable[[dict[str, Any]], None] = lambda r: None, pack_dir: Path | None = None) -> dict[str, Any]:
    from conformance.harness.hardware import describe_with_versions
    from conformance.harness.live import run_live
    from conformance.engines.manifest import manifest_from_engine_file

    spec = live_spec(case.spec)
    if spec is None:
        raise ValueError(f"case {case.id} has no `live:` section: it is not served live")
    if not engine.live:
        raise ValueError(f"{engine.path}: engine {engine.name} has no `live:` section: it cannot be served")
    manifest = manifest_from_engine_file(engine.live, engine.path, engine.name)
    values = {"device": spec.device, **dict(overrides or {})}
    environment = None
    if pack_dir:
        from conformance.engines.pack_provenance import pack_provenance
        from conformance.harness.host_env import deviations_as_found, host_environment

        environment = {"pack": pack_provenance(pack_dir), "host": host_environment(pack_dir, python="python3")}
    obs = run_live(manifest, case.to_json(), spec.loadgen_settings(), values, log_dir, on_rung=on_rung)
    obs["engine"]["name"] = engine.name
    obs["device"]["hardware"] = describe_with_versions(str(values["device"]))
    if environment is not None:
        obs["provenance"]["deviations"] = deviations_as_found(
            environment["pack"].pop("deviations"), environment["host"].get("host_packages", {}).get("found", {}))
        obs["provenance"]["environment"] = environment
    if obs.get("throughput") is not None:
        obs["throughput"]["plan_expected"] = (_own_plan(engine, case, log_dir)
                                              if engine.role == UNDER_TEST and engine.plan else None)
    return observation.validate(obs, f"live run of {engine.name} on {case.id}")
