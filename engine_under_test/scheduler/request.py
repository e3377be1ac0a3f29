"""A request as the scheduler tracks it (vLLM field names)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_LENGTH = "finished_length"     # max_tokens or max_model_len reached
    FINISHED_STOPPED = "finished_stopped"   # EOS / stop token

    @property
    def is_finished(self) -> bool:
        return self in (RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_STOPPED)


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    eos_token_id: int | None = None
    output_token_ids: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)   # drafts to verify next step
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0    # async scheduling: tokens scheduled whose output has not arrived
    num_in_flight_tokens: int = 0       # tokens of scheduled steps not yet processed (update_from_output)
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    is_prefill_chunk: bool = False

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id}: prompt_token_ids is empty")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.request_id}: max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_ids_between(self, start: int, stop: int, drafts: list[int] = ()) -> tuple[int, ...]:
        """(all_token_ids + drafts)[start:stop], without building the whole sequence (a decode
        step reads its last few tokens of a long one)."""
        prompt, output = self.prompt_token_ids, self.output_token_ids
        num_prompt, num_known = len(prompt), len(prompt) + len(output)
        if 0 <= start <= stop and start >= num_prompt:
            if stop <= num_known:
                return tuple(output[start - num_prompt:stop - num_prompt])
            return tuple(output[start - num_prompt:]) + tuple(drafts[max(start - num_known, 0):stop - num_known])
        return tuple((self.all_token_ids + list(drafts))[start:stop])
