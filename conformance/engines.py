"""The engines the framework knows, and how to start each one's adapter.

An engine's plan adapter is a module run inside the engine's own environment by
`python -m conformance.probe`. Its contract (the in-env adapter contract):

    ENGINE: str                       # engine name as observations carry it
    def engine_version() -> str       # read from the installed package, never hard-coded
    def plan(case: dict) -> dict      # a full observation: status ok, or refused with the
                                      # engine's own message; raise for anything unexpected
    def plan_setup() -> None          # optional: once per process, before the first plan

`case` is `Case.to_json()`: the validated spec plus `resolved` model dirs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import UnknownEngineError


@dataclass(frozen=True)
class EngineSpec:
    name: str
    kind: str                              # "oracle" (own pinned venv) | "reference" (project env)
    plan_module: str | None                # in-env adapter module for plan mode
    version_pin: str | None = None         # oracle: the pinned release
    pip_requirements: tuple[str, ...] = () # oracle: what its venv installs (exact pins)
    max_cases_per_process: int | None = None  # None: one process plans every case
    startup_timeout_s: float = 180.0       # import + first config
    per_case_timeout_s: float = 180.0
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        if self.kind == "reference":
            return Path(sys.executable)
        from conformance.envs import oracle_env

        return oracle_env(self).python


# What the probe needs inside an oracle venv (jsonschema validates in the engine's process);
# installed at these pins only where the oracle did not bring them already.
PROBE_REQUIREMENTS = ("jsonschema==4.26.0", "pyyaml==6.0.4")

ENGINES: dict[str, EngineSpec] = {
    "reference": EngineSpec(
        name="reference", kind="reference", plan_module="conformance.adapters.reference_plan",
        startup_timeout_s=120.0, per_case_timeout_s=120.0,
    ),
    "vllm": EngineSpec(
        name="vllm", kind="oracle", plan_module="conformance.adapters.vllm_plan",
        version_pin="0.33.0", pip_requirements=("vllm==0.33.0",),
        extra_env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "WARNING"},
    ),
    "sglang": EngineSpec(
        name="sglang", kind="oracle", plan_module="conformance.adapters.sglang_plan",
        version_pin="0.5.23", pip_requirements=("sglang==0.5.23",),
    ),
}

ORACLES = tuple(n for n, s in ENGINES.items() if s.kind == "oracle")


def get_engine(name: str) -> EngineSpec:
    try:
        return ENGINES[name]
    except KeyError:
        raise UnknownEngineError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})") from None
