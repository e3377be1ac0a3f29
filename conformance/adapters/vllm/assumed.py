"""The figures vLLM 0.33 measures on the GPU that plan mode must assume, each with its source.

Contract: `FIGURES` maps a name to an `AssumedFigure` (bytes and where the value comes from). The
utilization emulation (`conformance.adapters.vllm.utilization`) feeds them to vLLM's own
`request_memory` / `memory_profiling` / `Worker.determine_available_memory`; every one lands in the
observation's `provenance.assumed` with its value and source. None is scaled to the case's model
or token budget: they are stand-ins for what a run on the device logs, to be replaced by a
measured figure where one exists.

    init_used_bytes          device memory in use when the worker takes its init snapshot (CUDA
                             context, cuBLAS / cuBLASLt handles): vLLM's requested memory is not
                             charged for it, it only decides whether `request_memory` refuses
    other_consumed_bytes     what `memory_profiling`'s total_consumed holds beyond the weights
                             (model-runner buffers, workspaces, non-torch growth)
    activation_peak_bytes    the profile run's transient torch peak above what stays allocated
                             (`transient_peak_headroom`)
    cudagraph_memory_bytes   `profile_cudagraph_memory()`: the GPU default of `vllm serve` captures
                             CUDA graphs, so vLLM charges its estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)
"""

from __future__ import annotations

from conformance.adapters.figures import CUDA_CONTEXT_BYTES, CUDA_CONTEXT_SOURCE, AssumedFigure

FIGURES: dict[str, AssumedFigure] = {f.name: f for f in (
    AssumedFigure("init_used_bytes", CUDA_CONTEXT_BYTES, (
        "what Worker.init_device has allocated before its snapshot (the CUDA context; the cuBLAS / cuBLASLt "
        "handles it creates with torch.mm and linear with a bias): " + CUDA_CONTEXT_SOURCE)),
    AssumedFigure("other_consumed_bytes", 171_798_691, (
        "0.16 GiB: vLLM's log for Llama-3.2-11B-Vision on one H100 80GB ('non_torch_memory takes 0.16GiB', "
        "vllm-project/vllm pull request #12126); not measured for this model or vLLM 0.33")),
    AssumedFigure("activation_peak_bytes", 1_352_914_698, (
        "1.26 GiB: vLLM's log for Meta-Llama-3-8B on one H100 80GB at its default token budget ('PyTorch "
        "activation peak memory 1.26GiB', vllm-project/vllm pull request #10511); not measured for this model, "
        "max_num_batched_tokens or vLLM 0.33")),
    AssumedFigure("cudagraph_memory_bytes", 558_345_748, (
        "0.52 GiB: vLLM's log for Qwen3-8B on one GPU ('Profiling CUDA graph memory: PIECEWISE=51 (largest=512), "
        "FULL=35 (largest=256)' then 'Estimated CUDA graph memory: 0.52 GiB total', LMCache/LMCache issue "
        "#3430); not measured for this model, its DFlash drafter or vLLM 0.33")),
)}
