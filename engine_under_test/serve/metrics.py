"""Prometheus text for GET /metrics, with vLLM's metric names where one exists.

    vllm:spec_decode_num_drafts_total          counter  verify steps that checked a draft (only when the
                                                        engine counts them; else derive d(draft_tokens) / k)
    vllm:spec_decode_num_draft_tokens_total    counter  draft tokens proposed
    vllm:spec_decode_num_accepted_tokens_total counter  draft tokens accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total
                                               counter  per draft position i (label position="i", one
                                                        sample per i in 0..k-1): verifies that accepted
                                                        draft i; a verify accepting n drafts adds 1 to
                                                        positions 0..n-1 (vLLM 0.33's SpecDecodingStats
                                                        .observe_draft), so the samples sum to the
                                                        accepted tokens counter
    vllm:prompt_tokens_total                   counter  prompt tokens of admitted requests
    vllm:generation_tokens_total               counter  output tokens streamed back
    vllm:request_success_total                 counter  requests finished (label finished_reason)
    vllm:num_requests_running                  gauge    requests the scheduler runs (scheduled), as vLLM's
    vllm:num_requests_waiting                  gauge    requests admitted but queued (not yet scheduled)
    vllm:kv_cache_usage_perc                   gauge    fraction of the unified pool's blocks in use (0..1)
    reference:num_scheduled_tokens_total       counter  tokens the scheduler scheduled (sum over steps)
    reference:num_steps_total                  counter  engine steps run
    reference:num_requests_total               counter  requests admitted

Counters an embedding program adds (`EngineStats.extra["counters"]`, snapshot keys `counter:NAME`,
NAME ending in `_total`) follow, one sample each, as they are.

Mean acceptance length over an interval = 1 + d(accepted_tokens) / d(drafts), as vLLM documents.
"""

from __future__ import annotations

from typing import Mapping

# (name, type, help, key in the snapshot)
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", "num_drafts"),
    ("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", "num_draft_tokens"),
    ("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", "num_accepted_tokens"),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "num_prompt_tokens"),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", "num_generation_tokens"),
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "num_requests_running"),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "num_requests_waiting"),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "pool_usage"),
    ("reference:num_scheduled_tokens_total", "counter", "Tokens scheduled, summed over steps.", "num_scheduled_tokens"),
    ("reference:num_steps_total", "counter", "Engine steps run.", "num_steps"),
    ("reference:num_requests_total", "counter", "Requests admitted.", "num_requests"),
)
FINISHED_KEY_PREFIX = "finished:"
ACCEPTED_PER_POS_KEY_PREFIX = "accepted_per_pos:"   # + the draft position, 0 .. k - 1
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTER_KEY_PREFIX = "counter:"   # + a counter's full name (ending in _total), added by an embedding program
OPTIONAL_KEYS = frozenset({"num_drafts"})   # reported only when the engine counts drafts


def render(snapshot: Mapping[str, float]) -> str:
    """Text exposition format 0.0.4 of one snapshot (absent keys are reported as 0)."""
    lines: list[str] = []
    for name, kind, help_text, key in METRICS:
        if key in OPTIONAL_KEYS and key not in snapshot:
            continue
        base = name[:-len("_total")] if kind == "counter" else name
        lines += [f"# HELP {base} {help_text}", f"# TYPE {base} {kind}", f"{name} {_num(snapshot.get(key, 0))}"]
    per_pos = sorted((int(k[len(ACCEPTED_PER_POS_KEY_PREFIX):]), v) for k, v in snapshot.items()
                     if k.startswith(ACCEPTED_PER_POS_KEY_PREFIX))
    if per_pos:
        lines += [f"# HELP {ACCEPTED_PER_POS} Accepted tokens per draft position.", f"# TYPE {ACCEPTED_PER_POS} counter"]
        lines += [f'{ACCEPTED_PER_POS}_total{{position="{i}"}} {_num(v)}' for i, v in per_pos]
    for key in sorted(k for k in snapshot if k.startswith(COUNTER_KEY_PREFIX)):
        name = key[len(COUNTER_KEY_PREFIX):]
        lines += [f"# TYPE {name.removesuffix('_total')} counter", f"{name} {_num(snapshot[key])}"]
    lines += ["# HELP vllm:request_success Count of successfully processed requests.",
              "# TYPE vllm:request_success counter"]
    for key in sorted(k for k in snapshot if k.startswith(FINISHED_KEY_PREFIX)):
        reason = key[len(FINISHED_KEY_PREFIX):]
        lines.append(f'vllm:request_success_total{{finished_reason="{reason}"}} {_num(snapshot[key])}')
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))
