#!/usr/bin/env bash
# Issue 36: the lone-window arms of h200-2026-12-01-diag-fork.md (windows A, B, C
# alone at 0.5 MB) and the shipped hand-tuned schedule, once per capture launch
# (runtime.capture_nodes: fork, deferred, leaf, leaf-deferred, launch-order), beside
# none and its A/A arm, in one bench run process (arms interleaved per replay round).
# Usage (repository root, GPU machine, after benchmarks/gpu_session.sh's set-up):
#   OUT=dir TOKENS=4,16 REPLAYS=20 LAUNCHES="fork leaf" bash lab/experiments/capture_launches.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
zero="window.A_MLA.budget=0MB"
A="$zero,window.B.budget=0MB,window.C.budget=0MB,window.A.budget=0.5MB"
B="$zero,window.A.budget=0MB,window.C.budget=0MB,window.B.budget=0.5MB"
C="$zero,window.A.budget=0MB,window.B.budget=0MB,window.C.budget=0.5MB"
args=()
for l in ${LAUNCHES:-fork deferred leaf leaf-deferred launch-order}; do
  args+=(--variant "A0.5-$l:$A,launch=$l" --variant "B0.5-$l:$B,launch=$l"
         --variant "C0.5-$l:$C,launch=$l" --variant "full-$l:launch=$l")
done
python3 -m l2sched bench run --aa --out "$OUT/${NAME:-capture-launches}.json" \
  --tokens ${TOKENS:-4,16} --replays ${REPLAYS:-20} "${args[@]}" ${RUN_ARGS:-}
