"""Per-step budgets the scheduler enforces, resolved as vLLM 0.33 resolves them.

Contract: `resolve_budget(cfg)` returns a frozen `Budget` or raises `BudgetRefusal` (a
`ValueError`) whose message says what cannot be served and why:
- max_num_scheduled_tokens = max_num_batched_tokens (vLLM 0.33 no longer subtracts drafting
  slots here; the scheduler charges them per request against max_num_batched_tokens);
- refused when max_num_batched_tokens <= lookahead tokens (no room for one token plus the
  drafting reservation), or below max_num_seqs, or below max_model_len without chunked prefill;
- with a separate draft pass (DFlash, DSpark) every active request needs `lookahead` query
  rows of the draft pass inside max_num_batched_tokens, so the active-sequence cap is
  min(max_num_seqs, max_num_batched_tokens // lookahead).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_under_test.config import EngineConfig
from engine_under_test.drafting import DraftingBudget, drafting_budget
from engine_under_test.shapes import DraftShape, TargetShape


class BudgetRefusal(ValueError):
    """The configuration cannot schedule any step; the message is the engine's refusal."""


@dataclass(frozen=True)
class Budget:
    max_num_batched_tokens: int
    max_num_scheduled_tokens: int
    drafting_slots_per_request: int
    lookahead_tokens: int
    max_num_seqs: int
    max_active_seqs: int
    num_speculative_tokens: int
    active_cap_reason: str | None   # why max_active_seqs is below max_num_seqs, if it is

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("max_num_batched_tokens", "max_num_scheduled_tokens",
                                              "drafting_slots_per_request", "lookahead_tokens",
                                              "max_num_seqs", "max_active_seqs")}


def resolve_budget(cfg: EngineConfig) -> Budget:
    spec = cfg.speculative_config
    table: DraftingBudget = drafting_budget(spec.method if spec else None, cfg.num_speculative_tokens)
    mnbt = cfg.max_num_batched_tokens
    if not cfg.enable_chunked_prefill and mnbt < cfg.max_model_len:
        raise BudgetRefusal(f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({cfg.max_model_len}) "
                            "with chunked prefill off: longer sequences could never be scheduled")
    if mnbt < cfg.max_num_seqs:
        raise BudgetRefusal(f"max_num_batched_tokens ({mnbt}) must be >= max_num_seqs ({cfg.max_num_seqs})")
    if spec is not None and mnbt <= table.lookahead_tokens:
        raise BudgetRefusal(
            f"max_num_batched_tokens ({mnbt}) cannot hold one token plus the drafting reservation of "
            f"{spec.method} at k={cfg.num_speculative_tokens}: it needs more than {table.lookahead_tokens} "
            f"lookahead tokens and {table.drafting_slots_per_request} drafting slots per request")
    active = cfg.max_num_seqs
    reason = None
    if spec is not None and table.separate_draft_pass:
        draft_seqs = mnbt // table.lookahead_tokens
        if draft_seqs < active:
            active = draft_seqs
            reason = (f"the {spec.method} draft pass needs {table.lookahead_tokens} query tokens per request within "
                      f"max_num_batched_tokens={mnbt}: at most {draft_seqs} active sequences (max_num_seqs {cfg.max_num_seqs})")
    return Budget(max_num_batched_tokens=mnbt, max_num_scheduled_tokens=mnbt,
                  drafting_slots_per_request=table.drafting_slots_per_request,
                  lookahead_tokens=table.lookahead_tokens, max_num_seqs=cfg.max_num_seqs,
                  max_active_seqs=active, num_speculative_tokens=cfg.num_speculative_tokens,
                  active_cap_reason=reason)


def check_model_limits(cfg: EngineConfig, target: TargetShape, draft: DraftShape | None) -> None:
    """Refuse what the models cannot do: sequences past the target's positions, or more drafts
    per step than a DFlash drafter's block proposes (block_size - 1)."""
    if target.max_position_embeddings is not None and cfg.max_model_len > target.max_position_embeddings:
        raise BudgetRefusal(f"max_model_len ({cfg.max_model_len}) is greater than the target's max_position_embeddings "
                            f"({target.max_position_embeddings}) in {target.config_path.parent.name}/config.json")
    spec = cfg.speculative_config
    if spec is not None and spec.method == "dflash" and draft is not None and draft.block_size_tokens:
        most = draft.block_size_tokens - 1
        if spec.num_speculative_tokens > most:
            raise BudgetRefusal(
                f"speculative_config.num_speculative_tokens ({spec.num_speculative_tokens}) exceeds what the DFlash "
                f"drafter proposes per block: block_size {draft.block_size_tokens} in {draft.config_path.parent.name}/config.json gives at "
                f"most {most} draft tokens per step")
