"""SGLang 0.5.23's own result processing for the plan trace, fed by a stand-in forward.

Contract:
- `build_processor(loop)` returns SGLang's `SchedulerBatchResultProcessor` (the frozen dataclass
  the Scheduler builds) over the trace's real pools and tree cache. What it needs of a running
  server and that plays no part in memory or scheduling (metrics, streaming to the tokenizer,
  the draft worker's adaptive hooks, beam search, hisparse, disaggregation offload) is given as
  sinks (`_MetricsSink`, `_StreamSink`, `_WorkerSink`) or None, as the Scheduler passes None
  for the features that are off.
- `prefill_result(bs, token_rng, vocab)` and `verify_result(bs, accepted, num_draft_tokens,
  token_rng, vocab)` are the minimal `GenerationBatchResult`s a forward hands the processor:
  CPU tensors of sampled ids (the prefill's first token; the verify's accepted drafts + bonus,
  padded to the speculative row stride) and, for a verify, `accept_lens` = accepted + 1.
- `next_draft_input(algorithm, bs, ...)` is the draft input a spec worker returns from every forward
  (prefill or verify), which `Scheduler.run_batch` puts on the batch: DFLASH's `make_draft_input_v2`;
  EAGLE / NEXTN / STANDALONE an `EagleDraftInput`, NGRAM an `NgramVerifyInput`, each carrying
  `future_indices` as the overlap Scheduler sets them (so their filter_batch / merge_batch follow the
  rows, the only thing the scheduler side does with them). Replacing it after a verify matters: the
  draft input `prepare_for_decode` filled carries `nxt_kv_lens_cpu`, and DFLASH's merge_batch refuses
  to merge a fresh prefill's input into it (a retracted request re-admitted while others decode).

`process_batch_result_prefill` / `process_batch_result_decode` then do what they do in a server:
commit output ids and kv_committed_len (`_resolve_spec_v2_tokens`), update finish state, swap the
mamba ping-pong track slots (`_mamba_prefix_cache_update`), checkpoint or release the KV cache.
"""

from __future__ import annotations

from typing import Any

FUNCTIONS = (
    "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
    ".process_batch_result_prefill",
    "SchedulerBatchResultProcessor.process_batch_result_decode",
    "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
    "SchedulerBatchResultProcessor._handle_finish_state_updated_req",
    "SchedulerBatchResultProcessor._mamba_prefix_cache_update",
    "sglang.srt.managers.schedule_batch.ScheduleBatch.copy",
    "sglang.srt.managers.utils.GenerationBatchResult",
    "sglang.srt.speculative.draft_worker_common.make_draft_input_v2",
    "sglang.srt.speculative.eagle_info.EagleDraftInput",
    "sglang.srt.speculative.ngram_info.NgramVerifyInput",
)

GLUE = (
    {"name": "conformance.adapters.sglang.results.build_processor",
     "description": "SGLang's SchedulerBatchResultProcessor over the trace's pools and tree cache; metrics "
                    "reporter, output streamer and worker hooks are no-op sinks (they record, stream or tune, "
                    "and decide no memory); beam coordinator, hisparse, offload manager, metrics collector, "
                    "logprob processor None (features off)"},
    {"name": "conformance.adapters.sglang.results.prefill_result / verify_result",
     "description": "the minimal GenerationBatchResult a forward returns: CPU next_token_ids (random ids from "
                    "random.Random(workload.seed + 2)), accept_lens = the acceptance model's accepted drafts + 1, "
                    "speculative_num_draft_tokens; no logits"},
    {"name": "conformance.adapters.sglang.results.next_draft_input",
     "description": "the draft input a spec worker returns from every forward (prefill or verify), put on the "
                    "batch as Scheduler.run_batch puts batch_result.next_draft_input: DFLASH make_draft_input_v2 "
                    "(zero bonus tokens), EAGLE-style EagleDraftInput / NGRAM NgramVerifyInput with future_indices "
                    "= arange(bs) as the overlap scheduler sets them; the draft forward itself is not run"},
)


class _MetricsSink:
    """SchedulerMetricsReporter's calls from the result processor: counters kept, nothing reported."""

    def __init__(self) -> None:
        self.num_generated_tokens = 0
        self.forward_ct_decode = 0

    def snapshot_spec_decode_metrics(self, batch: Any, result: Any) -> None:
        pass

    def update_spec_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def report_decode_stats(self, *args: Any, **kwargs: Any) -> None:
        pass

    def report_prefill_stats(self, *args: Any, **kwargs: Any) -> None:
        pass


class _StreamSink:
    """SchedulerOutputStreamer: nobody listens for the trace's tokens."""

    def stream_output(self, *args: Any, **kwargs: Any) -> None:
        pass


class _WorkerSink:
    """The model worker's CPU hook after verify (BaseSpecWorker's default is a no-op too)."""

    def on_verify_complete_cpu(self, num_correct_drafts_per_req: list[int], batch_size: int = 0) -> None:
        pass


def build_processor(loop: Any) -> Any:
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    def abort_request(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("SGLang's result processor asked to abort a request during the plan trace")

    return SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=loop.enable_overlap,
        enable_overlap_mlx=False, model_config=loop.sizing.kvc.model_config,
        token_to_kv_pool_allocator=loop.allocator, tree_cache=loop.tree_cache, hisparse_coordinator=None,
        req_to_token_pool=loop.req_to_token_pool, decode_offload_manager=None, metrics_collector=None,
        metrics_reporter=_MetricsSink(), draft_worker=None, model_worker=_WorkerSink(),
        logprob_result_processor=None, output_streamer=_StreamSink(), beam_coordinator=None,
        abort_request=abort_request)


def prefill_result(bs: int, token_rng: Any, vocab: int) -> Any:
    import torch

    from sglang.srt.managers.utils import GenerationBatchResult

    ids = torch.tensor([token_rng.randrange(2, vocab) for _ in range(bs)], dtype=torch.int64)
    return GenerationBatchResult(next_token_ids=ids)


def verify_result(accepted: list[int], num_draft_tokens: int, token_rng: Any, vocab: int) -> Any:
    import torch

    from sglang.srt.managers.utils import GenerationBatchResult

    rows = []
    for n in accepted:
        row = [token_rng.randrange(2, vocab) for _ in range(n + 1)]
        rows.extend(row + [0] * (num_draft_tokens - len(row)))
    return GenerationBatchResult(
        next_token_ids=torch.tensor(rows, dtype=torch.int64),
        accept_lens=torch.tensor([n + 1 for n in accepted], dtype=torch.int32),
        speculative_num_draft_tokens=num_draft_tokens)


def next_draft_input(spec_algorithm: Any, bs: int, seq_lens: Any, num_draft_tokens: int) -> Any:
    import torch

    if spec_algorithm.is_dflash_family():
        from sglang.srt.speculative.draft_worker_common import make_draft_input_v2

        return make_draft_input_v2(bonus_tokens=torch.zeros(bs, dtype=torch.int64), new_seq_lens=seq_lens.clone())
    future = torch.arange(bs, dtype=torch.int64)
    if spec_algorithm.is_ngram():
        from sglang.srt.speculative.ngram_info import NgramVerifyInput

        spec = NgramVerifyInput(draft_token_num=num_draft_tokens, new_seq_lens=seq_lens.clone(),
                                accept_tokens=torch.zeros(bs * num_draft_tokens, dtype=torch.int32),
                                accept_lens=torch.ones(bs, dtype=torch.int32))
    else:
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        spec = EagleDraftInput(bonus_tokens=torch.zeros(bs, dtype=torch.int32))
    spec.future_indices = future
    return spec
