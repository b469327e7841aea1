#!/usr/bin/env bash
# The TP-emulation run on the lent GPU machine, one device call per line of
# docs/vllm.md ("The users' interconnect on one GPU"), from the repository
# root after benchmarks/vllm_gpu/stage.sh has staged vLLM:
#
#   bash lab/engine_tp/run.sh prepare,spin-fill,serve   # call 3 (with stage.sh add install)
#   bash lab/engine_tp/run.sh verify                    # call 4
#   bash lab/engine_tp/run.sh bench,report              # call 5
#
# DIR (default /tmp/etp) keeps every step's files between calls on a warm
# machine; each call tars it (without the engines' caches) into $OUT/etp.tgz
# and prints the plugin's lines. MODEL (glm5next | qwen3_moe), ALLREDUCE_US
# (a fixed all-reduce time instead of the SM120 profile's PCIe model), BASE
# (the measured profile of the GPU that runs it, name or .toml; default h200)
# and STEP_TIMEOUT (s, default 540) are passed on.
set -u
D=${DIR:-/tmp/etp}
OUT=${OUT:-/tmp/out}
mkdir -p "$D" "$OUT"
eval "$(bash benchmarks/vllm_gpu/stage.sh env)" || { echo "run.sh: stage.sh env failed"; exit 1; }
extra=()
[ -n "${ALLREDUCE_US:-}" ] && extra+=(--allreduce-us "$ALLREDUCE_US")
[ -n "${BASE:-}" ] && extra+=(--base "$BASE")
for step in ${1//,/ }; do
  echo "== $step ($(date -u +%T))"
  case $step in
    prepare) python3 -m lab.engine_tp.session prepare "$D" --model "${MODEL:-glm5next}" \
               "${extra[@]}" ;;
    serve|serve-verify|forced|verify|bench|trace|trace-bench)
      timeout "${STEP_TIMEOUT:-540}" python3 -m lab.engine_tp.session "$step" "$D" \
        > "$D/$step.log" 2>&1
      echo "$step rc=$?"
      grep -aoE '(l2sched|l2sched_lab_engine_tp): .*' "$D/$step.log" | cut -c1-400 | sort -u | head -30
      tail -4 "$D/$step.log" | cut -c1-300 ;;
    *) python3 -m lab.engine_tp.session "$step" "$D" ;;
  esac
done
[ -f "$D/verify.md" ] && cat "$D/verify.md"
tar czf "$OUT/etp.tgz" --exclude=cache -C "$(dirname "$D")" "$(basename "$D")" 2>/dev/null
echo "run.sh: $OUT/etp.tgz"
