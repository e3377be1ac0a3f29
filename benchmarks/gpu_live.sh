#!/usr/bin/env bash
# Live parity on one GPU host with no network, one step per argument (each fits one 10-minute call).
#
#   bash benchmarks/gpu_live.sh OUT STEP...
#
#   install      reassemble the oracle pack from $STASH/*/part-* (a tar of `conformance envs pack vllm` split in
#                pieces), run its install.sh into /tmp/vllm-pack/site, and install the framework's own
#                needs (wheels in $STASH/*/fw/*.whl) into /tmp/fw-site
#   install-fw   only the framework's own needs, from $FW_WHEELS (a glob of wheels), for steps without vLLM
#   golden-2b    $GOLDEN_ENGINES' (default vllm) live golden of live-2b-dflash-k8 (pytest --snapshot-update)
#   golden-27b   vLLM's live golden of live-27b-dflash-c32-k8
#   judged       conformance run --live on live-2b-dflash-k8 of $ENGINES (default: reference; e.g. the live
#                ports of examples/live-port) against vLLM's golden recorded on this card
#   reference-N  the unchanged reference served N more times on live-2b-dflash-k8 (N = 1..3), each judged
#   same-run     start (in the background: it outlasts one call) `conformance run --live` of vLLM, the
#                reference and the four live ports of examples/live-port on live-2b-dflash-k8: every engine
#                compared with vLLM as served in this run on this card; report in $OUT/same-run/
#   same-run-pytest  the other face, in the background: `pytest suites/live -m gpu` of vLLM, the reference and
#                the slowed port on the same case; verdicts in $OUT/same-run-pytest/verdicts.jsonl
#   engine-tests the reference engine's GPU tests of the pipelined step (lossless, acceptance models, chain kernel)
#                and of its kernels (fla's packed chunked call among them)
#   wait         wait (at most $WAIT_S, default 540 s) for the background step, then print its last lines
#
# Goldens are recorded into a copy of goldens/ at $GOLDENS (DFLASH_CONFORMANCE_GOLDENS) so later steps
# of the same machine read them. Every step writes under /tmp/gpu-out (kept while the machine is held);
# at the end that folder and the live goldens are packed into one file, RESULTS/gpu-live.tgz.
set -uo pipefail
RESULTS=${1:?usage: gpu_live.sh RESULTS STEP...}; shift
OUT=/tmp/gpu-out
STASH=${STASH:-/tmp/stash}
PACK=${PACK:-/tmp/vllm-pack}
GOLDENS=${GOLDENS:-/tmp/goldens}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 COLUMNS=200
export PYTHONPATH="$PWD:/tmp/fw-site${PYTHONPATH:+:$PYTHONPATH}"
export DFLASH_CONFORMANCE_GOLDENS=$GOLDENS
mkdir -p "$OUT" "$RESULTS"
[ -d "$GOLDENS" ] || cp -r goldens "$GOLDENS"
pack_results() { mkdir -p "$OUT/goldens-live"; cp -r "$GOLDENS"/live/. "$OUT/goldens-live/" 2>/dev/null
                 tar czf "$RESULTS/gpu-live.tgz" -C "$OUT" .; }
trap pack_results EXIT
trap 'exit 130' INT TERM
# each framework command under a deadline inside the call's: SIGINT lets it stop its engine and write what it measured
T=(timeout -s INT -k 30 "${STEP_TIMEOUT_S:-540}")
VLLM_SET=(); [ -f "$PACK/oracle-pack.json" ] && VLLM_SET=(--live-set "vllm=$PACK/bin/vllm" --oracle-pack "$PACK")

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
    install-fw)
      mkdir -p /tmp/fw-site
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fw-site ${FW_WHEELS:?} || exit 1
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/gpu.txt"
      ;;
    golden-2b|golden-27b)
      case_id=live-2b-dflash-k8; [ "$step" = golden-27b ] && case_id=live-27b-dflash-c32-k8
      "${T[@]}" python3 -m pytest -p conformance.plugin suites/live -m gpu --engines "${GOLDEN_ENGINES:-vllm}" --cases "$case_id" \
        "${VLLM_SET[@]}" --snapshot-update --snapshot-no-cleanup -rA -q -p no:cacheprovider --verdicts-out "$OUT/$step-${GOLDEN_ENGINES:-vllm}-verdicts.jsonl" \
        2>&1 | tee "$OUT/$step-${GOLDEN_ENGINES:-vllm}.log" | tail -40
      ;;
    judged)
      "${T[@]}" python3 -m conformance run --live --cases live-2b-dflash-k8 --engines "${ENGINES:-reference}" \
        --set "vllm=$PACK/bin/vllm" --out /tmp/reports 2>&1 | tee "$OUT/judged-$(date -u +%H%M%S).log" | tail -60
      run=$(ls -td /tmp/reports/2* | head -1)
      mkdir -p "$OUT/judged-${run##*/}"; cp "$run"/observations.jsonl "$run"/index.html "$run"/junit.xml "$run"/run.json "$OUT/judged-${run##*/}/" 2>/dev/null
      ;;
    reference-[123])
      for i in $(seq 1 "${step#reference-}"); do
        "${T[@]}" python3 -m conformance run --live --cases live-2b-dflash-k8 --engines reference --out /tmp/reports-ref \
          2>&1 | tee "$OUT/reference-$i.log" | grep -E "live\.|pass:|FAIL|ERROR" | tail -20
        run=$(ls -td /tmp/reports-ref/2* | head -1); mkdir -p "$OUT/reference-$i"
        cp "$run"/observations.jsonl "$run"/junit.xml "$OUT/reference-$i/" 2>/dev/null
      done
      ;;
    engine-tests)
      "${T[@]}" python3 -m pytest tests/engine_under_test/test_pipelined_step.py tests/engine_under_test/test_gpu_lossless.py \
        tests/engine_under_test/test_chain_kernel.py tests/engine_under_test/test_gpu_kernels.py -m gpu -q -p no:randomly -p no:cacheprovider 2>&1 \
        | tee "$OUT/engine-tests.log" | tail -15
      ;;
    same-run)
      mkdir -p "$OUT/same-run"; [ -f "$OUT/same-run/rc" ] && mv "$OUT/same-run" "$OUT/same-run-1" && mkdir -p "$OUT/same-run"
      ports=examples/live-port/engine.yaml,examples/live-port/engine-slow.yaml,examples/live-port/engine-acceptance.yaml,examples/live-port/engine-draft-outside.yaml
      setsid bash -c "python3 -m conformance run --live --cases ${LIVE_CASE:-live-2b-dflash-k8} --engines ${SAME_RUN_ENGINES:-vllm,reference,$ports} \
          ${VLLM_SET[*]/--live-set/--set} --out /tmp/reports-same > $OUT/same-run/run.log 2>&1;
          echo \$? > $OUT/same-run/rc; run=\$(ls -td /tmp/reports-same/2* | head -1);
          cp \$run/observations.jsonl \$run/index.html \$run/junit.xml \$run/run.json $OUT/same-run/" \
          < /dev/null > /dev/null 2>&1 &
      echo $! > /tmp/bg.pid; echo "started same-run, pid $(cat /tmp/bg.pid)"
      ;;
    same-run-pytest)
      mkdir -p "$OUT/same-run-pytest"
      setsid bash -c "python3 -m pytest -p conformance.plugin suites/live -m gpu --cases ${LIVE_CASE:-live-2b-dflash-k8} \
          --engines vllm,reference,examples/live-port/engine-slow.yaml ${VLLM_SET[*]} \
          -rA -q -p no:cacheprovider --basetemp /tmp/bt-pytest --verdicts-out $OUT/same-run-pytest/verdicts.jsonl \
          --parity-report $OUT/same-run-pytest/report > $OUT/same-run-pytest/pytest.log 2>&1;
          echo \$? > $OUT/same-run-pytest/rc" < /dev/null > /dev/null 2>&1 &
      echo $! > /tmp/bg.pid; echo "started same-run-pytest, pid $(cat /tmp/bg.pid)"
      ;;
    wait)
      pid=$(cat /tmp/bg.pid 2>/dev/null); deadline=$((SECONDS + ${WAIT_S:-540}))
      while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "still running (pid $pid)"; else echo "done"; fi
      for log in "$OUT"/same-run/run.log "$OUT"/same-run-pytest/pytest.log; do
        [ -f "$log" ] && { echo "--- $log"; tail -c 6000 "$log"; }
      done
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
