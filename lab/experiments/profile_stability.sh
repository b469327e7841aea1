#!/usr/bin/env bash
# Issue 32: profiles of one box, one session: a --quick profile, then two full profiles
# (defaults: --tokens 1,4,16,64,256, --reps 40, every probe), each with its state file
# (a cut-off profile resumes from it in a later call) and its wall time in times.txt.
# The fits run afterwards on the CPU (benchmarks/results/h200-2026-12-03-full-profiles/).
# Usage (repository root, GPU machine, after benchmarks/gpu_session.sh's set-up):
#   OUT=dir DEADLINE_S=540 bash lab/experiments/profile_stability.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
deadline=$((SECONDS + ${DEADLINE_S:-540}))
one() {  # name, extra args
  local name=$1; shift; local s=$SECONDS left=$((deadline - SECONDS))
  [ "$left" -gt 20 ] || { echo "$name: not run (deadline)" | tee -a "$OUT/times.txt"; return; }
  timeout "$left" python3 -m l2sched profile --out "$OUT/$name.toml" --md-out "$OUT/$name.md" \
    --state "$OUT/$name-state.json" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - s)) s" | tee -a "$OUT/times.txt"; tail -4 "$OUT/$name.log"
}
one quick3 --quick
one full1
one full2
