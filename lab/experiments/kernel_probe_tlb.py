"""Is the cold->hot gap of a dependent read L2 residency or address translation?

    python3 lab/experiments/kernel_probe_tlb.py --out probe_tlb.json

For 16 and 32 MB buffers and read flushes of 256 MiB and 1 GiB: the read time
(Triton int32 sum, us, median) when cold, after a 'touch' (one 4-byte load per
64 KiB of the buffer: warms translations, brings 0.2% of the lines), after a
fill (+20 us sleep), after touch + fill, and hot (read twice).
"""

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
    k = K.get_kernel(0)
    rows = []
    big = b.flush_buf
    for flush_mib in (256, 1024):
        fb = big[: flush_mib * (1 << 20) // 4]
        fo = torch.empty((), dtype=torch.float32, device="cuda")
        b.flush = lambda fb=fb, fo=fo: torch.sum(fb, dim=0, out=fo)
        for size in (16 * MB, 32 * MB):
            w = torch.randn(size // 2, dtype=torch.bfloat16, device="cuda")
            tab = table_for(w)
            read, kind = make_read(w)
            xs = w.view(torch.int32)[:: 16384]
            to = torch.empty((), dtype=torch.int64, device="cuda")

            def touch():
                torch.sum(xs, dim=0, out=to)
            read(); touch()
            fill = lambda: (k.launch(tab.data_ptr(), 0, 1, h), b.sleep(20))  # noqa: E731
            res = {}
            res["cold"] = b.timed(b.flush, read)[1]
            res["touch"] = b.timed(lambda: (b.flush(), touch()), read)[1]
            res["fill"] = b.timed(lambda: (b.flush(), fill()), read)[1]
            res["touch_fill"] = b.timed(lambda: (b.flush(), touch(), fill()), read)[1]
            res["hot"] = b.timed(read, read)[1]
            row = {"flush_MiB": flush_mib, "bytes": size,
                   **{key: q(v)["median"] for key, v in res.items()},
                   "spread": {key: (q(v)["p10"], q(v)["p90"]) for key, v in res.items()}}
            rows.append(row)
            print(f"flush {flush_mib:5d} MiB {size/MB:4.0f} MB  " + "  ".join(
                f"{key} {row[key]:6.2f}" for key in res), flush=True)
            del w
    json.dump({"kernel": list(k.key), "ffi": k.ffi, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
