"""examples/c-port: a port whose dry-run planner is a C program (built by the test with the system cc),
planned through `plan.log` with human units and its own trace format. Its sound variant (vLLM's layout)
passes every seed case; with 16-token pages it fails as a layout difference naming vLLM's block and page
padding; with its draft store beside the pool and no `lists` rule for it, the memory checks name draft KV.
A refusal keeps the figures printed before the fatal line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conformance import paths
from conformance.checks.goldens import find_golden
from conformance.documents.cases import load_all
from conformance.run.rundir import load_report, resolve_run_dir

PORT = paths.REPO_ROOT / "examples" / "c-port"
SOUND, PAGES16, OUTSIDE = (PORT / f for f in ("engine.yaml", "engine-pages-16.yaml", "engine-draft-outside.yaml"))
SEEDS = sorted(c.id for c in load_all() if "seed" in c.spec.get("tags", []))

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no system C compiler (cc) to build the port")


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    """The port built from its sources with the system cc, as run.sh builds it."""
    out = tmp_path_factory.mktemp("c-port") / "planner"
    subprocess.run(["cc", "-O2", "-std=c99", "-Wall", "-Werror", "-o", str(out), str(PORT / "planner.c"),
                    str(PORT / "trace.c")], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def verdicts(planner, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", f"{SOUND},{PAGES16},{OUTSIDE}",
                          "--cases", *SEEDS, "--out", str(out)], capture_output=True, text=True,
                         cwd=str(paths.REPO_ROOT), timeout=1200)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]   # the defective variants fail
    return load_report(resolve_run_dir(out / "latest")).verdicts


def test_the_port_prints_its_plan_in_human_units_and_its_trace_in_its_own_format(planner):
    models = paths.MODELS_DIR
    out = subprocess.run([str(planner), "--target", str(models / "qwen35-27b-shaped"), "--draft",
                          str(models / "qwen35-27b-dflash-shaped"), "--method", "dflash", "--k", "8",
                          "--max-num-seqs", "32", "--max-model-len", "8192", "--max-num-batched-tokens", "8192",
                          "--kv-cache-bytes", "85899345920", "--requests", "32", "--prompt-tokens", "512",
                          "--output-tokens", "64", "--accepted", "3", "--async", "true", "--defects", "none"],
                         capture_output=True, text=True, check=True).stdout
    assert "bound 80.000 GiB" in out and "attention 520.000 MiB" in out and "5,041 blocks" in out, out
    assert "[sched] step 0: +8,192 tok over 16 req (0 drafts), evicted 0" in out, out
    assert not any(tok.isdigit() and len(tok) > 6 for tok in out.replace(",", " ").split()), out  # no raw byte counts


def test_the_sound_port_passes_every_seed_case(verdicts):
    mine = [v for v in verdicts if v.engine == "c-port"]
    assert {v.case_id for v in mine} == set(SEEDS)
    assert not [v for v in mine if v.outcome == "fail"], [v for v in mine if v.outcome == "fail"]
    passed = {(v.check, v.case_id) for v in mine if v.outcome == "pass"}
    assert {("trace.equals_vllm", c) for c in SEEDS} <= passed
    assert {("memory.seats_equal_vllm", c) for c in SEEDS} <= passed
    assert ("memory.unified_pool_seats", "seed-unified-pool-c32-k8") in passed
    assert ("memory.explains_short_seats", "seed-unified-pool-c32-k8-small") in passed


def test_sixteen_token_pages_fail_as_a_layout_difference_naming_vllms_block_and_page_padding(verdicts):
    vllm = find_golden("memory", "vllm", "seed-unified-pool-c32-k8")
    block = vllm["memory"]["pool"]["block_size_tokens"]
    padded = next(o["value"][-1] for o in vllm["provenance"]["overrides"] if "mamba_page_size_padded" in o["name"])
    bad = {v.check: v for v in verdicts
           if v.engine == "c-port-pages-16" and v.case_id == "seed-unified-pool-c32-k8" and v.outcome == "fail"}
    assert set(bad) == {"memory.seats_equal_vllm", "memory.per_sequence_equals_vllm"}, bad
    for v in bad.values():
        assert "layout difference, nothing uncounted" in v.message, v.message
        assert f"vLLM's is {block:,}" in v.message and f"pads the Mamba page to {padded:,} B" in v.message, v.message
        assert "not counted in the seat count" not in v.message


def test_a_draft_store_beside_the_pool_with_no_lists_rule_fails_a_memory_check_naming_draft_kv(verdicts):
    bad = [v for v in verdicts if v.engine == "c-port-draft-outside-bound" and v.outcome == "fail"]
    for check in ("memory.inside_bound", "memory.ledger_holds_seats", "memory.draft_kv_scaling"):
        named = [v for v in bad if v.check == check]
        assert named and all("draft KV" in v.message for v in named), (check, named)


def test_a_refusal_keeps_the_figures_printed_before_the_fatal_line(planner):
    out = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", str(SOUND), "--case",
                          "impossible-k-past-drafter-block"], capture_output=True, text=True,
                         cwd=str(paths.REPO_ROOT), timeout=300)
    assert out.returncode == 0, out.stderr
    obs = json.loads(out.stdout)
    assert obs["status"] == "refused" and "does not fit the DFlash drafter's block" in obs["message"]
    assert obs["budget"]["max_num_scheduled_tokens"] == 512 and obs["budget"]["lookahead_tokens"] == 17
