"""What one schedule() call hands the runtime (vLLM field names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScheduledRequest:
    """One request's share of a step.

    The runtime computes positions num_computed_tokens .. num_computed_tokens +
    num_scheduled_tokens - 1. The inputs are `token_ids` (len num_scheduled_tokens): known
    tokens first, then the draft tokens `spec_token_ids` to verify (the last
    len(spec_token_ids) positions, `spec_positions`). `block_ids[g]` is the full block table
    of attention group g (block i holds positions i*block_size ..); `state_block_ids[g]` are
    the state slots of state group g this request may write: slot 0 receives the state after
    the last known token, slots 1..k the states after each draft position; the runtime reads the
    next step's initial state from the slot of the last accepted position (no copy). Align mode (plan mode
    only; the runtime refuses it) gives instead the live blocks of vLLM's position-indexed state
    table in table order: 1 + k, or 2 + k while the previous block-boundary state is kept.
    """

    req_id: str
    num_computed_tokens: int
    num_scheduled_tokens: int
    token_ids: tuple[int, ...]
    spec_token_ids: tuple[int, ...]
    block_ids: dict[int, tuple[int, ...]]
    state_block_ids: dict[int, tuple[int, ...]]
    is_prefill_chunk: bool            # the prompt is not finished after this step (nothing sampled)
    is_new: bool                      # first step of this request (or resumed after preemption)

    @property
    def spec_positions(self) -> tuple[int, ...]:
        end = self.num_computed_tokens + self.num_scheduled_tokens
        return tuple(range(end - len(self.spec_token_ids), end))


@dataclass(frozen=True)
class SchedulerOutput:
    step: int
    scheduled: tuple[ScheduledRequest, ...]
    preempted_req_ids: tuple[str, ...]
    finished_req_ids: tuple[str, ...]          # finished since the previous step (blocks freed)

    @property
    def num_scheduled_tokens(self) -> dict[str, int]:
        return {r.req_id: r.num_scheduled_tokens for r in self.scheduled}

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(r.num_scheduled_tokens for r in self.scheduled)

    @property
    def scheduled_spec_decode_tokens(self) -> dict[str, tuple[int, ...]]:
        return {r.req_id: r.spec_token_ids for r in self.scheduled if r.spec_token_ids}

    @property
    def num_spec_tokens(self) -> int:
        return sum(len(r.spec_token_ids) for r in self.scheduled)
