#!/usr/bin/env bash
# Put the GPU run's payload together on the lent GPU machine, across
# consecutive device calls (a warm machine keeps /tmp between them).
# Run from the repository root there:
#
#   bash benchmarks/vllm_gpu/stage.sh add        # copy the carried .vllmstage/c*/ parts to /tmp
#   bash benchmarks/vllm_gpu/stage.sh install    # when complete: unpack, install l2sched and the shims
#   eval "$(bash benchmarks/vllm_gpu/stage.sh env)"   # PYTHONPATH, caches, CUDA_HOME, ...
#   bash benchmarks/vllm_gpu/stage.sh status     # what is there
#   bash benchmarks/vllm_gpu/stage.sh save-cache # JIT caches -> $OUT/jitcache.tar.xz (<= 16 MB)
#
# Commands can be chained: `stage.sh add install status`. Every command is
# idempotent and prints what it did; a failure prints one line
# "stage.sh: FAILED <what>" and exits 1. The payload comes from
# benchmarks/vllm_gpu/pack.sh (CPU side): .vllmstage/cK/payload.partNN +
# MANIFEST. A carried .vllmstage/jit/jitcache.tar.xz (from save-cache) is
# restored by `add`.
set -u
S=${VLLM_GPU_CARRY:-.vllmstage}  # the carried parts (pack.sh's PACK_DIR)
D=${VLLM_GPU_STAGE:-/tmp/vllmstage}
SITE=$D/site
PY=${PY:-python3}
fail() { echo "stage.sh: FAILED $*"; exit 1; }
[ -d benchmarks/vllm_gpu ] || fail "run me from the repository root"

manifest() { [ -f "$D/MANIFEST" ] && cat "$D/MANIFEST"; }

complete() {  # 0 when every part of the manifest is in $D/parts with its sha
  [ -f "$D/MANIFEST" ] || return 1
  local ok=0 name sha size
  while read -r _ name sha size; do
    [ -f "$D/parts/$name" ] && [ "$(stat -c %s "$D/parts/$name")" = "$size" ] || ok=1
  done < <(grep '^part ' "$D/MANIFEST")
  return $ok
}

cmd_add() {
  mkdir -p "$D/parts"
  local found=0 m p name sha
  for m in "$S"/c*/MANIFEST; do
    [ -f "$m" ] || continue
    found=1
    if [ -f "$D/MANIFEST" ] && [ "$(sha256sum < "$m")" != "$(sha256sum < "$D/MANIFEST")" ]; then
      echo "stage.sh: new payload (MANIFEST differs): dropping the old parts"
      rm -rf "$D/parts" "$SITE" && mkdir -p "$D/parts"
    fi
    cp "$m" "$D/MANIFEST"
    for p in "$(dirname "$m")"/payload.part*; do
      name=$(basename "$p")
      sha=$(grep "^part $name " "$D/MANIFEST" | cut -d' ' -f3)
      [ -n "$sha" ] || fail "add: $p is not in its MANIFEST"
      if [ -f "$D/parts/$name" ] && [ "$(sha256sum < "$D/parts/$name" | cut -d' ' -f1)" = "$sha" ]; then
        echo "stage.sh: $name already there"
        continue
      fi
      [ "$(sha256sum < "$p" | cut -d' ' -f1)" = "$sha" ] || fail "add: $p: sha256 mismatch"
      cp "$p" "$D/parts/$name" && echo "stage.sh: added $name ($(stat -c %s "$p") B)"
    done
  done
  [ $found = 1 ] || echo "stage.sh: no .vllmstage/c*/ carried in this call"
  if [ -f "$S/jit/jitcache.tar.xz" ] && [ ! -d "$D/cache" ]; then
    mkdir -p "$D" && xz -dc "$S/jit/jitcache.tar.xz" | tar -x -C "$D" \
      && echo "stage.sh: restored JIT caches ($(du -sh "$D/cache" | cut -f1))"
  fi
}

cmd_install() {
  complete || { cmd_status; fail "install: payload incomplete (run add with the missing parts)"; }
  local want
  want=$(grep '^payload ' "$D/MANIFEST" | cut -d' ' -f2)
  if [ "$(cat "$SITE/.payload" 2>/dev/null)" != "$want" ]; then
    local t0=$SECONDS
    [ "$(cat "$D"/parts/payload.part* | sha256sum | cut -d' ' -f1)" = "$want" ] \
      || fail "install: the joined parts do not match the MANIFEST's sha256"
    rm -rf "$SITE"
    cat "$D"/parts/payload.part* | xz -dc -T0 | tar -x -C "$D" || fail "install: unpack"
    echo "$want" > "$SITE/.payload"
    echo "stage.sh: unpacked $(du -sh "$SITE" | cut -f1) in $((SECONDS - t0)) s"
  else
    echo "stage.sh: payload already unpacked"
  fi
  # l2sched with its vllm.general_plugins entry point, from this checkout.
  rm -rf "$D/l2s" && mkdir -p "$D/l2s"
  if ! $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
      --target "$D/l2s" . > "$D/l2s.log" 2>&1; then
    echo "stage.sh: pip could not build l2sched ($(tail -1 "$D/l2s.log")); writing its dist-info by hand"
    mkdir -p "$D/l2s/l2sched-0.1.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: l2sched\nVersion: 0.1.0\n' \
      > "$D/l2s/l2sched-0.1.0.dist-info/METADATA"
    printf '[vllm.general_plugins]\nl2sched = l2sched.vllm:register\n' \
      > "$D/l2s/l2sched-0.1.0.dist-info/entry_points.txt"
  fi
  # The shims plugin (benchmarks/vllm_gpu/vllm_gpu_shims.py).
  local sd=$D/shims/vllm_gpu_shims-0.1.dist-info
  rm -rf "$D/shims" && mkdir -p "$sd"
  cp benchmarks/vllm_gpu/vllm_gpu_shims.py "$D/shims/"
  printf 'Metadata-Version: 2.1\nName: vllm-gpu-shims\nVersion: 0.1\n' > "$sd/METADATA"
  printf '[vllm.general_plugins]\nvllm_gpu_shims = vllm_gpu_shims:register\n' > "$sd/entry_points.txt"
  # The TP-emulation instrument's plugin (lab/engine_tp/plugin.py: inert unless
  # $L2SCHED_LAB_EMULATE names a spec; `lab` is importable from $PWD).
  local ld=$D/shims/l2sched_lab_engine_tp-0.1.dist-info
  mkdir -p "$ld"
  printf 'Metadata-Version: 2.1\nName: l2sched-lab-engine-tp\nVersion: 0.1\n' > "$ld/METADATA"
  printf '[vllm.general_plugins]\nl2sched_lab_engine_tp = lab.engine_tp.plugin:register\n' \
    > "$ld/entry_points.txt"
  # The stable-ABI shim (optional: no carried extension imports its symbols).
  local inc
  inc=$($PY -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))' 2>/dev/null)
  if command -v g++ >/dev/null && g++ -O2 -std=c++17 -shared -fPIC -Wall -Werror -I"$inc" \
      -o "$D/libtorch_abi_shim.so" benchmarks/vllm_gpu/torch_abi_shim.cpp -ldl 2> "$D/shim.log"; then
    echo "stage.sh: built $D/libtorch_abi_shim.so (LD_PRELOAD it with VLLM_GPU_ABI_SHIM=1)"
  else
    echo "stage.sh: torch ABI shim not built ($(head -1 "$D/shim.log" 2>/dev/null)); not needed for GLM-5.3"
  fi
  echo "stage.sh: installed l2sched, vllm_gpu_shims and l2sched_lab_engine_tp entry points"
}

cmd_env() {
  # CUDA_HOME for DeepGEMM's JIT (nvcc + include/): as set, else the usual
  # prefixes, else two levels above the resolved nvcc.
  local cuda=${CUDA_HOME:-} c nvcc
  if [ -z "$cuda" ]; then
    for c in /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-13; do
      [ -x "$c/bin/nvcc" ] && cuda=$c && break
    done
  fi
  if [ -z "$cuda" ] && nvcc=$(command -v nvcc); then
    cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  fi
  [ -n "$cuda" ] && [ -f "$cuda/include/cuda.h" ] \
    || echo "echo 'stage.sh: WARNING no CUDA toolkit with include/cuda.h found (DeepGEMM JIT needs one): set CUDA_HOME' >&2"
  # cutlass-dsl 4.3.5 keeps its packages in python_packages, 4.8 in dsl_packages
  # (the wheel's .pth, skipped by pip --target, puts them on sys.path)
  local dsl=$SITE/nvidia_cutlass_dsl/python_packages
  [ -d "$SITE/nvidia_cutlass_dsl/dsl_packages" ] && dsl=$SITE/nvidia_cutlass_dsl/dsl_packages
  echo "export PYTHONPATH=$PWD:$D/l2s:$D/shims:$SITE:$dsl${PYTHONPATH:+:$PYTHONPATH}"
  [ -n "$cuda" ] && echo "export CUDA_HOME=$cuda PATH=$cuda/bin:\$PATH"
  echo "export VLLM_CACHE_ROOT=$D/cache/vllm TRITON_CACHE_DIR=$D/cache/triton TORCHINDUCTOR_CACHE_DIR=$D/cache/inductor"
  echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1"
  echo "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
  # FlashInfer is not carried; vLLM 0.33.0's V2 sampler imports it unless told
  # not to (engine start failed with "No module named 'flashinfer'", 2026-12-03)
  echo "export VLLM_USE_FLASHINFER_SAMPLER=0"
  if [ "${VLLM_GPU_ABI_SHIM:-0}" = 1 ] && [ -f "$D/libtorch_abi_shim.so" ]; then
    echo "export LD_PRELOAD=$D/libtorch_abi_shim.so${LD_PRELOAD:+:$LD_PRELOAD}"
  fi
}

cmd_status() {
  echo "stage.sh: stage $D"
  if [ -f "$D/MANIFEST" ]; then
    local name sha size
    while read -r _ name sha size; do
      if [ -f "$D/parts/$name" ]; then echo "  $name present ($size B)"; else echo "  $name MISSING"; fi
    done < <(grep '^part ' "$D/MANIFEST")
    complete && echo "  payload complete" || echo "  payload incomplete"
  else
    echo "  no MANIFEST yet (nothing added)"
  fi
  [ -f "$SITE/.payload" ] && echo "  unpacked: $(du -sh "$SITE" | cut -f1)" || echo "  not unpacked"
  [ -d "$D/l2s" ] && echo "  l2sched entry point: $(ls "$D/l2s" | grep dist-info)"
  [ -d "$D/cache" ] && echo "  JIT caches: $(du -sh "$D/cache" | cut -f1)"
  df -h /tmp | tail -1 | awk '{print "  /tmp free: " $4}'
}

cmd_save_cache() {
  [ -d "$D/cache" ] || fail "save-cache: no $D/cache"
  local out=${OUT:-/tmp}
  tar -C "$D" -cf - cache | xz -3 -T0 > "$out/jitcache.tar.xz"
  local size
  size=$(stat -c %s "$out/jitcache.tar.xz")
  echo "stage.sh: $out/jitcache.tar.xz $size B (carry it as .vllmstage/jit/jitcache.tar.xz)"
  [ "$size" -le 16777216 ] || echo "stage.sh: over 16 MB: it will not come back from \$OUT"
}

[ $# -gt 0 ] || { sed -n '2,20p' "$0"; exit 2; }
for c in "$@"; do
  case $c in
    add) cmd_add ;;
    install) cmd_install ;;
    env) cmd_env ;;
    status) cmd_status ;;
    save-cache) cmd_save_cache ;;
    *) fail "unknown command '$c' (add, install, env, status, save-cache)" ;;
  esac
done
