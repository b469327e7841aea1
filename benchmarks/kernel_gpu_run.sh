#!/usr/bin/env bash
# One device call: GPU tests, compute-sanitizer, search, benchmarks. Results in $OUT.
# Usage (device machine, repo root, after the pip --target line):
#   bash benchmarks/kernel_gpu_run.sh [env,tests,sanitize,search,probe,bench]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sections=${1:-env,tests,sanitize,search,bench}
export PYTHONUNBUFFERED=1
has() { [[ ",$sections," == *",$1,"* ]]; }
if has env; then
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; uname -r;
    python3 -c "import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))";
    python3 -c "import l2sched.kernel as K; print('cutlass-dsl', K.cutlass_version())";
    python3 -c "import tvm_ffi; print('tvm_ffi', tvm_ffi.__version__)"; } 2>&1 | tee "$OUT/env.txt"
fi
if has tests; then
  timeout 240 python3 -m pytest -q -rs tests/gpu tests/test_runtime.py tests/test_install.py -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -25
fi
if has sanitize; then
  timeout 240 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 tests/gpu/sanitize_kernel.py > "$OUT/sanitize.txt" 2>&1
  echo "sanitize rc=$?" | tee -a "$OUT/sanitize.txt"; tail -6 "$OUT/sanitize.txt"
fi
if has search; then
  timeout 200 python3 benchmarks/kernel_search.py --out "$OUT/search.json" 2>&1 | tail -8
fi
if has probe; then
  timeout 200 python3 benchmarks/kernel_probe_l2.py --out "$OUT/probe_l2.json" 2>&1 | tail -5
fi
if has bench; then
  timeout 200 python3 benchmarks/kernel_bench.py --out "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tail -20
fi
