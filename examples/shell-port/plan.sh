#!/usr/bin/env bash
# A stand-in port's planner in bash, planned through `plan.command`: it reads its knobs from argv
# (the engine file fills them from the case), ignores the case JSON on stdin, and prints one
# observation on stdout. It plans budgets only (vLLM 0.33's drafting table); its memory figures are
# null, so the memory checks say it did not report them.
# Defects (comma list in $7): lookahead-k  -> DFlash lookahead k instead of k + 1.
set -euo pipefail
case_id=$1 method=$2 k=$3 max_num_seqs=$4 max_num_batched_tokens=$5 profile=$6 defects=$7
cat > /dev/null

case "$method" in
  dflash)      slots=0;        lookahead=$((k + 1)) ;;
  draft_model) slots=1;        lookahead=$k ;;
  pard)        slots=$k;       lookahead=$k ;;
  p-eagle)     slots=$((k - 1)); lookahead=$k ;;
  ngram)       slots=0;        lookahead=0 ;;
  *)           slots=0;        lookahead=$k ;;
esac
if [[ ",$defects," == *",lookahead-k,"* ]]; then lookahead=$k; fi

active=$max_num_seqs
if (( lookahead > 0 && max_num_batched_tokens / lookahead < active )); then
  active=$((max_num_batched_tokens / lookahead))
fi

cat <<JSON
{"schema_version": "1", "case_id": "$case_id", "engine": {"name": "shell-port", "version": "0.1.0"},
 "mode": "plan", "status": "ok", "message": null, "device": {"profile": "$profile", "hardware": null},
 "budget": {"max_num_batched_tokens": $max_num_batched_tokens, "max_num_scheduled_tokens": $max_num_batched_tokens,
            "drafting_slots_per_request": $slots, "lookahead_tokens": $lookahead,
            "max_num_seqs": $max_num_seqs, "max_active_seqs": $active},
 "memory": {"bound_bytes": null, "ledger_bytes": {"attention_kv": null, "recurrent_state": null, "draft_kv": null},
            "outside_bound": [], "max_concurrency": null,
            "per_sequence": {"attention_kv_bytes": null, "recurrent_state_bytes": null, "draft_kv_bytes": null,
                             "state_slots": null},
            "pool": {"num_blocks": null, "block_size_tokens": null, "page_size_bytes": null, "unified": null}},
 "trace": null, "throughput": null,
 "provenance": {"functions": ["examples/shell-port/plan.sh"], "overrides": [], "glue": [],
                "mapping": {"method": "$method", "k": $k}}}
JSON
