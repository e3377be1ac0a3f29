"""Run inside an oracle venv: parse a live argv with the engine's own CLI parser and print the
resolved knobs as JSON (used by test_live_vllm / test_live_sglang).

    python live_argv_check.py vllm|sglang ARGV_JSON
"""

from __future__ import annotations

import argparse
import json
import sys


def vllm(argv: list[str]) -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[2:])   # after `vllm serve`
    ns.model = ns.model_tag
    ea = EngineArgs.from_cli_args(ns)
    keys = ("model", "seed", "max_num_seqs", "max_model_len", "max_num_batched_tokens", "enable_prefix_caching",
            "mamba_ssm_cache_dtype", "kv_cache_dtype", "kv_cache_memory_bytes", "gpu_memory_utilization",
            "load_format", "skip_tokenizer_init", "speculative_config", "served_model_name")
    return {k: getattr(ea, k) for k in keys} | {"port": ns.port, "host": ns.host}


def sglang(argv: list[str]) -> dict:
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    ns = p.parse_args(argv[3:])   # after `python -m sglang.launch_server`
    return {k: v for k, v in vars(ns).items() if isinstance(v, (str, int, float, bool, type(None), list))}


if __name__ == "__main__":
    out = {"vllm": vllm, "sglang": sglang}[sys.argv[1]](json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(out, default=str))
