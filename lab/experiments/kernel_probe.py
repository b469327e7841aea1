"""Why does a fill recover only part of the cold->hot gap? Probe shapes/policies.

    python3 lab/experiments/kernel_probe.py --out probe.json

For 16 and 32 MB buffers: cold read (after a 1 GiB read flush), hot read, and
the read after a fill plus a 20 us sleep, for kernel shapes from 1 thread per
CTA (few requests in flight) to 32 threads per CTA, chunks 16 KiB-256 KiB, and
the plain (no cache hint) and evict_last instructions. ``recovered`` is
(cold - after) / (cold - hot): 1.0 = the fill made the read as fast as hot.
"""

import itertools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbours
from kernel_bench import MB, make_read, probe_setup, q, table_for  # noqa: E402

from l2sched.runtime import kernel as K  # noqa: E402


def main():
    a, b, h = probe_setup()
    rows = []
    for size in (16 * MB, 32 * MB):
        w = torch.randn(size // 2, dtype=torch.bfloat16, device="cuda")
        tab = table_for(w)
        read, kind = make_read(w)
        read()
        _, cold = b.timed(b.flush, read)
        _, hot = b.timed(read, read)
        c, ht = q(cold)["median"], q(hot)["median"]
        for (g, t, ch), pol in itertools.product(
                [(132, 1, 65536), (132, 1, 262144), (132, 4, 16384), (264, 1, 65536),
                 (132, 32, 16384), (264, 32, 16384), (16, 32, 16384)],
                ["none", "evict_last"]):
            k = K.get_kernel(0, grid=g, threads=t, chunk=ch, policy=pol)
            if k is None:
                continue
            _, after = b.timed(lambda: (b.flush(), k.launch(tab.data_ptr(), 0, 1, h),
                                        b.sleep(20)), read)
            _, ex = b.timed(b.flush, lambda: k.launch(tab.data_ptr(), 0, 1, h))
            af = q(after)["median"]
            r = {"bytes": size, "grid": g, "threads": t, "chunk": ch, "policy": pol,
                 "cold_us": c, "hot_us": ht, "after_fill_sleep20_us": af,
                 "exit_us": q(ex)["median"],
                 "recovered": (c - af) / (c - ht) if c > ht else None}
            rows.append(r)
            print(f"{size/MB:4.0f}MB g{g:4d} t{t:3d} c{ch:7d} {pol:10s} cold {c:6.2f} hot {ht:6.2f} "
                  f"after {af:6.2f} exit {r['exit_us']:6.1f} rec {r['recovered']}", flush=True)
        del w
    json.dump({"read_kernel": kind, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
