#!/usr/bin/env bash
# What an offline GPU host (an H100 or H200) needs for benchmarks/gpu_live.sh, made here (with network) in pieces
# of at most PIECE_MB megabytes each, one numbered folder a piece, for a channel that moves folders of bounded size.
#
#   bash benchmarks/gpu_pieces.sh DIR [fw] [vllm]        (both when neither is named)
#
#   fw     DIR/f0/fw/*.whl: the framework's and the reference engine's own needs that the host lacks (Python
#          3.12 wheels; the host has torch, triton, numpy, pytest, aiohttp, pyyaml, ...), for `gpu_live.sh
#          install-fw` (FW_WHEELS="$STASH/*/fw/*.whl") and `install`
#   vllm   DIR/p00/part-000, DIR/p01/part-001, ...: a tar of `conformance envs pack vllm` (the oracle's cached
#          venv at its exact versions, as Python 3.12 manylinux_2_28 wheels, with the deviations the live goldens
#          record), cut in pieces; `gpu_live.sh install` joins $STASH/*/part-* in name order, so the folders'
#          and the pieces' numbers run together. DIR/pack.sha256 is the whole tar's checksum, which `install`
#          checks when it is sent along ($STASH/*/pack.sha256)
#
# The pack is made from the oracle venv in the cache (built by scripts/setup when missing, about 4 minutes);
# its wheels are downloaded once into $WHEEL_CACHE (default ~/.cache/dflash-conformance/pack-wheels) and reused.
# Each piece and the checksum are printed at the end. Nothing here needs a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: gpu_pieces.sh DIR [fw] [vllm]}; shift
# a piece travels beside the checkout's tracked files, and the two together stay under 64 MiB (CHANNEL_MIB): by
# default a piece is what the checkout leaves of that, less 2 MiB, in whole megabytes (the checkout grows as
# results are committed; 43 MB when it held 21 MB)
CHANNEL_MIB=${CHANNEL_MIB:-64}
tree_bytes=$(git ls-files -z | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
PIECE_MB=${PIECE_MB:-$(( ((CHANNEL_MIB - 2) * 1048576 - ${tree_bytes:-0}) / 1000000 ))}
[ "$PIECE_MB" -ge 8 ] || { echo "gpu_pieces: the checkout's tracked files ($tree_bytes bytes) leave less than 8 MB a piece in $CHANNEL_MIB MiB" >&2; exit 1; }
WHEEL_CACHE=${WHEEL_CACHE:-${DFLASH_CONFORMANCE_CACHE:-$HOME/.cache/dflash-conformance}/pack-wheels}
WHAT=("$@"); [ ${#WHAT[@]} -eq 0 ] && WHAT=(fw vllm)
PY=.venv/bin/python
[ -x "$PY" ] || { echo "gpu_pieces: no .venv here: run ./scripts/setup first" >&2; exit 1; }
mkdir -p "$DIR"

# the framework's needs the host lacks: fla-core (the reference engine's Gated-DeltaNet kernels, the version its
# GPU results name), syrupy and jsonschema with its own needs, at the versions this checkout's .venv resolved
FW_PINNED=(fla-core==0.6.0)
FW_FROM_VENV=(syrupy jsonschema jsonschema-specifications referencing rpds-py)
PIP_312=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
         --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

for what in "${WHAT[@]}"; do
  case "$what" in
    fw)
      rm -rf "$DIR/f0" && mkdir -p "$DIR/f0/fw"
      pins=("${FW_PINNED[@]}")
      for name in "${FW_FROM_VENV[@]}"; do
        version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") \
          || { echo "gpu_pieces: $name is not installed in .venv (scripts/setup installs it)" >&2; exit 1; }
        pins+=("$name==$version")
      done
      echo "gpu_pieces fw: ${pins[*]}"
      "$PY" -m pip download -q "${PIP_312[@]}" -d "$DIR/f0/fw" "${pins[@]}"
      ;;
    vllm)
      work=$(mktemp -d)
      trap 'rm -rf "$work"' EXIT
      mkdir -p "$WHEEL_CACHE"
      echo "gpu_pieces vllm: packing the cached vLLM venv for Python 3.12 (wheels cached in $WHEEL_CACHE)"
      .venv/bin/conformance envs pack vllm --python 3.12 --platform manylinux_2_28_x86_64 --out "$work/pack" \
        --host-freeze benchmarks/h200-host-freeze.txt --use-host 'nvidia-*' --need nvidia-nccl-cu13 \
        --leave-out flashinfer-python opencv-python-headless pynvvideocodec tilelang tokenspeed-triton z3-solver \
        --deviation-env VLLM_USE_FLASHINFER_SAMPLER=0 --deviation-arg=--gdn-prefill-backend --deviation-arg=triton \
        --deviation-reason "FlashInfer is not carried to the GPU host, an H100 or H200 with no network (it JIT-compiles with the host's nvcc): vLLM's SM90 defaults that use it, the FlashInfer sampler and the flashinfer GDN prefill backend, are switched to the PyTorch / Triton paths" \
        --wheel-cache "$WHEEL_CACHE"
      # the wheels just downloaded stay in the cache for the next pack
      cp -n "$work/pack/wheels/"*.whl "$WHEEL_CACHE/" 2>/dev/null || true
      rm -rf "$DIR"/p[0-9][0-9]
      tar cf "$work/pack.tar" -C "$work/pack" .
      sha256sum "$work/pack.tar" | cut -d' ' -f1 > "$DIR/pack.sha256"
      split -b "${PIECE_MB}MB" -d -a 3 "$work/pack.tar" "$work/part-"
      i=0
      for part in "$work"/part-*; do
        folder=$(printf '%s/p%02d' "$DIR" "$i")
        mkdir -p "$folder" && mv "$part" "$folder/"
        i=$((i + 1))
      done
      [ "$i" -le 100 ] || { echo "gpu_pieces: $i pieces do not fit two-digit folders (raise PIECE_MB)" >&2; exit 1; }
      rm -rf "$work"; trap - EXIT
      ;;
    *) echo "gpu_pieces: unknown part $what (fw, vllm)" >&2; exit 2 ;;
  esac
done
# the pack's checksum travels in the first piece's folder, where `install` finds it
[ -f "$DIR/pack.sha256" ] && [ -d "$DIR/p00" ] && cp "$DIR/pack.sha256" "$DIR/p00/"
echo "gpu_pieces: in $DIR (each folder at most ${PIECE_MB} MB):"
du -sm "$DIR"/*/ | sed 's/^/  /'
