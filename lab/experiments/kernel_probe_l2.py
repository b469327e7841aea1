"""Where does a fill land, and what does a dependent read gain from it?

    python3 lab/experiments/kernel_probe_l2.py --out probe_l2.json

Dependent reads (us, median of --reps, after a 1 GiB read flush unless 'hot'):
R1 = Triton int32 sum (16 KiB per program), R2 = the same with programs
mapped in reverse (other SMs read each byte). Fills: 'torch_sum' = torch.sum over
the buffer (ordinary loads), 'load' = this kernel's load mode (one 4-byte
ld.global...L2::256B per 256 B; also at 1056x128; 'loadN_GxT' one load
per N bytes at G CTAs x T threads), 'bulk' = this kernel (cp.async.bulk.prefetch.L2,
evict_last), 'bulk2' = it twice, 'line' = per-128-B prefetch.global.L2::evict_last,
'line_plain' = prefetch.global.L2; each followed by a 20 us sleep. Also an M=8
bf16 GEMM over 16.8 MB after the same fills.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbours
from kernel_bench import MB, make_read, probe_setup, q, table_for  # noqa: E402

from l2sched.runtime import kernel as K  # noqa: E402
import lab.kernels  # noqa: E402

lab.kernels.register()  # line mode and the none policy


def main():
    a, b, h = probe_setup()
    kb = K.get_kernel(0, policy="evict_last")
    kl = K.get_kernel(0, policy="evict_last", mode="line")
    kp = K.get_kernel(0, policy="none", mode="line")
    kd = K.get_kernel(0, policy="evict_last", mode="load")
    kd2 = K.get_kernel(0, policy="evict_last", mode="load", grid=1056, threads=128)
    kls = {(ch, g, t): K.get_kernel(0, policy="evict_last", mode="load", chunk=ch,
                                    grid=g, threads=t)
           for ch in (32, 64, 128) for g, t in ((264, 32), (1056, 128))}
    out = {"kernels": {"bulk": list(kb.key), "line": list(kl.key), "load": list(kd.key)},
           "rows": []}

    def fills(tab, w):
        so = torch.empty((), dtype=torch.float32, device="cuda")
        return {
            "none": lambda: None,
            "torch_sum": lambda: torch.sum(w.view(-1), dim=0, dtype=torch.float32, out=so),
            "bulk": lambda: kb.launch(tab.data_ptr(), 0, 1, h),
            "bulk2": lambda: (kb.launch(tab.data_ptr(), 0, 1, h),
                              kb.launch(tab.data_ptr(), 0, 1, h)),
            "line": lambda: kl.launch(tab.data_ptr(), 0, 1, h),
            "line_plain": lambda: kp.launch(tab.data_ptr(), 0, 1, h),
            "load": lambda: kd.launch(tab.data_ptr(), 0, 1, h),
            "load_1056x128": lambda: kd2.launch(tab.data_ptr(), 0, 1, h),
            **{f"load{ch}_{g}x{t}": (lambda k=k: k.launch(tab.data_ptr(), 0, 1, h))
               for (ch, g, t), k in kls.items()},
        }

    for size in (16 * MB, 32 * MB, 48 * MB):
        w = torch.randn(size // 2, dtype=torch.bfloat16, device="cuda")
        tab = table_for(w)
        r1, kind = make_read(w)
        r2, _ = make_read(w, reverse=True)
        r1(); r2()
        row = {"bytes": size, "read": kind}
        row["hot_R1_after_R1"] = q(b.timed(r1, r1)[1])["median"]
        row["R2_after_R1"] = q(b.timed(r1, r2)[1])["median"]
        for name, f in fills(tab, w).items():
            row[f"R1_after_{name}"] = q(b.timed(
                lambda f=f: (b.flush(), f(), b.sleep(20)), r1)[1])["median"]
        for name, f in fills(tab, w).items():
            if name != "none":
                row[f"exit_{name}"] = q(b.timed(b.flush, f)[1])["median"]
        out["rows"].append(row)
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()},
              flush=True)
        del w
    # GEMM 16.8 MB
    n, k = 2048, 4096
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8, k, dtype=torch.bfloat16, device="cuda")
    y = torch.empty(8, n, dtype=torch.bfloat16, device="cuda")
    tab = table_for(w)
    mm = lambda: torch.mm(x, w.t(), out=y)  # noqa: E731
    mm()
    g = {"weight_bytes": n * k * 2, "hot": q(b.timed(mm, mm)[1])["median"]}
    for name, f in fills(tab, w).items():
        g[f"after_{name}"] = q(b.timed(lambda f=f: (b.flush(), f(), b.sleep(20)), mm)[1])["median"]
    out["gemm"] = g
    print({k2: round(v, 2) for k2, v in g.items()}, flush=True)
    json.dump(out, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
