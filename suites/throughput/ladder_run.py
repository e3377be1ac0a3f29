"""The throughput ladder run, shared by the GPU suite and its CPU smoke test.

Contract:
- `plan_from_env(environ)` returns the `ThroughputPlan` to run: preset `2b` (one GPU; the
  default) or `tiny` (tiny shapes on the CPU: the same code paths in seconds), chosen by
  DFLASH_THROUGHPUT_SHAPES; DFLASH_THROUGHPUT_LADDER / DFLASH_THROUGHPUT_HF_LADDER ("1,8,32")
  replace the preset's ladders. A bad value raises ValueError naming the variable.
- `run_throughput(plan, results_dir, work_dir)` writes seeded random checkpoints under
  `work_dir`, runs the reference engine's ladder through the process adapter, then the
  transformers peer on the same weights, and writes into `results_dir`:
  throughput-reference.json, throughput-transformers.json (schema-valid run observations),
  throughput-ratios.json and the server's log, each with local paths written as
  `<checkpoints>`, `<results>`, `<repo>`, `<cache>` and `<python>` (`scrub`). It returns the
  written (reference, transformers, ratios).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from conformance import observation, paths
from conformance.harness.hardware import describe_with_versions
from conformance.harness.manifest import Manifest, manifest_from_engine_file
from conformance.harness.live import run_live
from conformance.cases import load_case
from conformance.loadgen import LoadgenSettings, Workload
from conformance.loadgen.compare import throughput_ratios

SHAPES_ENV, LADDER_ENV = "DFLASH_THROUGHPUT_SHAPES", "DFLASH_THROUGHPUT_LADDER"
HF_LADDER_ENV = "DFLASH_THROUGHPUT_HF_LADDER"
K, MEAN_ACCEPTANCE_LENGTH = 8, 4.0
RESULT_FILES = ("throughput-reference.json", "throughput-transformers.json", "throughput-ratios.json")
# An absolute path of the machine that ran the suite, left in a result after `scrub`.
LOCAL_PATH_RE = re.compile(r"(?<![\w<>.-])/(?:tmp|root|home|opt|work|usr|var|proc|mnt|srv)(?:/|\b)")


@dataclass(frozen=True)
class ThroughputPlan:
    name: str
    target_shape: str
    draft_shape: str
    device: str                          # cuda | cpu
    concurrencies: tuple[int, ...]       # the reference engine's ladder
    hf_concurrencies: tuple[int, ...]    # the transformers peer's batches
    prompt_tokens: int
    output_tokens: int
    hf_output_tokens: int                # transformers' Qwen3_5 generate is slow: fewer new tokens
    num_requests: int                    # measured requests per rung: max(num_requests, c)
    max_model_len: int
    max_num_batched_tokens: int
    memory: Mapping[str, Any]            # the case's memory section
    acceptance_tolerance: float          # per-rung mean acceptance length within MEAN +- this
    request_timeout_s: float
    max_rung_duration_s: float
    hf_max_total_s: float                # the peer stops (error) once its rungs took longer than this
    num_repeats: int = 1                 # measured waves per rung, after the warm-up wave

    @property
    def case_id(self) -> str:
        return f"throughput-{self.name}-k{K}-synthetic{MEAN_ACCEPTANCE_LENGTH:g}"


PRESETS: dict[str, ThroughputPlan] = {
    "2b": ThroughputPlan("2b", "qwen35-2b-shaped", "qwen35-2b-dflash-shaped", "cuda", (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16, 32),
                         prompt_tokens=512, output_tokens=128, hf_output_tokens=16, num_requests=4,
                         max_model_len=4096, max_num_batched_tokens=8192, memory={"gpu_memory_utilization": 0.85},
                         acceptance_tolerance=0.25, request_timeout_s=120, max_rung_duration_s=120,
                         hf_max_total_s=200, num_repeats=2),
    "tiny": ThroughputPlan("tiny", "tiny-hybrid", "tiny-dflash", "cpu", (1, 2), (1, 2),
                           prompt_tokens=16, output_tokens=12, hf_output_tokens=8, num_requests=2,
                           max_model_len=512, max_num_batched_tokens=256, memory={"kv_cache_bytes": 64 * 2**20},
                           acceptance_tolerance=0.5, request_timeout_s=60, max_rung_duration_s=60, hf_max_total_s=60,
                           num_repeats=2),
}


def _ladder(name: str, text: str) -> tuple[int, ...]:
    try:
        ladder = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        ladder = ()
    if not ladder or min(ladder) < 1 or list(ladder) != sorted(set(ladder)):
        raise ValueError(f"{name}={text!r}: give increasing concurrencies >= 1 separated by commas, e.g. 1,8,32")
    return ladder


def plan_from_env(environ: Mapping[str, str]) -> ThroughputPlan:
    preset = environ.get(SHAPES_ENV) or "2b"
    if preset not in PRESETS:
        raise ValueError(f"{SHAPES_ENV}={preset!r}: known presets are {', '.join(sorted(PRESETS))}")
    plan = PRESETS[preset]
    if environ.get(LADDER_ENV):
        plan = dataclasses.replace(plan, concurrencies=_ladder(LADDER_ENV, environ[LADDER_ENV]))
    if environ.get(HF_LADDER_ENV):
        plan = dataclasses.replace(plan, hf_concurrencies=_ladder(HF_LADDER_ENV, environ[HF_LADDER_ENV]))
    return plan


def hardware(device: str) -> str:
    """`describe_with_versions(device)`: the card, driver, CUDA and torch versions."""
    return describe_with_versions(device)


def scrub(value: Any, replacements: list[tuple[str, str]]) -> Any:
    """`value` with each local path written as its placeholder (longest paths first)."""
    if isinstance(value, dict):
        return {k: scrub(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, replacements) for v in value]
    if isinstance(value, str):
        for local, name in sorted(replacements, key=lambda r: -len(r[0])):
            value = value.replace(local, name)
    return value


def local_paths(text: str) -> list[str]:
    """The lines of `text` that still name an absolute path of the machine (empty when portable)."""
    return [line.strip() for line in text.splitlines() if LOCAL_PATH_RE.search(line)]


def _replacements(checkpoints: Path, results_dir: Path) -> list[tuple[str, str]]:
    out = [(str(checkpoints), "<checkpoints>"), (str(checkpoints.resolve()), "<checkpoints>"),
           (str(results_dir), "<results>"), (str(results_dir.resolve()), "<results>"),
           (str(paths.REPO_ROOT), "<repo>"), (str(paths.cache_dir()), "<cache>"),
           (sys.executable, "<python>"), (str(Path(sys.executable).resolve()), "<python>")]
    return [(a, b) for a, b in out if len(a) > 1]


def _sibling(name: str) -> Any:
    key = f"_throughput_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def write_checkpoints(plan: ThroughputPlan, root: Path) -> tuple[Path, Path]:
    import torch

    from engine_under_test.model.weights import write_random_checkpoint

    models = paths.MODELS_DIR
    target = write_random_checkpoint(models / plan.target_shape, root / "target", seed=0, dtype=torch.bfloat16)
    draft = write_random_checkpoint(models / plan.draft_shape, root / "draft", seed=1, dtype=torch.bfloat16)
    return target, draft


def case_json(plan: ThroughputPlan, work_dir: Path, target: Path, draft: Path) -> dict[str, Any]:
    doc = {"id": plan.case_id, "target": str(target), "draft": str(draft),
           "speculative": {"method": "dflash", "num_speculative_tokens": K},
           "scheduler": {"max_num_seqs": max(plan.concurrencies), "max_model_len": plan.max_model_len,
                         "max_num_batched_tokens": plan.max_num_batched_tokens},
           "memory": dict(plan.memory), "cache": {"prefix_caching": False, "ssm_dtype": "float32"}, "device": "h200",
           "workload": {"num_requests": plan.num_requests, "prompt_tokens": plan.prompt_tokens,
                        "output_tokens": plan.output_tokens, "seed": 0},
           "acceptance": {"mode": "synthetic", "mean_acceptance_length": MEAN_ACCEPTANCE_LENGTH}}
    (work_dir / "case.yaml").write_text(yaml.safe_dump(doc))
    return load_case(work_dir / "case.yaml").to_json()


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def engine_under_test(environ: Mapping[str, str] | None = None) -> Manifest:
    """How the engine under test serves: `DFLASH_THROUGHPUT_ENGINE` (a shipped engine's name or an engine
    file), else the first shipped engine whose role is under-test and that has a `live:` section. The
    peer runs the same seeded weights through transformers, so the engine must load them."""
    from conformance.errors import ConformanceError
    from conformance.harness.registry import default_engines, resolve_engine

    ref = (environ if environ is not None else os.environ).get("DFLASH_THROUGHPUT_ENGINE")
    engines = [resolve_engine(ref)] if ref else [e for e in default_engines() if e.role == "under-test" and e.live]
    if not engines or not engines[0].live:
        raise ConformanceError(f"throughput suite: no engine under test with a `live:` section ({ref or 'shipped'})")
    e = engines[0]
    return manifest_from_engine_file(e.live, e.path, e.name)


def run_throughput(plan: ThroughputPlan, results_dir: Path, work_dir: Path) -> tuple[dict, dict, dict]:
    results_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = work_dir / "ckpt"
    t0 = time.perf_counter()
    target, draft = write_checkpoints(plan, checkpoints)
    print(f"checkpoints ({plan.target_shape}, {plan.draft_shape}) written in {time.perf_counter() - t0:.1f} s",
          flush=True)
    case = case_json(plan, work_dir, target, draft)
    hw = hardware(plan.device)
    replacements = _replacements(checkpoints, results_dir)
    settings = LoadgenSettings(concurrencies=plan.concurrencies, num_warmup_waves=1, min_requests_per_slot=1,
                               num_repeats=plan.num_repeats,
                               request_timeout_s=plan.request_timeout_s, max_rung_duration_s=plan.max_rung_duration_s)
    ref = run_live(engine_under_test(), case, settings, {"device": plan.device}, log_dir=results_dir,
                   on_rung=lambda r: print(f"reference c={r['concurrency']} {r['status']} "
                                           f"{r.get('output_tok_per_s')} tok/s", flush=True))
    ref["device"]["hardware"] = hw
    ref = scrub(ref, replacements)
    _write(results_dir / RESULT_FILES[0], observation.validate(ref, "throughput suite (reference)"))
    for log in results_dir.glob("reference-*.log"):
        log.write_text(scrub(log.read_text(errors="replace"), replacements))

    w = Workload.from_case(case, _vocab_size(target))
    w = Workload(w.num_requests, w.prompt_tokens, plan.hf_output_tokens, w.seed, w.vocab_size)
    hf = _sibling("hf_peer").hf_ladder(case["id"], case["device"], str(target), w, plan.hf_concurrencies,
                                       plan.device, plan.hf_max_total_s,
                                       on_rung=lambda r: print(f"transformers c={r['concurrency']} {r['status']} "
                                                               f"{r.get('output_tok_per_s')} tok/s", flush=True))
    hf["device"]["hardware"] = hw
    hf = scrub(hf, replacements)
    _write(results_dir / RESULT_FILES[1], observation.validate(hf, "throughput suite (transformers)"))
    ratios = ratios_doc(ref, hf)
    _write(results_dir / RESULT_FILES[2], ratios)
    print("reference / transformers output tok/s:", ratios, flush=True)
    return ref, hf, ratios


def _tpot_ms(obs: dict) -> dict[int, float]:
    return {r["concurrency"]: r["tpot_ms"]["median"] for r in (obs.get("throughput") or {}).get("rungs") or []
            if r["status"] == "ok" and r.get("tpot_ms")}


def ratios_doc(ref: dict, hf: dict) -> dict[str, dict[str, float | None]]:
    """Same-run ratios at each concurrency both measured: output tok/s (reference / transformers; the two
    output lengths differ, see README) and median TPOT (transformers / reference: per-token decode time)."""
    a, b = _tpot_ms(ref), _tpot_ms(hf)
    return {"output_tok_per_s_reference_over_transformers": {str(c): r for c, r in throughput_ratios(ref, hf).items()},
            "tpot_transformers_over_reference": {str(c): b[c] / a[c] for c in sorted(set(a) & set(b)) if a[c] > 0}}


def _vocab_size(target: Path) -> int:
    cfg = json.loads((target / "config.json").read_text())
    return int(cfg.get("text_config", cfg)["vocab_size"])
