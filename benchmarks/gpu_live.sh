#!/usr/bin/env bash
# Live parity on one GPU host with no network, one step per argument (each fits one 10-minute call).
#
#   bash benchmarks/gpu_live.sh OUT STEP...
#
#   install      reassemble the oracle pack from $STASH/*/part-* (a tar of `conformance envs pack vllm` split in
#                pieces), run its install.sh into /tmp/vllm-pack/site, and install the framework's own
#                needs (wheels in $STASH/*/fw/*.whl) into /tmp/fw-site
#   golden-2b    vLLM's live golden of live-2b-dflash-k8 (pytest suites/live -m gpu --snapshot-update)
#   golden-27b   vLLM's live golden of live-27b-dflash-c32-k8
#   judged       conformance run --live on live-2b-dflash-k8: the reference and the live ports ($PORTS)
#                against vLLM's golden recorded on this card
#   reference-3  the unchanged reference served three times on live-2b-dflash-k8, each judged
#
# Goldens are recorded into a copy of goldens/ at $GOLDENS (DFLASH_CONFORMANCE_GOLDENS) so later steps
# of the same machine read them; each step copies what it wrote to OUT.
set -uo pipefail
OUT=${1:?usage: gpu_live.sh OUT STEP...}; shift
STASH=${STASH:-/tmp/stash}
PACK=/tmp/vllm-pack
GOLDENS=${GOLDENS:-/tmp/goldens}
PORTS=${PORTS:-}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD:/tmp/fw-site${PYTHONPATH:+:$PYTHONPATH}"
export DFLASH_CONFORMANCE_GOLDENS=$GOLDENS
mkdir -p "$OUT"
[ -d "$GOLDENS" ] || cp -r goldens "$GOLDENS"
VLLM_SET=(--live-set "vllm=$PACK/bin/vllm" --oracle-pack "$PACK")

for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case "$step" in
    install)
      mkdir -p "$PACK" /tmp/fw-site
      cat "$STASH"/*/part-* | tar xf - -C "$PACK" || exit 1
      bash "$PACK/install.sh" > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fw-site "$STASH"/*/fw/*.whl || exit 1
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
      "$PACK/bin/vllm" --version | tee -a "$OUT/gpu.txt"
      python3 -c "import torch; print('host torch', torch.__version__, torch.version.cuda, torch.cuda.mem_get_info())" | tee -a "$OUT/gpu.txt"
      ;;
    golden-2b|golden-27b)
      case_id=live-2b-dflash-k8; [ "$step" = golden-27b ] && case_id=live-27b-dflash-c32-k8
      python3 -m pytest -p conformance.plugin suites/live -m gpu --engines vllm --cases "$case_id" \
        "${VLLM_SET[@]}" --snapshot-update -rA -q -p no:cacheprovider --verdicts-out "$OUT/$step-verdicts.jsonl" \
        2>&1 | tee "$OUT/$step.log" | tail -40
      mkdir -p "$OUT/goldens"; cp "$GOLDENS"/live/test_live/*.json "$OUT/goldens/" 2>/dev/null
      ;;
    judged)
      python3 -m conformance run --live --cases live-2b-dflash-k8 --engines "reference${PORTS:+,$PORTS}" \
        --set "vllm=$PACK/bin/vllm" --out /tmp/reports 2>&1 | tee "$OUT/judged.log" | tail -60
      run=$(ls -td /tmp/reports/2* | head -1); mkdir -p "$OUT/judged"
      cp "$run"/observations.jsonl "$run"/index.html "$run"/junit.xml "$run"/run.json "$OUT/judged/" 2>/dev/null
      ;;
    reference-3)
      for i in 1 2 3; do
        python3 -m conformance run --live --cases live-2b-dflash-k8 --engines reference --out /tmp/reports-ref \
          2>&1 | tee "$OUT/reference-$i.log" | grep -E "live\.|pass:|FAIL|ERROR" | tail -20
        run=$(ls -td /tmp/reports-ref/2* | head -1); mkdir -p "$OUT/reference-$i"
        cp "$run"/observations.jsonl "$run"/junit.xml "$OUT/reference-$i/" 2>/dev/null
      done
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
