#!/usr/bin/env bash
# One device call on the lent H200: install the carried wheels, then the
# sections asked for; every output under $OUT. Usage (repository root):
#   bash benchmarks/gpu_session.sh env,tests,sanitize,kbench,run
# Sections: env (versions), tests (tests/gpu + runtime/install tests),
# sanitize (compute-sanitizer memcheck of every fill mode), kbench
# (python -m lab bench kernel), fitproof (bench run --perturbations of the fitted H200
# schedule; RUN_REPLAYS, FITPROOF_NAME), run (l2sched bench run: none / bulk / copy / load
# arms of the shipped H200 schedule, all M), profile (l2sched profile;
# PROFILE_ARGS), vrun (bench run --validation, after the profile), tpv
# (bench tp --validation on 2 GPUs, real NCCL all-reduces: TP_TOKENS,
# TP_REPLAYS, TP_ARGS; TP_P2P_OFF=1 adds a second run with --p2p off;
# about 2 min per run after a ~20 s pre-flight test, docs/bench.md; needs the
# nvidia-h200-x2 kind), touch (translation probe + bench run with touch arms
# and traces, lab/experiments/bench_run_touch.py).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sections=${1:-env,tests,sanitize,kbench,run}
export PYTHONUNBUFFERED=1 L2SCHED_PROGRESS=${L2SCHED_PROGRESS:-1}  # bench run's progress lines in the log
# .whl/ holds the wheels, or site.tar.xz: the same wheels unpacked and packed by
# benchmarks/pack_site.sh (small enough for the 64 MiB a device call carries)
if [ -f .whl/site.tar.xz ]; then
  [ -d /tmp/site/nvidia_cutlass_dsl ] || { mkdir -p /tmp/site && python3 -c \
    "import tarfile; tarfile.open('.whl/site.tar.xz').extractall('/tmp/site')" \
    || echo "unpacking .whl/site.tar.xz failed"; }
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install failed"
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/python_packages:$PWD
has() { [[ ",$sections," == *",$1,"* ]]; }
if has env; then
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv;
    python3 -c "import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))";
    python3 -c "from l2sched.runtime import kernel as K; print('cutlass-dsl', K.cutlass_version())";
    python3 -c "import tvm_ffi; print('tvm_ffi', tvm_ffi.__version__)"; } 2>&1 | tee "$OUT/env.txt"
fi
if has tests; then
  timeout ${TESTS_TIMEOUT:-240} python3 -m pytest -q -rs tests/gpu tests/test_runtime.py \
    tests/test_install.py -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -25
fi
if has sanitize; then
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    python3 tests/gpu/sanitize_kernel.py > "$OUT/sanitize.txt" 2>&1
  echo "sanitize rc=$?" | tee -a "$OUT/sanitize.txt"; tail -8 "$OUT/sanitize.txt"
fi
if has kbench; then
  timeout ${KBENCH_TIMEOUT:-200} python3 -m lab bench kernel --out "$OUT/kernel.json" \
    --md-out "$OUT/kernel.md" ${KBENCH_ARGS:-} 2>&1 | tail -12
fi
if has run; then
  timeout ${RUN_TIMEOUT:-240} python3 -m l2sched bench run --out "$OUT/run.json" \
    --tokens ${RUN_TOKENS:-1,4,16,64} --load-mode --variant copy:kernel=copy \
    ${RUN_ARGS:-} 2>&1 | tail -15
fi
if has fitproof; then
  # the fitted H200 schedule beside no prefetch (twice: A/A), its perturbations, the same
  # schedule with set_aside max, and the shipped hand-tuned H200 schedule, interleaved
  prev=$(mktemp -d); cp schedules/glm53-flash-h200-tp4.l2s "$prev/previous-shipped-h200.l2s"
  timeout ${RUN_TIMEOUT:-400} python3 -m lab bench run --perturbations \
    --schedule schedules/glm53-flash-h200-tp4-fit-idle.l2s --bench-dir "$prev" \
    --variant aside-max:set_aside=max --tokens ${RUN_TOKENS:-1,4,16,64} \
    --replays ${RUN_REPLAYS:-30} --lead-us ${LEAD_US:-3000} \
    --out "$OUT/${FITPROOF_NAME:-fitproof}.json" ${RUN_ARGS:-} 2>&1 | tail -20
  echo "fitproof rc=${PIPESTATUS[0]}"
fi
if has profile; then
  timeout ${PROFILE_TIMEOUT:-560} python3 -m l2sched profile --out "$OUT/h200.toml" \
    --md-out "$OUT/profile.md" --state "$OUT/profile-state.json" ${PROFILE_ARGS:-} 2>&1 \
    | tail -${PROFILE_TAIL:-30}
  echo "profile rc=${PIPESTATUS[0]}"
fi
if has vrun; then
  # validation decode-step run (docs/lint.md#validation), after the profile;
  # VRUN_PROFILE: a profile just written by the profile section, installed
  # as the h200 profile first (the run's idle intervals and fill shapes)
  [ -n "${VRUN_PROFILE:-}" ] && cp "$VRUN_PROFILE" l2sched/data/devices/h200.toml
  timeout ${RUN_TIMEOUT:-560} python3 -m lab bench run --validation \
    --out "$OUT/validation.json" --tokens ${RUN_TOKENS:-1,4,16,64} ${RUN_ARGS:-} 2>&1 | tail -15
fi
if has drun; then
  # a diagnostic bench run: only the arms given in DIAG_ARGS (--variant ...)
  timeout ${DIAG_TIMEOUT:-200} python3 -m l2sched bench run --out "$OUT/diag.json" \
    ${DIAG_ARGS:-} 2>&1 | tail -4
fi
if has touch; then
  # translations or lines? (docs/lint.md, "Translations or lines"): the
  # translation probe, then bench run with touch arms, window B's target
  # groups, decoys and one traced replay per arm and M
  timeout 120 python3 lab/experiments/translation_probe.py --out "$OUT/translation.json" \
    --md-out "$OUT/translation.md" 2>&1 | tail -8
  timeout ${TOUCH_TIMEOUT:-330} python3 lab/experiments/bench_run_touch.py \
    --touch schedules/glm53-flash-h200-tp4.l2s --touch /tmp/wb/B-next-attn.l2s \
    --window-b-groups /tmp/wb --out /tmp/touch.json --bench-dir /tmp/wb --controls decoy \
    --perturbations --variant kernel-bulk:kernel=bulk --tokens ${TOUCH_TOKENS:-4,16,64} \
    --replays ${TOUCH_REPLAYS:-20} --trace-dir /tmp/traces 2>&1 | tail -3
  python3 - "$OUT" <<'PY'
import gzip, json, os, sys, tarfile
out = sys.argv[1]
d = json.load(open("/tmp/touch.json"))
for rec in d.get("per_m", {}).values():
    for arm in rec.get("arms", {}).values():
        for key in ("ops", "fills"):
            arm.pop(key, None)
with gzip.open(os.path.join(out, "touch.json.gz"), "wt") as f:
    json.dump(d, f)
with tarfile.open(os.path.join(out, "traces.tar.gz"), "w:gz") as t:
    t.add("/tmp/traces", arcname="traces")
PY
  ls -la "$OUT"
fi
if has tpv; then
  # bench tp --validation (docs/bench.md): every validation arm with real
  # all-reduces, one process per GPU; NCCL's INIT log (transports: P2P or
  # SHM) next to each result unless TP_NCCL_DEBUG=0
  tpv() {  # tpv OUT_NAME [extra args]
    local name=$1; shift
    local dbg=()
    [ "${TP_NCCL_DEBUG:-1}" = 1 ] && dbg=(env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
                                          "NCCL_DEBUG_FILE=$OUT/$name-nccl.%p.log")
    timeout ${TP_TIMEOUT:-250} ${dbg[@]+"${dbg[@]}"} python3 -m lab bench tp --world-size 2 \
      --validation --tokens ${TP_TOKENS:-1,4,16,64} --replays ${TP_REPLAYS:-40} \
      --out "$OUT/$name.json" "$@" ${TP_ARGS:-} 2>&1 | tail -${TP_TAIL:-12}
    echo "tpv $name rc=${PIPESTATUS[0]}"
    [ -f "$OUT/$name.json" ] && timeout 120 python3 -m lab bench tp-report \
      "$OUT/$name.json" --md-out "$OUT/$name.md" 2>&1 | tail -3
  }
  # pre-flight (GPU 0, ~20 s): the interference graphs (NCCL all-reduce + a
  # fill on the side stream) in one process; TP_PREFLIGHT=0 skips it
  [ "${TP_PREFLIGHT:-1}" = 1 ] && timeout 120 python3 -m pytest -q -rs \
    tests/gpu/test_gpu_tp.py -p no:cacheprovider 2>&1 | tee "$OUT/tp-preflight.txt" | tail -4
  tpv tp
  [ "${TP_P2P_OFF:-0}" = 1 ] && tpv tp-p2poff --p2p off
fi
echo "SESSION-DONE"
