"""The figures SGLang 0.5.23 measures on the GPU that plan mode must assume, each with its source.

Contract: `FIGURES` maps a name to an `AssumedFigure`. The utilization emulation
(`conformance.adapters.sglang.utilization`) answers SGLang's free-memory probe with them; every one
lands in the observation's `provenance.assumed` with its value and source.

    init_used_bytes               device memory in use when SGLang takes its pre-load baseline
                                  (`measure_pre_model_load_memory`): the CUDA context and handles
    resident_beyond_weights_bytes what the target and draft workers hold besides their weights when
                                  the pools are sized (`_profile_available_bytes` charges whatever is
                                  resident)
"""

from __future__ import annotations

from conformance.adapters.figures import CUDA_CONTEXT_BYTES, CUDA_CONTEXT_SOURCE, AssumedFigure

FIGURES: dict[str, AssumedFigure] = {f.name: f for f in (
    AssumedFigure("init_used_bytes", CUDA_CONTEXT_BYTES, (
        "what a one-GPU SGLang process has allocated when it takes its pre-load baseline (the CUDA context and "
        "handles): " + CUDA_CONTEXT_SOURCE)),
    AssumedFigure("resident_beyond_weights_bytes", 0, (
        "not measured: the model runners' buffers allocated before the pools are sized (sampler, draft-worker "
        "buffers) are taken as none; plan mode charges the weights only")),
)}
