#!/usr/bin/env bash
# A stand-in port in bash that prints its plan in startup lines, as many engines do; planned through
# `plan.log`: the engine file's regexes read these lines, nothing else. Run:
#   port.sh --dry-run --method M --k K --max-num-seqs N --max-num-batched-tokens T --max-model-len L
#           --kv-cache-bytes B [--draft DIR] [--defects LIST]
# The `kv pool:` line is the pool's ledger: attention KV, recurrent state and draft KV, each a store of the one
# allocation of bound_bytes. Sound: the draft KV is one of them. Defects: draft-kv-outside-bound -> one draft KV
# store per batch row beside the pool (bug 1): the pool's line itemizes no draft KV, the store's own lines say it.
set -euo pipefail
draft="" defects=""
while (( $# )); do
  case "$1" in
    --dry-run) ;;
    --method) method=$2; shift ;;
    --k) k=$2; shift ;;
    --max-num-seqs) max_num_seqs=$2; shift ;;
    --max-num-batched-tokens) mnbt=$2; shift ;;
    --max-model-len) max_model_len=$2; shift ;;
    --kv-cache-bytes) kv_bytes=$2; shift ;;
    --draft) draft=$2; shift ;;
    --defects) defects=$2; shift ;;
    *) echo "port: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
cat > /dev/null
json_int() { grep -o "\"$1\": *[0-9]*" "$2" | head -1 | grep -o '[0-9]*$'; }

echo "port 0.2.0 dry run: method=$method k=$k"
if [[ -n "$draft" && "$method" == dflash ]]; then
  block=$(json_int block_size "$draft/config.json" || echo 0)
  if (( block > 0 && k > block - 1 )); then
    echo "FATAL: num_speculative_tokens $k exceeds the DFlash drafter's block: at most $((block - 1)) drafts per step"
    exit 3
  fi
fi
case "$method" in
  dflash) slots=0; lookahead=$((k + 1)) ;;
  draft_model) slots=1; lookahead=$k ;;
  pard) slots=$k; lookahead=$k ;;
  p-eagle) slots=$((k - 1)); lookahead=$k ;;
  ngram) slots=0; lookahead=0 ;;
  *) slots=0; lookahead=$k ;;
esac
active=$max_num_seqs
if (( lookahead > 0 && mnbt / lookahead < active )); then active=$((mnbt / lookahead)); fi
echo "scheduler: max_num_batched_tokens=$mnbt max_num_scheduled_tokens=$mnbt drafting_slots_per_request=$slots lookahead_tokens=$lookahead max_num_seqs=$max_num_seqs max_active_seqs=$active"
echo "kv cache: bound_bytes=$kv_bytes (--kv-cache-memory-bytes)"
per_request=0
if [[ -n "$draft" ]]; then
  layers=$(json_int num_hidden_layers "$draft/config.json")
  heads=$(json_int num_key_value_heads "$draft/config.json")
  head_dim=$(json_int head_dim "$draft/config.json")
  pages=$(( (max_model_len + 15) / 16 + 1 ))
  per_request=$(( pages * 16 * layers * 2 * heads * head_dim * 2 ))
fi
total=$(( per_request * max_num_seqs ))
# The pool: its draft KV share (none with the defect: the store is beside it), the rest split evenly between
# attention KV and recurrent state.
if [[ -n "${kv_bytes:-}" ]]; then
  in_pool=$total inside=", every store inside bound_bytes"
  if [[ ",$defects," == *",draft-kv-outside-bound,"* ]]; then in_pool=0 inside=""; fi
  if (( in_pool > kv_bytes )); then in_pool=$kv_bytes; fi
  attention=$(( (kv_bytes - in_pool) / 2 ))
  echo "kv pool: attention_kv=$attention recurrent_state=$(( kv_bytes - in_pool - attention )) draft_kv=$in_pool bytes$inside"
fi
if [[ -n "$draft" && ",$defects," == *",draft-kv-outside-bound,"* ]]; then
  mib() { awk -v b="$1" 'BEGIN { printf "%.3f", b / 1048576 }'; }
  echo "draft speculative context is limited to $((pages * 16)) tokens ($pages pages x 16, $(mib $per_request) MiB per concurrent request across $layers draft layers, so $(mib $total) MiB of device memory at max_num_seqs $max_num_seqs — NOT counted by gpu_memory_utilization)"
  echo "draft kv store: $per_request bytes per request, $total bytes in all"
fi
echo "port: plan done"
