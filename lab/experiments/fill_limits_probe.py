"""Are issue 13's two missed marks limits of the H200 or of the copy kernel?

    python3 lab/experiments/fill_limits_probe.py --out probe.json [--md-out probe.md]

1. Recovery at 16.8 MB. `bench kernel` (warmed, sequence-matched) found every
   landing fill (copy, load) recovering 0.68-0.82 of a 16.8 MB GEMM's
   cold->hot gap (benchmarks/results/h200-kernel-2026-12-01-seq.md). Here the
   same measurement (``bench.timing.after_fill``, warmed) with other "fills"
   of the weight: the copy kernel (66 CTAs), a bandwidth-bound Triton read of
   the whole weight from every SM, and the consumer GEMM itself (which makes
   the weight as hot as the hot reference, so it must recover about 1.0: a
   check of the method). If the Triton read also stops near 0.8, no fill that
   reads the weight once gets further with this consumer.
2. The rate at 50 MB. A 0-byte copy fill took 3.8 us between two event nodes
   of a CUDA graph (benchmarks/results/h200-kernel-2026-12-01-graph.md). Here
   a trivial kernel (torch's add on 256 floats) and the 0-byte fill, each
   between two event nodes after a flush: how much of the 3.8 us any kernel
   node pays.
Needs torch with CUDA, Triton, nvidia-cutlass-dsl.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.bench.timing import dependent_read  # noqa: E402
from l2sched.bench.timing import TimingBench, after_fill, gemm_consumer, stats  # noqa: E402
from probe_output import write_probe  # noqa: E402
from l2sched.runtime import kernel as K  # noqa: E402


class _Fill:
    """A stand-in for a compiled fill: ``launch(...)`` runs ``fn()``."""

    def __init__(self, fn):
        self.fn = fn

    def launch(self, *_args):
        self.fn()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", default="")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)
    b = TimingBench(torch, 40)
    copy = K.get_kernel(0, policy="evict_last", mode="copy", grid=66, chunk=32768, stages=4)
    out = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "rounds": args.rounds, "recovery": {}}
    small = torch.zeros(256, device="cuda")
    small.add_(1)  # loaded outside any capture

    def nothing():  # the 0-byte stand-in of the non-kernel fills: one tiny kernel
        small.add_(1)
    for n, k in ((4096, 2048), (3584, 4096)):
        mm, w, _, twin = gemm_consumer(torch, n, k)
        read, kind = dependent_read(torch, w)
        fills = {"copy-66": copy, f"read ({kind}, every SM)": _Fill(read),
                 "the consumer GEMM itself": _Fill(mm)}
        rows = {}
        for name, kern in fills.items():
            res = after_fill(b, kern, mm, w, (0,), args.rounds, warm=twin,
                             empty_fill=None if kern is copy else nothing)
            got = res["warmed"]["waits"][0]
            rows[name] = {"recovered": got["recovered"], "p5_p95": got["recovered_p5_p95"],
                          "after_us": got["us"], "cold_us": got["cold_us"],
                          "hot_us": got["hot_us"]}
        out["recovery"][f"{n * k * 2 / 1e6:.1f} MB"] = rows
        print(f"{n}x{k} done", file=sys.stderr, flush=True)

    empty = torch.zeros((1, 2), dtype=torch.int64, device="cuda")
    out["graph_node_us"] = {
        "torch add on 256 floats": stats(b.graph_timed(b.flush, lambda s: small.add_(1))),
        "copy-66 fill over 0 bytes": stats(b.graph_timed(
            b.flush, lambda s: copy.launch(empty.data_ptr(), 0, 1, s))),
        "nothing (two adjacent event nodes)": stats(b.graph_timed(b.flush, lambda s: None)),
    }
    lines = [f"# Fill limits on {out['device']} ({out['date']})", "",
             f"`{out['command']}`; recovery: warmed, sequence-matched, means of "
             f"{args.rounds} interleaved rounds, 90% bootstrap interval.", "",
             "| weight | fill | recovered | hot / cold / after us |", "|---|---|---|---|"]
    for wname, rows in out["recovery"].items():
        for f, r in rows.items():
            rec = "-" if r["recovered"] is None else (
                f"{r['recovered']:.2f} [{r['p5_p95'][0]:.2f}-{r['p5_p95'][1]:.2f}]")
            lines.append(f"| {wname} | {f} | {rec} | {r['hot_us']['mean']:.2f} / "
                         f"{r['cold_us']['mean']:.2f} / {r['after_us']['mean']:.2f} |")
    lines += ["", "Between two event nodes of a CUDA graph, after a flush (us, median "
              "[p10-p90]):", "", "| node | us |", "|---|---|"]
    for name, st in out["graph_node_us"].items():
        lines.append(f"| {name} | {st['median']:.2f} [{st['p10']:.2f}-{st['p90']:.2f}] |")
    write_probe(out, lines, args.out, args.md_out)


if __name__ == "__main__":
    main()
