"""Run the fill kernel over edge-case tables for compute-sanitizer:

    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 tests/gpu/sanitize_kernel.py

Rows: tiny, odd chunk tails, zero-length, the last 16 bytes of the buffer, a
whole 32 MiB buffer; both launch paths when TVM-FFI is present; the line and
load modes, and the copy mode (TMA into shared memory) in two shapes."""

import os
import sys

import torch

from l2sched.runtime import kernel as K

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import lab.kernels  # noqa: E402

lab.kernels.register()  # line mode

buf = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
p, n = buf.data_ptr(), buf.numel()
rows = [(p, 16), (p + 16, 16384 * 5 + 48), (p, 0), (p + n - 16, 16), (p, n),
        (p + 12345 * 16, 777 * 16)]
table = torch.tensor(rows, dtype=torch.int64, device="cuda")
s = torch.cuda.Stream()
paths = [None, False]
for ffi in paths:
    kern = K.get_kernel(0, ffi=ffi)
    assert kern is not None, K.disabled_reason()
    for pol in ("evict_last", "evict_first", "evict_normal"):
        k = K.get_kernel(0, policy=pol, ffi=ffi)
        for b, e in [(0, len(rows)), (2, 3), (3, 4)]:
            k.launch(table.data_ptr(), b, e, s.cuda_stream)
    print("path", "tvm-ffi" if kern.ffi else "generic", "ok")
s.synchronize()
torch.cuda.synchronize()
for mode, shape in (("line", {}), ("load", {}),
                    ("copy", {"grid": 66, "chunk": 32768, "stages": 4}),
                    ("copy", {"grid": 5, "chunk": 4096, "stages": 3})):
    k = K.get_kernel(0, policy="evict_last", mode=mode, **shape)
    assert k is not None, K.disabled_reason()
    for b, e in [(0, len(rows)), (2, 3), (3, 4)]:
        k.launch(table.data_ptr(), b, e, s.cuda_stream)
    print("mode", mode, "ok")
s.synchronize()
torch.cuda.synchronize()
print("SANITIZE-KERNEL-DONE")
