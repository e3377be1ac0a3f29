"""Memory verdicts on the outcome and the engine's own words, with vLLM's and SGLang's recorded documents:
a layout difference is told from an accounting one, SGLang's two pools carved from one bound seat 32, and a
DFlash plan that does not say where its draft KV lives passes no bound check."""

from __future__ import annotations

import copy

from conformance import paths
from conformance.checks.check_table import CHECKS, evaluate, oracle_document
from conformance.checks.goldens import find_golden
from conformance.checks.memory import inside_the_bound, per_sequence_equals_vllm, seats_equal_vllm
from conformance.checks.row import CheckInput
from conformance.documents.cases import find_case
from conformance.engines.engine_file import load_engine_file


def oracle(name: str, case_id: str) -> dict:
    doc, why = oracle_document(name, case_id, find_golden, lambda e, c: None)
    assert doc is not None, why
    return doc


def judged(check: str, obs: dict, case_id: str, partner: dict | None = None):
    """One check of the check table, as `conformance run` and the suites evaluate it (vLLM's goldens)."""
    spec = next(c for c in CHECKS if c.name == check)
    return evaluate(spec, obs, find_case(case_id).spec, find_golden, lambda e, c: None, partner)


def as_port(doc: dict, name: str = "my-port") -> dict:
    o = copy.deepcopy(doc)
    o["engine"] = {"name": name, "version": "0.1"}
    return o


def sixteen_token_pages(vllm: dict) -> dict:
    """vLLM's plan re-paged as a port that pages attention in 16-token blocks: no hybrid block, an
    unpadded state page, no group padding; every store still in the one pool."""
    port = as_port(vllm)
    mem = port["memory"]
    pool, ledger, per = mem["pool"], mem["ledger_bytes"], mem["per_sequence"]
    pool.update(block_size_tokens=16, page_size_bytes=pool["page_size_bytes"] - 4096)
    pool.pop("groups", None)
    ledger["attention_kv"] += ledger.pop("padding") + ledger.pop("unused")
    per["attention_kv_bytes"] -= 16 * 4096
    mem["max_concurrency"] = vllm["memory"]["max_concurrency"] * 1.2
    return port


def test_sixteen_token_pages_fail_as_a_layout_difference_named_with_vllms_figures_and_functions():
    vllm = oracle("vllm", "seed-unified-pool-c32-k8")
    spec = find_case("seed-unified-pool-c32-k8").spec
    port = sixteen_token_pages(vllm)
    block = vllm["memory"]["pool"]["block_size_tokens"]
    padded = next(o["value"][-1] for o in vllm["provenance"]["overrides"] if "mamba_page_size_padded" in o["name"])
    align = next(f for f in vllm["provenance"]["functions"] if f.endswith("_align_hybrid_block_size"))
    for v in (seats_equal_vllm(CheckInput(port, spec, vllm, "s")), per_sequence_equals_vllm(CheckInput(port, spec, vllm, "s"))):
        text = v.message + "\n".join(v.details)
        assert v.failed and "layout difference" in text, v
        assert "not counted" not in v.message and "accounting" not in text, v
        assert f"vLLM's is {block:,}" in text and f"pads the Mamba page to {padded:,} B" in text, text
        assert align in text and "get_global_kv_cache_groups" in text and "group padding" in text, text


def test_a_store_left_out_of_the_ledger_fails_as_an_accounting_difference():
    vllm = oracle("vllm", "seed-unified-pool-c32-k8")
    spec = find_case("seed-unified-pool-c32-k8").spec
    port = as_port(vllm)
    port["memory"]["ledger_bytes"]["draft_kv"] = None
    port["memory"]["per_sequence"]["draft_kv_bytes"] = 0
    port["memory"]["max_concurrency"] = vllm["memory"]["max_concurrency"] * 1.1
    v = seats_equal_vllm(CheckInput(port, spec, vllm, "s"))
    assert v.failed and "accounting difference" in v.message and "draft_kv" in v.message, v
    from conformance.checks.memory_facts import pool_differences

    assert pool_differences(port, vllm).kind == "accounting"


def test_sglangs_two_pools_carved_from_one_bound_seat_32_but_a_pool_beside_the_bound_fails():
    sglang = oracle("sglang", "seed-unified-pool-c32-k8")
    port = as_port(sglang, "sglang-like-port")
    assert port["memory"]["pool"]["unified"] is False
    v = judged("memory.unified_pool_seats", port, "seed-unified-pool-c32-k8")
    assert v.outcome == "pass", v
    beside = copy.deepcopy(port)
    beside["memory"]["outside_bound"] = sorted(set(beside["memory"]["outside_bound"]) | {"recurrent_state"})
    v = judged("memory.unified_pool_seats", beside, "seed-unified-pool-c32-k8")
    assert v.failed and "recurrent_state" in v.message and "beside the bound" in v.message, v


def _log_port_variant(tmp_path, drop: tuple[str, ...]):
    """examples/log-port's bug-1 variant whose engine file has no rule for `drop` (dotted field paths, or
    `lists`: no rule maps the 'NOT counted' line)."""
    import yaml

    doc = yaml.safe_load((paths.REPO_ROOT / "examples/log-port/engine-draft-outside.yaml").read_text())
    for what in drop:
        del (doc["plan"]["log"] if what == "lists" else doc["plan"]["log"]["fields"])[what]
    doc["plan"]["log"]["argv"][0] = str(paths.REPO_ROOT / "examples/log-port/port.sh")
    f = tmp_path / "variant.yaml"
    f.write_text(yaml.safe_dump(doc))
    return load_engine_file(f)


def _planned_pair(engine, tmp_path):
    from conformance.harness.plan_command import plan_one

    small, large = find_case("seed-draft-kv-c8"), find_case("seed-draft-kv-c32")
    return tuple(plan_one(engine, c, tmp_path, i) for i, c in enumerate((small, large)))


def test_a_dflash_plan_that_does_not_say_where_its_draft_kv_lives_passes_no_bound_check(tmp_path):
    # The engine file reads the draft store's bytes and nothing that places them: no pool ledger beside
    # them, no line saying the store is outside the bound. Where the draft KV lives is what each check says
    # first, though the pool's categories are null too.
    engine = _log_port_variant(tmp_path, ("lists", "memory.ledger_bytes.attention_kv",
                                          "memory.ledger_bytes.recurrent_state"))
    o8, o32 = _planned_pair(engine, tmp_path)
    assert o8["status"] == o32["status"] == "ok" and o8["memory"]["outside_bound"] == []
    assert o8["memory"]["ledger_bytes"]["draft_kv"] and o8["memory"]["ledger_bytes"]["attention_kv"] is None
    for check in ("memory.inside_bound", "memory.ledger_holds_seats", "memory.draft_kv_scaling"):
        v = judged(check, o8, "seed-draft-kv-c8", partner=o32)
        assert v.failed and "draft KV" in v.message and "does not say where its draft KV lives" in v.message, v


def test_a_store_beside_an_itemized_pool_shows_as_the_ledger_past_the_bound(tmp_path):
    # Without the 'NOT counted' rule the log port's ledger itemizes its pool (attention KV, recurrent state)
    # and its draft store: the draft KV is placed in the pool, and the categories sum past the bound.
    # (memory.draft_kv_scaling names the per-sequence figures this engine file leaves null first.)
    o8, o32 = _planned_pair(_log_port_variant(tmp_path, ("lists",)), tmp_path)
    assert o8["memory"]["outside_bound"] == []
    v = judged("memory.inside_bound", o8, "seed-draft-kv-c8", partner=o32)
    assert v.failed and "(attention_kv, recurrent_state, draft_kv) sum to" in v.message, v
    assert "over memory.bound_bytes" in v.message, v


def test_a_plan_that_itemizes_its_pool_with_the_draft_kv_places_it():
    from conformance.checks.memory_facts import draft_kv_location

    vllm = oracle("vllm", "seed-draft-kv-c8")
    spec = find_case("seed-draft-kv-c8").spec
    assert draft_kv_location(vllm, spec)[0] == "pool"
    assert inside_the_bound(CheckInput(as_port(vllm), spec)).outcome == "pass"
    hidden = as_port(vllm)
    hidden["memory"]["ledger_bytes"]["attention_kv"] = None
    assert draft_kv_location(hidden, spec)[0] == "unknown"
