#!/usr/bin/env bash
# Issue 36 in one device call: the capture-launch GPU test, run 1 of docs/runtime.md's
# decision rule (every capture launch, M = 4 and 16, 20 replays; launch-order in a process of
# its own beside fork, as a capture it breaks would lose the others), the rule applied by
# capture_launches_decide.py, and when it names a candidate, run 2 (a) (fork and the
# candidate, M = 4 and 16, 30 replays) and (b) (bench run --aa of the fitted idle-interval
# schedule with the candidate, M = 1, 4, 16, 64, 30 replays) and the rule's verdict.
# Everything lands in $OUT/issue36.tgz (a device call returns at most 8 files) beside
# verdict.txt. Usage (repository root, GPU machine, after benchmarks/gpu_session.sh's set-up):
#   OUT=dir DEADLINE_S=540 bash lab/experiments/capture_launches_session.sh
# (RUN_ARGS=--dry runs the plumbing on a CPU: fake clocks, no capture launch.)
# CANDIDATE=NAME skips run 1 and runs run 2 for NAME (a second attempt written down in
# docs/runtime.md before its run).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=$(mktemp -d)
deadline=$((SECONDS + ${DEADLINE_S:-540}))
left() { local l=$((deadline - SECONDS)); [ "$l" -gt 1 ] && echo "$l" || echo 1; }  # timeout 0 = none
say() { echo "$*" | tee -a "$OUT/verdict.txt"; }
launches() {  # name, launches, tokens, replays
  local s=$SECONDS
  OUT=$W NAME=$1 LAUNCHES=$2 TOKENS=$3 REPLAYS=$4 timeout "$(left)" \
    bash lab/experiments/capture_launches.sh > "$W/$1.log" 2>&1
  say "$1 rc=$? $((SECONDS - s)) s"
  python3 -m lab.experiments.capture_launches_table "$W/$1.json" --json "$W/$1-table.json" \
    > "$W/$1-table.md" 2>&1 && cat "$W/$1-table.md" >> "$OUT/verdict.txt"
}
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_gpu_runtime.py \
  -k capture_launches > "$W/captest.txt" 2>&1
say "GPU test: $(tail -1 "$W/captest.txt")"
if [ -n "${CANDIDATE:-}" ]; then
  say "candidate: $CANDIDATE (given: run 1 skipped)"
else
  launches run1 "fork deferred leaf leaf-deferred" 4,16 20
  launches run1lo "fork launch-order" 4,16 20
  tables=$(ls "$W"/run1*-table.json 2>/dev/null)
  if [ -n "$tables" ]; then
    python3 -m lab.experiments.capture_launches_decide run1 $tables | tee -a "$OUT/verdict.txt"
  else
    say "candidate: none (run 1 wrote no table)"
  fi
fi
cand=$(tail -1 "$OUT/verdict.txt" | sed -n 's/^candidate: \([^ ]*\).*/\1/p')  # name only
if [ -n "$cand" ] && [ "$cand" != none ]; then
  launches run2a "fork $cand" 4,16 30
  s=$SECONDS
  timeout "$(left)" python3 -m l2sched bench run --aa \
    --schedule schedules/glm53-flash-h200-tp4-fit-idle.l2s --variant "cand:launch=$cand" \
    --tokens 1,4,16,64 --replays 30 --out "$W/run2b.json" ${RUN_ARGS:-} > "$W/run2b.log" 2>&1
  say "run2b rc=$? $((SECONDS - s)) s"
  python3 -m lab.experiments.capture_launches_decide run2 "$cand" "$W/run2a-table.json" \
    "$W/run2b.json" | tee -a "$OUT/verdict.txt"
fi
gzip -f "$W"/*.json 2>/dev/null
tar -czf "$OUT/issue36.tgz" -C "$W" .
ls -la "$OUT"
