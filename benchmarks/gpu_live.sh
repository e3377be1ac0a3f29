#!/usr/bin/env bash
# Live parity on one GPU host with no network, one step per argument (each fits one 10-minute call).
#
#   bash benchmarks/gpu_live.sh OUT STEP...
#
#   install      reassemble the oracle pack from $STASH/*/part-* (a tar of `conformance envs pack vllm` split in
#                pieces by benchmarks/gpu_pieces.sh, checked against its pack.sha256 when sent), run its
#                install.sh into /tmp/vllm-pack/site, and install the framework's own
#                needs (wheels in $STASH/*/fw/*.whl) into /tmp/fw-site
#   install-fw   only the framework's own needs, from $FW_WHEELS (a glob of wheels), for steps without vLLM
#   install-sglang  reassemble SGLang's pack from $STASH/s*/spart-* (a tar of `conformance envs pack sglang`
#                without the wheels it shares with vLLM's pack, listed in shared-with-vllm-pack.txt and linked
#                from there or from wheels sent loose in $STASH/*/) and run its install.sh into
#                /tmp/sglang-pack/site (after `install`); a $STASH/*/flashinfer-jit-cache.tgz is unpacked into
#                SGLang's cache first
#   golden-2b    $GOLDEN_ENGINES' (default vllm) live golden of live-2b-dflash-k8 (pytest --snapshot-update)
#   golden-27b   the same for live-27b-dflash-c32-k8
#   golden-bg    both cases' goldens of $GOLDEN_ENGINES in one pytest session, in the background (it outlasts
#                one call); log and verdicts in $OUT/golden-bg/
#   judged       conformance run --live on live-2b-dflash-k8 of $ENGINES (default: reference; e.g. the live
#                ports of examples/live-port) against vLLM's golden recorded on this card
#   reference-N  the unchanged reference served N more times on live-2b-dflash-k8 (N = 1..3), each judged
#   reference-expandable  the reference served once more with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (its
#                server inherits it): the footprint at c = 32 with fewer split segments; $OUT/reference-expandable/
#   same-run     start (in the background: it outlasts one call) `conformance run --live` of vLLM, the
#                reference and the four live ports of examples/live-port on live-2b-dflash-k8: every engine
#                compared with vLLM as served in this run on this card; report and the engines' logs in $OUT/same-run/
#   same-runs    $SAME_RUNS (default 3) same-run ladders one after another, as one background job, each in
#                $OUT/same-run-K/ (K = 1, 2, ..., on after those of an earlier same-runs): the runs that
#                `live_tables.py --across-runs` takes as its samples; `wait` names each run's status
#   same-run-pytest  the other face, in the background: `pytest suites/ -m gpu` of $PYTEST_ENGINES (default
#                vLLM, the reference and the slowed port) on the same case; verdicts in
#                $OUT/same-run-pytest/verdicts.jsonl
#   both-faces   same-run, then same-run-pytest, as one background job (no idle card between them)
#   engine-tests the reference engine's GPU tests of the pipelined step (lossless, acceptance models, chain kernel)
#                and of its kernels (fla's packed chunked call among them); ENGINE_TEST_FILES picks some of them;
#                then every test of the kernels' own files (KERNEL_TESTS: the prompt-pass conv, the norms, the
#                gates; not marked gpu, since on a CPU they run under Triton's interpreter)
#   engine-tests-bg  the same from a copy of the checkout, in the background (it needs only the framework's own
#                wheels, so it can run while the oracle packs are still arriving); log in $OUT/engine-tests.log,
#                its pid in $PIDS/engine-tests.pid (PIDS: default /tmp; `wait` does not wait for it; a later serving
#                step does); with THEN_STEPS="STEP..." the same job runs those steps after the tests, in order
#                (steps that need no oracle pack: mixed-steps, reference-N, reference-expandable; the card is idle
#                while the packs arrive), log $OUT/then-steps-bg.log
#   mixed-steps  benchmarks/mixed_step_profile.py on the card (2b shapes, c = 32 prompts of 512 tokens, then c = 1):
#                each step of a wave, and its eager steps under the profiler, as the engine runs them and then as
#                before split mixed steps, ragged groups and prefill graphs (--whole-mixed-steps
#                --equal-length-groups --eager-prefill), and a closed-loop wave (two prompts a slot, 128 output
#                tokens), on one card; $OUT/mixed-steps/{now,before,c1-now,c1-before,closed-loop}/mixed-steps.json
#                (needs only install-fw)
#   save-caches  OUT/compile-caches.tgz, beside gpu-live.tgz: vLLM's compile cache (~/.cache/vllm/torch_compile_cache:
#                its compiled graphs, with their Inductor and Triton kernels) and Triton's own (~/.triton/cache: fla's
#                and the engine's kernels, and those of vLLM's initial profiling run: 99.5 s of its first start on
#                an H100); Triton's is left out when the two would pass 3 x 15 MiB, and a file over 15 MiB is cut
#                into parts OUT/compile-caches.tgz.part-NN (sent back whole or in parts). vLLM's first start on
#                a machine compiles for minutes (404 s on an H100; 143 s when started again there); sent back in a
#                stash folder ($STASH/*/compile-caches.tgz) to a machine with the same kind of card, `install` and
#                `install-fw` unpack it into the home folder first. vLLM reuses its part only when its config hash
#                matches: the same pack, case and checkout path.
#   wait         wait (at most $WAIT_S, default 540 s) for the background step, then print its last lines
#
# Goldens are recorded into a copy of goldens/ at $GOLDENS (DFLASH_CONFORMANCE_GOLDENS) so later steps
# of the same machine read them. Every step writes under $GPU_OUT (default /tmp/gpu-out; kept while the machine is held);
# at the end that folder and the live goldens are packed into one file, RESULTS/gpu-live.tgz.
set -uo pipefail
RESULTS=${1:?usage: gpu_live.sh RESULTS STEP...}; shift
OUT=${GPU_OUT:-/tmp/gpu-out}
STASH=${STASH:-/tmp/stash}
PACK=${PACK:-/tmp/vllm-pack}
SPACK=${SPACK:-/tmp/sglang-pack}
GOLDENS=${GOLDENS:-/tmp/goldens}
PIDS=${PIDS:-/tmp}                                   # the background steps' pid files (bg.pid, engine-tests.pid)
REPORTS_SAME=${REPORTS_SAME:-/tmp/reports-same}     # the same-run steps' `conformance run --out`
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 COLUMNS=200
export PYTHONPATH="$PWD:/tmp/fw-site${PYTHONPATH:+:$PYTHONPATH}"
export DFLASH_CONFORMANCE_GOLDENS=$GOLDENS
mkdir -p "$OUT" "$RESULTS"
[ -d "$GOLDENS" ] || cp -r goldens "$GOLDENS"
# what comes back is a copy of $OUT (background steps still write there) with the host's checkout path written
# as <repo> (&lt;repo&gt; in HTML), as goldens write it
pack_results() { mkdir -p "$OUT/goldens-live"; cp -r "$GOLDENS"/live/. "$OUT/goldens-live/" 2>/dev/null
                 rm -rf "$OUT.packed" && cp -r "$OUT" "$OUT.packed"
                 python3 - "$OUT.packed" "$PWD" <<'PY'
import sys
from pathlib import Path
out = Path(sys.argv[1])
for f in out.rglob("*"):
    for repo in (sys.argv[2].encode(), b"/tmp/engine-tests-tree"):    # the checkout, and the background job's copy
        if f.is_file() and repo in (b := f.read_bytes()):
            f.write_bytes(b.replace(repo, b"&lt;repo&gt;" if f.suffix == ".html" else b"<repo>"))
PY
                 tar czf "$RESULTS/gpu-live.tgz" -C "$OUT.packed" .; }
[ -n "${IN_ENGINE_TESTS_JOB:-}" ] || trap pack_results EXIT     # a step inside the background job: the caller packs
trap 'exit 130' INT TERM
# each framework command under a deadline inside the call's: SIGINT lets it stop its engine and write what it measured
T=(timeout -s INT -k 30 "${STEP_TIMEOUT_S:-540}")
# save-caches: what comes back from the GPU host is files of at most 16 MiB, 64 MiB in all, beside gpu-live.tgz
CACHE_PART_MIB=15
CACHE_PARTS_MAX=3
ENGINE_TESTS=(tests/engine_under_test/runtime/test_pipelined_step.py tests/engine_under_test/runtime/test_gpu_lossless.py
              tests/engine_under_test/runtime/test_gpu_prefill_graphs.py
              tests/engine_under_test/runtime/test_chain_kernel.py tests/engine_under_test/model/test_gpu_kernels.py)
# the kernels' own tests: not marked gpu (on a CPU they run under Triton's interpreter), every test of them on a card
KERNEL_TESTS=(tests/engine_under_test/model/test_gdn_prefill_conv_kernel.py tests/engine_under_test/model/test_fused_norms.py
              tests/engine_under_test/model/test_fused_gates.py)
# ENGINE_TEST_FILES="a.py b.py": only those (a short hold: the files that test what changed), the kernels' tests too
[ -n "${ENGINE_TEST_FILES:-}" ] && read -ra ENGINE_TESTS <<< "$ENGINE_TEST_FILES"
# a serving step needs the card to itself: it waits for the engine's GPU tests run in the background
wait_engine_tests() { local pid; [ -n "${IN_ENGINE_TESTS_JOB:-}" ] && return 0     # the job itself: nothing to wait for
                      pid=$(cat $PIDS/engine-tests.pid 2>/dev/null) || return 0
                      while kill -0 "$pid" 2>/dev/null; do sleep 2; done; }
# the installed oracle packs, as options (read again before each step: an install step adds one)
oracle_set() { ORACLE_SET=(); [ -f "$PACK/oracle-pack.json" ] && ORACLE_SET=(--live-set "vllm=$PACK/bin/vllm" --oracle-pack "$PACK")
               [ -f "$SPACK/site/.oracle-pack.sha256" ] && ORACLE_SET+=(--live-set "sglang_python=$SPACK/bin/python" --oracle-pack "$SPACK"); }

# compile caches of an earlier hold on the same kind of card, sent as $STASH/*/compile-caches.tgz (save-caches made it)
# (whole, or as the parts compile-caches.tgz.part-NN that save-caches cuts a large one into)
restore_caches() { local c d
                   for c in "$STASH"/*/compile-caches.tgz; do
                     [ -f "$c" ] || continue
                     tar xzf "$c" -C "$HOME" && echo "compile caches from $c: $(du -sh "$HOME/.cache/vllm" 2>/dev/null | cut -f1) vLLM, $(du -sh "$HOME/.triton/cache" 2>/dev/null | cut -f1) Triton"
                   done
                   for d in "$STASH"/*/; do
                     ls "$d"compile-caches.tgz.part-* > /dev/null 2>&1 || continue
                     cat "$d"compile-caches.tgz.part-* | tar xz -C "$HOME" && echo "compile caches from the parts in $d: $(du -sh "$HOME/.cache/vllm" 2>/dev/null | cut -f1) vLLM, $(du -sh "$HOME/.triton/cache" 2>/dev/null | cut -f1) Triton"
                   done; }
# the two faces' commands, each writing its folder under $OUT (one shell line each, run in the background)
# same_run_cmd [FOLDER]: into $OUT/FOLDER (default same-run: an earlier one there is moved aside to same-run-<time>)
same_run_cmd() {
  local ports=examples/live-port/engine.yaml,examples/live-port/engine-slow.yaml,examples/live-port/engine-acceptance.yaml,examples/live-port/engine-draft-outside.yaml
  local dir="$OUT/${1:-same-run}"
  [ -z "${1:-}" ] && [ -f "$dir/rc" ] && mv "$dir" "$OUT/same-run-$(date +%s)"
  mkdir -p "$dir"
  echo "python3 -m conformance run --live --cases ${LIVE_CASE:-live-2b-dflash-k8} --engines ${SAME_RUN_ENGINES:-vllm,reference,$ports} \
        ${ORACLE_SET[*]/--live-set/--set} --out $REPORTS_SAME > $dir/run.log 2>&1;
        echo \$? > $dir/rc; run=\$(ls -td $REPORTS_SAME/2* | head -1);
        cp \$run/observations.jsonl \$run/verdicts.jsonl \$run/index.html \$run/junit.xml \$run/run.json $dir/;
        cp -r \$run/logs $dir/logs"
}
pytest_face_cmd() {
  mkdir -p "$OUT/same-run-pytest"
  echo "python3 -m pytest -p conformance.pytest_plugin.plugin suites/ -m gpu --cases ${LIVE_CASE:-live-2b-dflash-k8} \
        --engines ${PYTEST_ENGINES:-vllm,reference,examples/live-port/engine-slow.yaml} ${ORACLE_SET[*]} \
        -rA -q -p no:cacheprovider --basetemp /tmp/bt-pytest --verdicts-out $OUT/same-run-pytest/verdicts.jsonl \
        --parity-report $OUT/same-run-pytest/report > $OUT/same-run-pytest/pytest.log 2>&1;
        echo \$? > $OUT/same-run-pytest/rc"
}
# start_bg NAME COMMAND: COMMAND in its own session (it outlasts the call); `wait` waits for it
start_bg() { setsid bash -c "$2" < /dev/null > /dev/null 2>&1 &
             echo $! > $PIDS/bg.pid; echo "started $1, pid $(cat $PIDS/bg.pid)"; }

for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  oracle_set
  case "$step" in
    install)
      mkdir -p "$PACK" /tmp/fw-site
      # a piece missing or cut short: the checksum gpu_pieces.sh sent along says so before tar does
      for sum in "$STASH"/*/pack.sha256; do
        [ -f "$sum" ] || continue
        [ "$(cat "$STASH"/*/part-* | sha256sum | cut -d' ' -f1)" = "$(cat "$sum")" ] \
          || { echo "the pieces $STASH/*/part-* do not join into the pack $sum names ($(ls "$STASH"/*/part-* | wc -l) pieces)"; exit 1; }
        echo "pieces joined: checksum $(cut -c1-12 "$sum") matches"; break
      done
      cat "$STASH"/*/part-* | tar xf - -C "$PACK" || exit 1
      restore_caches
      bash "$PACK/install.sh" > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fw-site "$STASH"/*/fw/*.whl || exit 1
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
      "$PACK/bin/vllm" --version | tee -a "$OUT/gpu.txt"
      python3 -c "import torch; print('host torch', torch.__version__, torch.version.cuda, torch.cuda.mem_get_info())" | tee -a "$OUT/gpu.txt"
      ;;
    install-sglang)
      mkdir -p "$SPACK"
      cat "$STASH"/s*/spart-* | tar xf - -C "$SPACK" || exit 1
      # the wheels SGLang's pack shares with vLLM's: from vLLM's pack, else from pieces sent loose ($STASH/*/*.whl)
      while read -r w; do
        [ -f "$SPACK/wheels/$w" ] && continue
        src=$(ls "$PACK/wheels/$w" "$STASH"/*/"$w" 2>/dev/null | head -1)
        [ -n "$src" ] && ln "$src" "$SPACK/wheels/$w" || { echo "missing wheel $w (not in $PACK/wheels nor $STASH/*/)"; exit 1; }
      done < "$SPACK/shared-with-vllm-pack.txt"
      ldd --version | head -1 | tee -a "$OUT/gpu.txt"
      if ! bash "$SPACK/install.sh" > "$OUT/install-sglang.log" 2>&1; then
        tail -5 "$OUT/install-sglang.log"
        echo "install.sh refused a wheel: installing with the pack's platform tags given to pip" | tee -a "$OUT/gpu.txt"
        rm -rf "$SPACK/site"
        python3 -m pip install --isolated --disable-pip-version-check --no-index --no-deps --no-compile \
          --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 \
          --target "$SPACK/site" "$SPACK"/wheels/*.whl >> "$OUT/install-sglang.log" 2>&1 || { tail -20 "$OUT/install-sglang.log"; exit 1; }
        sha256sum "$SPACK/oracle-pack.json" | cut -d' ' -f1 > "$SPACK/site/.oracle-pack.sha256"
      fi
      # FlashInfer's JIT-compiled kernels of an earlier run on this kind of card (sm90), if sent: SGLang's first
      # start then skips compiling them with the host's nvcc (about two minutes)
      for jit in "$STASH"/*/flashinfer-jit-cache.tgz; do
        [ -f "$jit" ] && mkdir -p "$HOME/.cache/sglang/.cache" && tar xzf "$jit" -C "$HOME/.cache/sglang/.cache" && echo "JIT cache from $jit"
      done
      "$SPACK/bin/python" -c "import sglang, torch, sgl_kernel; print('sglang', sglang.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -3 | tee -a "$OUT/gpu.txt"
      ;;
    install-fw)
      mkdir -p /tmp/fw-site
      restore_caches
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fw-site ${FW_WHEELS:?} || exit 1
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/gpu.txt"
      ;;
    golden-2b|golden-27b)
      case_id=live-2b-dflash-k8; [ "$step" = golden-27b ] && case_id=live-27b-dflash-c32-k8
      "${T[@]}" python3 -m pytest -p conformance.pytest_plugin.plugin suites/live -m gpu --engines "${GOLDEN_ENGINES:-vllm}" --cases "$case_id" \
        "${ORACLE_SET[@]}" --snapshot-update --snapshot-no-cleanup -rA -q -p no:cacheprovider --verdicts-out "$OUT/$step-${GOLDEN_ENGINES:-vllm}-verdicts.jsonl" \
        2>&1 | tee "$OUT/$step-${GOLDEN_ENGINES:-vllm}.log" | tail -40
      ;;
    golden-bg)
      mkdir -p "$OUT/golden-bg"
      setsid bash -c "python3 -m pytest -p conformance.pytest_plugin.plugin suites/live -m gpu --engines ${GOLDEN_ENGINES:-vllm} \
          --cases live-2b-dflash-k8,live-27b-dflash-c32-k8 ${ORACLE_SET[*]} --snapshot-update --snapshot-no-cleanup -rA -q \
          -p no:cacheprovider --basetemp /tmp/bt-golden --verdicts-out $OUT/golden-bg/verdicts.jsonl \
          > $OUT/golden-bg/pytest.log 2>&1; echo \$? > $OUT/golden-bg/rc" < /dev/null > /dev/null 2>&1 &
      echo $! > $PIDS/bg.pid; echo "started golden-bg, pid $(cat $PIDS/bg.pid)"
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
    reference-expandable)      # one ladder of the reference with the caching allocator's expandable segments
      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${T[@]}" python3 -m conformance run --live \
        --cases live-2b-dflash-k8 --engines reference --out /tmp/reports-exp 2>&1 | tee "$OUT/reference-expandable.log" \
        | grep -E "live\.|pass:|FAIL|ERROR" | tail -20
      run=$(ls -td /tmp/reports-exp/2* | head -1); mkdir -p "$OUT/reference-expandable"
      cp "$run"/observations.jsonl "$run"/junit.xml "$OUT/reference-expandable/" 2>/dev/null
      ;;
    engine-tests)
      { "${T[@]}" python3 -m pytest "${ENGINE_TESTS[@]}" -m gpu -q -p no:randomly -p no:cacheprovider 2>&1
        "${T[@]}" python3 -m pytest "${KERNEL_TESTS[@]}" -q -p no:randomly -p no:cacheprovider 2>&1; } \
        | tee "$OUT/engine-tests.log" | grep -E " passed| failed| error|^FAILED|^ERROR" | tail -15
      ;;
    engine-tests-bg)
      rm -rf /tmp/engine-tests-tree && mkdir -p /tmp/engine-tests-tree
      tar cf - --exclude=./.pieces --exclude=./.git . | tar xf - -C /tmp/engine-tests-tree
      then_steps=""      # THEN_STEPS: steps after the tests, in the same job (the card is idle otherwise)
      [ -n "${THEN_STEPS:-}" ] && then_steps="; IN_ENGINE_TESTS_JOB=1 bash benchmarks/gpu_live.sh /tmp/res-then $THEN_STEPS > $OUT/then-steps-bg.log 2>&1"
      setsid bash -c "cd /tmp/engine-tests-tree && PYTHONPATH=/tmp/engine-tests-tree:/tmp/fw-site timeout -s INT -k 30 540 python3 -m pytest ${ENGINE_TESTS[*]} \
          -m gpu -q -p no:randomly -p no:cacheprovider > $OUT/engine-tests.log 2>&1; rc=\$?; \
          timeout -s INT -k 30 300 python3 -m pytest ${KERNEL_TESTS[*]} -q -p no:randomly -p no:cacheprovider >> $OUT/engine-tests.log 2>&1 \
          || rc=\$((rc ? rc : \$?)); echo \$rc > $OUT/engine-tests.rc$then_steps" \
          < /dev/null > /dev/null 2>&1 &
      echo $! > $PIDS/engine-tests.pid; echo "started engine-tests-bg, pid $(cat $PIDS/engine-tests.pid)"
      ;;
    same-run)
      wait_engine_tests; start_bg same-run "$(same_run_cmd)"
      ;;
    same-runs)
      wait_engine_tests; cmds=""; first=1     # numbered on after an earlier same-runs' folders of this host
      for d in "$OUT"/same-run-*; do     # same-run-K, not same-run's same-run-<time>
        k=${d##*/same-run-}; [[ -d $d && $k =~ ^[0-9]{1,3}$ ]] && (( 10#$k >= first )) && first=$((10#$k + 1)); done
      for k in $(seq "$first" $((first + ${SAME_RUNS:-3} - 1))); do cmds+="$(same_run_cmd "same-run-$k"); "; done
      start_bg "same-runs (${SAME_RUNS:-3})" "$cmds"
      ;;
    same-run-pytest)
      wait_engine_tests; start_bg same-run-pytest "$(pytest_face_cmd)"
      ;;
    both-faces)
      wait_engine_tests; start_bg both-faces "$(same_run_cmd); $(pytest_face_cmd)"
      ;;
    mixed-steps)
      wait_engine_tests
      # the engine's way, then as before (mixed steps whole, equal-length groups, every prompt chunk eager);
      # c = 32 (the wave of 32 prompts) and c = 1 (one prompt's prefill: the first token)
      # closed-loop: each slot's second prompt sent when its first finishes, 128 output tokens (the ladder's
      # steady state: how many steps hold several new prompts, which the prefill graphs leave eager)
      for how in ${MIXED_HOWS:-now before c1-now c1-before closed-loop}; do     # MIXED_HOWS picks some
        flag=(); case $how in before) flag=(--whole-mixed-steps --equal-length-groups --eager-prefill);;
                              c1-now) flag=(--concurrency 1);; c1-before) flag=(--concurrency 1 --eager-prefill);;
                              closed-loop) flag=(--requests-per-slot 2 --output-tokens 128 --eager-steps 0);; esac
        "${T[@]}" python3 benchmarks/mixed_step_profile.py --out "$OUT/mixed-steps/$how" --waves "${WAVES:-2}" \
          "${flag[@]}" 2>&1 | grep -v "^USDT" | tee "$OUT/mixed-steps-$how.log" | tail -30
      done
      ;;
    save-caches)
      parts=(); for d in .cache/vllm/torch_compile_cache .triton/cache; do [ -d "$HOME/$d" ] && parts+=("$d"); done
      [ ${#parts[@]} -eq 0 ] && { echo "save-caches: no compile cache under $HOME yet (run a serving step first)"; continue; }
      tar czf "$RESULTS/compile-caches.tgz" -C "$HOME" "${parts[@]}"
      if [ "$(stat -c %s "$RESULTS/compile-caches.tgz")" -gt $((CACHE_PARTS_MAX * CACHE_PART_MIB * 1024 * 1024)) ] \
         && [ -d "$HOME/.cache/vllm/torch_compile_cache" ]; then
        echo "save-caches: $(du -h "$RESULTS/compile-caches.tgz" | cut -f1) with Triton's cache: vLLM's alone"
        tar czf "$RESULTS/compile-caches.tgz" -C "$HOME" .cache/vllm/torch_compile_cache
      fi
      echo "save-caches: $RESULTS/compile-caches.tgz, $(du -h "$RESULTS/compile-caches.tgz" | cut -f1) ($(tar tzf "$RESULTS/compile-caches.tgz" | wc -l) entries)"
      if [ "$(stat -c %s "$RESULTS/compile-caches.tgz")" -gt $((CACHE_PART_MIB * 1024 * 1024)) ]; then
        split -b "${CACHE_PART_MIB}M" -d -a 2 "$RESULTS/compile-caches.tgz" "$RESULTS/compile-caches.tgz.part-" \
          && rm "$RESULTS/compile-caches.tgz"
        echo "save-caches: in $(ls "$RESULTS"/compile-caches.tgz.part-* | wc -l) parts of at most $CACHE_PART_MIB MiB (compile-caches.tgz.part-NN)"
      fi
      ;;
    wait)
      pid=$(cat $PIDS/bg.pid 2>/dev/null); deadline=$((SECONDS + ${WAIT_S:-540}))
      while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "still running (pid $pid)"; else echo "done"; fi
      [ -f "$OUT/engine-tests.log" ] && { echo "--- engine tests (rc $(cat "$OUT/engine-tests.rc" 2>/dev/null || echo running))"; tail -5 "$OUT/engine-tests.log"; }
      for d in "$OUT"/same-run-[0-9]*; do     # same-runs' folders: each run's status and summary
        if [ -f "$d/run.log" ]; then
          echo "--- $d (rc $(cat "$d/rc" 2>/dev/null || echo running)): $(grep -E "^pass: " "$d/run.log" | tail -1)"; fi
      done
      for log in "$OUT"/same-run/run.log "$OUT"/same-run-pytest/pytest.log "$OUT"/golden-bg/pytest.log; do
        if [ -f "$log" ]; then echo "--- $log"; tail -c 6000 "$log"; fi
      done
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
