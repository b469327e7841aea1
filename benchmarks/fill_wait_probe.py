"""Landed fraction of each fill kernel after longer waits than ``l2sched
profile``'s fill probe uses (0 / 10 / 40 us): does a bulk prefetch
(``cp.async.bulk.prefetch.L2``) land later? In the decode step a window's
fill has 90-300 us before its consumer (the lint's expert slack), and the
bulk-kernel arm gains there although the probe credits it 0-0.53.

    python benchmarks/fill_wait_probe.py [--waits 0,40,200,400]
        [--sizes 16,32,48] [--reps 40] --out OUT.json --md-out OUT.md

The probe's own ``probe_fill`` (``l2sched.bench.profile``) with other waits,
the fill shapes of the shipped ``h200`` profile; prints a table. GPU only.
Units: MB = 10^6 B, us.
"""

from __future__ import annotations

import argparse
import json
import sys
from types import SimpleNamespace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waits", default="0,40,200,400")
    ap.add_argument("--sizes", default="16,32,48")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", required=True)
    a = ap.parse_args()
    import torch

    import l2sched.bench.profile as P
    from l2sched.bench.timing import TimingBench
    from l2sched.model.devices import load_device
    if not torch.cuda.is_available():
        print("fill_wait_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    P.FILL_WAITS = tuple(int(x) for x in a.waits.split(","))
    P.FILL_SIZES = tuple(int(x) for x in a.sizes.split(","))
    prof = load_device("h200")
    shapes = {m: {"mode": m, "grid": fm.grid, "threads": fm.threads, "chunk": fm.chunk,
                  "stages": fm.stages} for m, fm in sorted(prof.fill_modes.items())}
    ctx = SimpleNamespace(torch=torch, bench=TimingBench(torch, a.reps), fill_shapes=shapes,
                          quick=False, progress=SimpleNamespace(step=lambda *_: None))
    res = P.probe_fill(ctx)
    lines = ["| kernel | MB | launch-to-exit us | " + " | ".join(
        f"landed after {w} us" for w in P.FILL_WAITS) + " |",
        "|---|---|---|" + "---|" * len(P.FILL_WAITS)]
    for mode, rec in res.items():
        for row in rec.get("rows", []):
            cells = [row["waits"][str(w)]["landed"] for w in P.FILL_WAITS]
            lines.append(f"| {mode} | {row['mb']} | {row['launch_to_exit_us']['median']:.1f} | "
                         + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    md = ("# Landed fraction after longer waits (benchmarks/fill_wait_probe.py)\n\n"
          f"GPU: {torch.cuda.get_device_name(0)}; {a.reps} rounds; the consumer is an "
          "M=8 GEMM over the filled weight (l2sched profile's fill probe).\n\n"
          + "\n".join(lines) + "\n")
    print(md)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"waits": P.FILL_WAITS, "sizes": P.FILL_SIZES, "fill": res}, f)
    with open(a.md_out, "w", encoding="utf-8") as f:
        f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
