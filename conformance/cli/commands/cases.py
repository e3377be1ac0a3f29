"""`conformance cases`: list the shipped case ids (validating every file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.run.selection import EVERY_CASE, select_cases

NAME = "cases"
HELP = "list the shipped cases (every file is validated)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patterns", nargs="*", help="case ids, globs over them, tag:NAME or case files (the syntax of --cases; default: all)")
    p.add_argument("--dir", type=Path, default=None, help="case directory (default: suites/cases)")
    p.add_argument("-v", "--verbose", action="store_true", help="show method, k, shapes and memory bound")


def run(args: argparse.Namespace) -> int:
    cases, _ = select_cases(args.patterns, args.dir, default=EVERY_CASE, required=False)
    for c in cases:
        if args.verbose:
            s = c.spec
            mem = s["memory"]
            bound = f"{mem['kv_cache_bytes']} B" if "kv_cache_bytes" in mem else f"util {mem['gpu_memory_utilization']}"
            print(f"{c.id:36s} {s['speculative']['method']:>11s} k={s['speculative']['num_speculative_tokens']:<2d} "
                  f"{s['target']} + {s['draft'] or '-'}  seqs={s['scheduler']['max_num_seqs']} "
                  f"len={s['scheduler']['max_model_len']}  {bound}")
        else:
            print(c.id)
    return 0
