"""Does a cold weight read pay for address translations that the ops probe's
1 GiB flush leaves cached?

    python3 lab/experiments/translation_probe.py --out probe.json [--md-out probe.md]
        [--reps 40] [--far-gib 32]

An M=8 bf16 GEMM (``timing.gemm_consumer``) over 16.8 and 33.6 MB weights,
interleaved rounds (``TimingBench.interleaved``), median us:

- ``cold``: the profile's flush (a 1 GiB read), then the GEMM;
- ``cold, far pages``: the flush, then one 4-byte read per 64 KiB of a
  ``--far-gib`` GiB buffer (evicts cached translations; moves 0.05% of its
  bytes), then the GEMM;
- ``cold, far pages, weight touched``: as above, then one element per 64 KiB
  of the weight (its translations cached again, 0.05% of its lines), then the
  GEMM;
- ``hot``: the GEMM twice.

If ``cold, far pages`` is slower than ``cold`` and the touched case gives the
difference back, a decode step that reads GBs of weights pays translation
misses that the ops probe's cold time does not contain.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
import torch  # noqa: E402

from l2sched.bench.timing import TimingBench, gemm_consumer, stats  # noqa: E402
from probe_output import write_probe  # noqa: E402

PAGE_STRIDE = 64 * 1024  # bytes between the touched elements


def sparse_reader(t):
    """A callable reading one element per ``PAGE_STRIDE`` bytes of ``t``."""
    flat = t.view(-1)
    step = max(1, PAGE_STRIDE // t.element_size())
    view = flat[::step]
    out = torch.empty((), dtype=torch.float32, device="cuda")

    def read():
        torch.sum(view.float(), dim=0, out=out)
    return read


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="result JSON path")
    ap.add_argument("--md-out", default="", help="markdown table path (optional)")
    ap.add_argument("--reps", type=int, default=40, help="interleaved rounds (>= 3)")
    ap.add_argument("--far-gib", type=int, default=32,
                    help="GiB of the buffer whose pages evict cached translations (>= 1)")
    a = ap.parse_args()
    if a.reps < 3 or a.far_gib < 1:
        ap.error("--reps must be >= 3 and --far-gib >= 1")
    if not torch.cuda.is_available():
        print("translation_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    b = TimingBench(torch, a.reps)
    far = torch.ones(a.far_gib << 28, dtype=torch.int32, device="cuda")
    far_read = sparse_reader(far)
    rows = []
    for n, k in ((4096, 2048), (4096, 4096)):
        mm, w, _, _ = gemm_consumer(torch, n, k)
        touch = sparse_reader(w)

        def far_pages():
            b.flush()
            far_read()

        def far_touched():
            far_pages()
            touch()
        cases = {"cold": (b.flush, mm), "cold, far pages": (far_pages, mm),
                 "cold, far pages, weight touched": (far_touched, mm), "hot": (mm, mm)}
        t = b.interleaved(cases)
        st = {name: stats(v) for name, v in t.items()}
        rows.append({"weight_bytes": w.numel() * 2,
                     "median_us": {name: x["median"] for name, x in st.items()},
                     "p10_p90_us": {name: (x["p10"], x["p90"]) for name, x in st.items()}})
    out = {"gpu": torch.cuda.get_device_name(0), "reps": a.reps, "far_gib": a.far_gib,
           "rows": rows}
    lines = [f"# Translation probe ({out['gpu']}, {a.reps} interleaved rounds, far buffer "
             f"{a.far_gib} GiB)", "",
             "| weight MB | " + " | ".join(cases) + " |", "|---" * (len(cases) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['weight_bytes'] / 1e6:.1f} | "
                     + " | ".join(f"{r['median_us'][c]:.2f}" for c in cases) + " |")
    write_probe(out, lines, a.out, a.md_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
