"""Defective reference engines for the runtime's own tests: each test file below must fail on each
of its defects (not a CI gate; a check of the checks, run by hand after changing them). The
defects are the runtime's recent paths: the captured prefill pass (one request's, several new
prompts'), host reads in a captured body, split mixed steps, the drafter's context of a prompt
step, ragged prompt groups, the prompt-pass conv kernel, the l2 norm of q and k.

Usage:
    .venv/bin/python benchmarks/runtime_defects.py            # every defect
    .venv/bin/python benchmarks/runtime_defects.py -k prefill # the defects whose name holds "prefill"

Contract: for each defect (a named edit of one engine file: a snippet and what replaces it, with
the number of times the snippet occurs) the checkout's files (tracked, and untracked ones git
does not ignore: the working tree as it is) are copied to a temporary folder, the edit is applied
there (the checkout is never touched), and the defect's tests run from the copy (the copy first on
`PYTHONPATH`, before what the caller's `PYTHONPATH` holds, e.g. a Triton for the interpreter, so
the copy's engine is the one imported). A line per defect: its name, its outcome and pytest's
summary. A defect is killed when its tests fail (pytest's exit status 1 with failures; no test
collected, or a collection error, is not a kill); it is "not judged here" when every one of its
tests skipped (the prompt-pass conv kernel's tests need CUDA, or Triton with `TRITON_INTERPRET=1`).
Exit status 1 when a defect survives or a snippet is not found as often as stated (the table is
stale); else 2 when some defect could not be judged here; else 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
PREFILL_TESTS = ("tests/engine_under_test/runtime/test_prefill_graph_path.py",)
PROMPTS_TESTS = ("tests/engine_under_test/runtime/test_prefill_graphs_of_prompts.py",)
RAGGED_TESTS = ("tests/engine_under_test/model/test_ragged_groups.py",)
SPLIT_TESTS = ("tests/engine_under_test/runtime/test_decode_graph_path.py",)
HOST_READ_TESTS = ("tests/engine_under_test/runtime/test_captured_bodies_read_nothing.py",)
# run on CUDA or with TRITON_INTERPRET=1 and Triton importable (otherwise they skip: not judged here)
PREFILL_CONV_TESTS = ("tests/engine_under_test/model/test_gdn_prefill_conv_kernel.py",)
NORM_TESTS = ("tests/engine_under_test/model/test_fused_norms.py",)       # the same: CUDA or the interpreter


class Defect(NamedTuple):
    name: str
    path: str
    snippet: str
    replacement: str
    count: int
    tests: tuple[str, ...]


DEFECTS = (
    Defect("prefill: pad rows keep their gate and step size", "engine_under_test/runtime/prefill_bodies.py",
           "ragged=True))", "ragged=False))", 1, PREFILL_TESTS),
    Defect("prefill: the conv state read at the last pad row", "engine_under_test/runtime/prefill_bodies.py",
           "save_pos=last,", "save_pos=torch.full_like(last, S - 1),", 1, PREFILL_TESTS),
    Defect("prefill: pad rows write their K/V through the block table", "engine_under_test/runtime/prefill_fills.py",
           'vals[f"blk{g}"] = np.where(real != 0, table[pos // bs], 0)', 'vals[f"blk{g}"] = table[pos // bs]', 1,
           PREFILL_TESTS),
    Defect("prefill: drafts after a chunk that does not end its prompt", "engine_under_test/runtime/prefill_fills.py",
           "drafting.append(not sr.is_prefill_chunk", "drafting.append(True or sr.is_prefill_chunk", 1, PREFILL_TESTS),
    Defect("prefill: the query block not opened by the pass's token", "engine_under_test/runtime/prefill_bodies.py",
           "q_ids.view(G, k + 1)[:, 0].copy_(buf.tokens.argmax[:G])", "pass", 1, PREFILL_TESTS),
    Defect("prefill: the logits of the last row, not of the last input", "engine_under_test/runtime/prefill_bodies.py",
           "rows = buf.seq_index[:G] * S + last", "rows = buf.seq_index[:G] * S + S - 1", 1, PREFILL_TESTS),
    Defect("prefill: a new prompt reads its slot's old state", "engine_under_test/runtime/prefill_bodies.py",
           'fresh=m.view(f"fresh{s}")[:G] != 0', 'fresh=m.view(f"fresh{s}")[:G] < 0', 1, PREFILL_TESTS),
    Defect("prefill: a sampling request's token taken as the argmax", "engine_under_test/runtime/prefill_graphs.py",
           "if not sr.is_prefill_chunk and not params[sr.req_id].is_greedy:", "if False:", 1,
           ("tests/engine_under_test/runtime/test_prefill_graph_path.py",)),
    Defect("prefill: the last input's row read on the host (the same token, no capture)",
           "engine_under_test/runtime/prefill_bodies.py", "hidden.index_select(0, rows)",
           "hidden[int(rows[0]):int(rows[0]) + 1]", 1, HOST_READ_TESTS),
    Defect("prefill: a tensor made from host data inside the body", "engine_under_test/runtime/prefill_bodies.py",
           "save_seq=buf.seq_index[:G],", "save_seq=torch.tensor(list(range(G)), device=buf.seq_index.device),", 1,
           HOST_READ_TESTS),
    Defect("prompts: each sequence's logits row without its place in the pass",
           "engine_under_test/runtime/prefill_bodies.py", "rows = buf.seq_index[:G] * S + last", "rows = last", 1,
           PROMPTS_TESTS),
    Defect("prompts: a later chunk run with new prompts (its earlier tokens unread)",
           "engine_under_test/runtime/prefill_graphs.py", "if len(reqs) > 1 and sr.num_computed_tokens != 0:",
           "if False:", 1, PROMPTS_TESTS),
    Defect("prompts: own-key attention not causal", "engine_under_test/model/static_batch.py",
           "is_causal=True, scale=scale)", "is_causal=False, scale=scale)", 1, PROMPTS_TESTS),
    Defect("prompts: a query head reads the wrong KV head", "engine_under_test/model/static_batch.py",
           "x.view(B, L, hkv, 1, D).expand(B, L, hkv, H // hkv, D)", "x.view(B, L, 1, hkv, D).expand(B, L, H // hkv, hkv, D)",
           1, PROMPTS_TESTS),
    Defect("prompts: the query blocks after the first DRAFT_LOGIT_SEQS get no drafts",
           "engine_under_test/runtime/prefill_bodies.py", "for i in range(0, G, DRAFT_LOGIT_SEQS):",
           "for i in range(0, min(G, DRAFT_LOGIT_SEQS), DRAFT_LOGIT_SEQS):", 1, PROMPTS_TESTS),
    Defect("prompts: a pad sequence's state saved into a request's slot",
           "engine_under_test/runtime/prefill_buffers.py", 'self.meta = MetaBuffers(f, {"seq_lens": 1, **{f"fresh{s}": 1 for s in g.state_gids}}, dev)',
           'self.meta = MetaBuffers(f, {"seq_lens": 1, **{f"fresh{s}": 1 for s in g.state_gids}, '
           '**{f"dst{s}": 3 for s in g.state_gids}}, dev)', 1, PROMPTS_TESTS),
    Defect("prompts: a later chunk beside new prompts left to the eager pass",
           "engine_under_test/runtime/prefill_graphs.py",
           "return parts if len(parts) > 1 and all(self.can_run(part, params) for part in parts) else None",
           "return None", 1, PROMPTS_TESTS),
    Defect("decode step: the acceptance rule picked on the host", "engine_under_test/runtime/step_bodies.py",
           'accepted = torch.where(m.view("modeled") != 0, modeled, judged)',
           'accepted = modeled if bool(m.view("modeled")[0]) else judged', 1, HOST_READ_TESTS),
    Defect("split mixed step: the captured part's counts dropped", "engine_under_test/runtime/runner.py",
           "self.observe_verify(req_id, num_draft_tokens, num_accepted_tokens)", "pass", 1, SPLIT_TESTS),
    Defect("split mixed step: the decode rows run eagerly too", "engine_under_test/runtime/runner.py",
           "result = self._execute_rest(rest, params, generators, acceptance)",
           "result = self._execute_eager(decode + rest, params, generators, acceptance)", 1, SPLIT_TESTS),
    Defect("drafter context: a verify step's rows taken as the pass's own", "engine_under_test/runtime/runner.py",
           "if len(rows) == batch.query_start_loc[-1]:", "if True:", 1,
           ("tests/engine_under_test/runtime/test_draft_context.py",)),
    Defect("ragged group: no zero gate on pad rows", "engine_under_test/model/linear_attention.py",
           "if slots.ragged:          # pad rows", "if False:          # pad rows", 1, RAGGED_TESTS),
    Defect("ragged group: the conv state read after the pad rows", "engine_under_test/model/linear_attention.py",
           "slots.all_states or slots.ragged", "slots.all_states", 2, RAGGED_TESTS),
    Defect("ragged group: pad rows written back", "engine_under_test/model/forward_batch.py",
           "elif self.is_ragged(seqs, query_len):", "elif False:", 1, RAGGED_TESTS),
    Defect("prefill conv kernel: the saved state taken one position early",
           "engine_under_test/model/gdn_prefill_conv_kernel.py", "idx = pos + 1 + o_r", "idx = pos + o_r", 1,
           PREFILL_CONV_TESTS),
    Defect("prefill conv kernel: a non-fresh sequence's state rows not read",
           "engine_under_test/model/gdn_prefill_conv_kernel.py", "mask=(r < 0)[:, None] & keep[None, :], other=0)",
           "mask=(r < 0)[:, None] & keep[None, :] & False, other=0)", 1, PREFILL_CONV_TESTS),
    Defect("l2 norm kernel: the norm not squared", "engine_under_test/model/fused_norms.py",
           "tl.rsqrt(norm * norm + eps)", "tl.rsqrt(norm + eps)", 1, NORM_TESTS),
)


KILLED, SURVIVED, NOT_JUDGED = "killed", "SURVIVED", "not judged here"


def run(defect: Defect, tree: Path) -> tuple[str, str]:
    """(KILLED, SURVIVED or NOT_JUDGED, pytest's summary line) with the defect applied in `tree`:
    NOT_JUDGED when its tests all skipped (none passed, failed or errored)."""
    target = tree / defect.path
    original = target.read_text()
    found = original.count(defect.snippet)
    if found != defect.count:
        return SURVIVED, f"STALE: the snippet occurs {found} times in {defect.path}, the table says {defect.count}"
    target.write_text(original.replace(defect.snippet, defect.replacement))
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                               *defect.tests], cwd=tree, env=env, capture_output=True, text=True)
    finally:
        target.write_text(original)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit() and any(
        w in ln for w in (" passed", " failed", " error", " skipped"))] or \
        [ln for ln in proc.stdout.splitlines() if "no tests ran" in ln]
    summary = lines[-1] if lines else proc.stdout[-300:]
    if proc.returncode == 1 and " failed" in summary:                 # 1: tests failed (not: none ran, an error)
        return KILLED, summary
    # every test skipped (exit status 5 when the skip is the module's own): the defect is not judged here
    skipped_only = proc.returncode in (0, 5) and " skipped" in summary and not any(
        w in summary for w in (" passed", " failed", " error"))
    return (NOT_JUDGED if skipped_only else SURVIVED), summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", default="", help="only the defects whose name holds this text")
    args = ap.parse_args()
    chosen = [d for d in DEFECTS if args.k in d.name]
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="runtime-defects-") as tmp:
        tree = Path(tmp)
        for f in files:
            if (REPO / f).is_file():
                (tree / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / f, tree / f)
        for i, defect in enumerate(chosen, 1):
            outcome, summary = run(defect, tree)
            outcomes.append(outcome)
            print(f"[{i}/{len(chosen)}] {outcome} {defect.name}: {summary}", flush=True)
    unjudged = outcomes.count(NOT_JUDGED)
    print(f"{outcomes.count(KILLED)} of {len(chosen)} defects fail their tests"
          + (f"; {unjudged} not judged here (their tests skipped: they need CUDA, or Triton on PYTHONPATH"
             " with TRITON_INTERPRET=1)" if unjudged else ""))
    return 1 if SURVIVED in outcomes else 2 if unjudged else 0


if __name__ == "__main__":
    sys.exit(main())
