"""Grid / threads / chunk search for the L2 fill kernel on the H200.

    python3 lab/experiments/kernel_search.py --out search.json [--size-mb 48]

For every (grid CTAs, threads per CTA, chunk bytes) variant: fill a ``--size-mb``
MB buffer after a 1 GiB read flush and find when it has landed, by effect (a
dependent read after the fill plus a sleep; see kernel_bench.fill_profile).
Ranks by the fill time (us) at landing, then by the immediate fill+read time.
"""

import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbours
from kernel_bench import MB, fill_profile, probe_setup  # noqa: E402

from l2sched.runtime import kernel as K  # noqa: E402


def main():
    def extra(ap):
        ap.add_argument("--size-mb", type=int, default=48)
        ap.add_argument("--grids", default="132,264,528,1056")
        ap.add_argument("--threads", default="32,128")
        ap.add_argument("--chunks", default="8192,16384,32768,65536")
    a, b, s_handle = probe_setup(15, extra)
    delays = [0, 3, 6, 9, 12, 15, 20, 25, 30]
    rows = []
    for g, t, c in itertools.product(*(map(int, x.split(",")) for x in
                                       (a.grids, a.threads, a.chunks))):
        kern = K.get_kernel(0, grid=g, threads=t, chunk=c)
        if kern is None:
            rows.append({"grid": g, "threads": t, "chunk": c, "error": K.disabled_reason()})
            continue
        r = fill_profile(b, kern, a.size_mb * MB, delays, s_handle)
        d0 = r["delays"][0]
        rows.append({"grid": g, "threads": t, "chunk": c,
                     "landed": r["landed"],
                     "exit_us": r["kernel_launch_to_exit_us"]["median"],
                     "fill_then_read_us": d0["fill_plus_sleep_us"]["median"] + d0["read_us"]["median"],
                     "cold_read_us": r["cold_read_us"]["median"],
                     "hot_read_us": r["hot_read_us"]["median"]})
        print(rows[-1], flush=True)
    ok = [r for r in rows if r.get("landed")]
    ok.sort(key=lambda r: (r["landed"]["fill_time_us"], r["fill_then_read_us"]))
    json.dump({"size_bytes": a.size_mb * MB, "reps": a.reps, "variants": rows,
               "best": ok[:5]}, open(a.out, "w"), indent=1)
    print("BEST")
    for r in ok[:5]:
        print(r)


if __name__ == "__main__":
    main()
