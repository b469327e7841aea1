#!/usr/bin/env bash
# Build the payload of the GPU run (benchmarks/vllm_gpu.py) on a CPU machine
# with PyPI: .vllmstage/ (ignored), split into chunk folders that one device
# call each can carry.
#
#   bash benchmarks/vllm_gpu/pack.sh            # ~15 min on 2 cores (xz)
#   CHUNK_MIB=56 XZ_LEVEL=6 PRUNE=1 bash benchmarks/vllm_gpu/pack.sh
#   PAYLOAD_EXTRA=benchmarks/vllm_gpu/payload-deepseek-v4.txt \
#     PACK_DIR=.vllmstage-ds4 bash benchmarks/vllm_gpu/pack.sh
#
# PAYLOAD_EXTRA: a second list whose wheels are added, each replacing a
# wheel of the same name in payload.txt (DeepSeek-V4's kernels: docs/vllm.md,
# "DeepSeek-V4 on the lent GPU"); PACK_DIR: where the parts go (default
# .vllmstage; stage.sh reads the carried parts from VLLM_GPU_CARRY, the same
# folder).
# Result: .vllmstage/c0, c1, ... each holding one part payload.partNN and
# MANIFEST (parts, sizes, sha256 of each part and of the whole .tar.xz).
# Carry one cK folder per device call; benchmarks/vllm_gpu/stage.sh puts the
# parts together there. What goes in (docs/vllm.md, "GPU run"):
#   site/vllm + vllm-0.33.0.dist-info: the wheel without _vllm_fa2_C (FA2,
#     308 MB: sm_90 uses FA3), vllm-rs (the Rust frontend), _qutlass_C
#     (Blackwell FP4; needs the 3 missing stable-ABI symbols),
#     _deepselect_C (sm_100 top-k) and third_party/fmha_sm100 (sm_100);
#     every .so stripped (--strip-unneeded); _C_stable_libtorch and
#     _moe_C_stable_libtorch pruned to sm_90 cubins + PTX (prune_fatbin.py).
#   site/<the wheels of payload.txt>, installed with pip --target.
# The chunk size leaves room for the repository, which travels with every
# call (64 MiB per call in all).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
S=${PACK_DIR:-.vllmstage}
CHUNK_MIB=${CHUNK_MIB:-56}
XZ_LEVEL=${XZ_LEVEL:-6}
PY=${PY:-python3}
here=benchmarks/vllm_gpu
plat=(--python-version 3.12 --implementation cp --only-binary=:all:
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_5_x86_64
      --platform manylinux1_x86_64)
die() { echo "pack.sh: $*" >&2; exit 1; }
command -v xz >/dev/null || die "xz not found"
command -v strip >/dev/null || die "strip (binutils) not found"
mkdir -p "$S/dl"
list() { sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$1"; }
name_of() { echo "${1%%==*}" | tr 'A-Z_' 'a-z-'; }
mapfile -t deps < <(list "$here/payload.txt")
if [ -n "${PAYLOAD_EXTRA:-}" ]; then
  [ -f "$PAYLOAD_EXTRA" ] || die "PAYLOAD_EXTRA: no file $PAYLOAD_EXTRA"
  mapfile -t extra < <(list "$PAYLOAD_EXTRA")
  kept=()
  for d in "${deps[@]}"; do
    replaced=0
    for e in "${extra[@]}"; do [ "$(name_of "$d")" = "$(name_of "$e")" ] && replaced=1; done
    [ $replaced = 1 ] && echo "pack.sh: $d replaced by $PAYLOAD_EXTRA" || kept+=("$d")
  done
  deps=("${kept[@]}" "${extra[@]}")
fi

echo "== download (cached in $S/dl)"
$PY -m pip download -q --no-deps "${plat[@]}" -d "$S/dl" vllm==0.33.0 "${deps[@]}" \
  || die "pip download failed"

echo "== vLLM files"
rm -rf "$S/tree" "$S"/c[0-9]*
site="$S/tree/site"
mkdir -p "$site"
$PY -m zipfile -e "$S"/dl/vllm-0.33.0-*.whl "$site" || die "cannot unpack the vllm wheel"
rm -f "$site"/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so "$site"/vllm/vllm-rs \
  "$site"/vllm/_qutlass_C.abi3.so "$site"/vllm/_deepselect_C.abi3.so
rm -rf "$site"/vllm/third_party/fmha_sm100
find "$site" -name '*.so' -exec strip --strip-unneeded {} +
if [ "${PRUNE:-1}" = 1 ]; then  # PRUNE=0: keep every arch (+~50 MB, one more call)
  for so in _C_stable_libtorch _moe_C_stable_libtorch; do
    f="$site/vllm/$so.abi3.so"
    $PY "$here/prune_fatbin.py" --check "$f" "$f.pruned" && mv "$f.pruned" "$f"
  done
fi

echo "== dependency wheels"
wheels=()
for d in "${deps[@]}"; do
  n=$(echo "${d%%==*}" | tr 'A-Z-' 'a-z_'); v=${d##*==}
  w=$(ls "$S/dl" | grep -i "^${n}-${v}-" | head -1) || true
  [ -n "$w" ] || die "no wheel downloaded for $d"
  wheels+=("$S/dl/$w")
done
$PY -m pip install -q --no-deps --no-compile --target "$site" "${plat[@]}" "${wheels[@]}" \
  || die "pip install --target failed"
find "$site" -name __pycache__ -prune -exec rm -rf {} +

echo "== archive (xz -$XZ_LEVEL)"
tar -C "$S/tree" -cf - site | xz -"$XZ_LEVEL" -T0 > "$S/payload.tar.xz"
size=$(stat -c %s "$S/payload.tar.xz")
chunk=$((CHUNK_MIB * 1048576))
n=$(( (size + chunk - 1) / chunk ))
per=$(( (size + n - 1) / n ))
split -b "$per" -d -a 2 "$S/payload.tar.xz" "$S/payload.part"
{
  echo "payload $(sha256sum "$S/payload.tar.xz" | cut -d' ' -f1) $size"
  echo "parts $n"
  for p in "$S"/payload.part*; do
    echo "part $(basename "$p") $(sha256sum "$p" | cut -d' ' -f1) $(stat -c %s "$p")"
  done
} > "$S/MANIFEST"
k=0
for p in "$S"/payload.part*; do
  mkdir -p "$S/c$k"
  mv "$p" "$S/c$k/"
  cp "$S/MANIFEST" "$S/c$k/"
  k=$((k + 1))
done
rm -f "$S/payload.tar.xz"
tree_mib=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null \
  | tail -1 | cut -f1)
echo "== done: $(du -sh "$S/tree/site" | cut -f1) unpacked, $size B as .tar.xz in $n part(s)"
cat "$S/MANIFEST"
echo "working tree travelling with each call: $((tree_mib / 1048576)) MiB; part + tree must stay under 64 MiB"
for ((i = 0; i < n; i++)); do echo "  call $((i + 1)): carry [\"$S/c$i\"]"; done
