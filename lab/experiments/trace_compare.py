"""Where does an arm's decode step lose time? Compare the kernel traces of
two arms written by `l2sched bench run --trace-dir DIR`.

    python3 lab/experiments/trace_compare.py DIR/trace-M16-none.json DIR/trace-M16-ARM.json \
        [--json-out cmp.json] [--md-out cmp.md]

Prints (and writes) the main streams' spans, the extra time inside kernels
and in the gaps before them, the kernel names it accumulates on, the single
worst kernels, and the other streams' kernels (fills, the shared expert).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.bench.trace import compare_timelines, kernel_timeline, main_stream  # noqa: E402
from l2sched.errors import L2sError  # noqa: E402
from probe_output import write_probe  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("arm")
    ap.add_argument("--json-out", default="/dev/null")
    ap.add_argument("--md-out", default="")
    args = ap.parse_args(argv)
    timelines = []
    for path in (args.base, args.arm):
        try:
            timelines.append(kernel_timeline(path))
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            sys.exit(f"trace_compare: {path}: {e}")
    base, arm = timelines
    try:
        cmp = compare_timelines(base, arm)
    except ValueError as e:
        sys.exit(f"trace_compare: {args.base} vs {args.arm}: {e}")
    ms = main_stream(arm)
    others = {str(s): {"kernels": len(k), "busy_us": sum(d for _, d, _ in k),
                       "names": sorted({n[:60] for _, _, n in k})[:5]}
              for s, k in arm.items() if s != ms}
    lines = [f"# {args.arm} vs {args.base}", "",
             f"Main stream span: {cmp['span_us'][0]:.1f} -> {cmp['span_us'][1]:.1f} us "
             f"({cmp['span_us'][1] - cmp['span_us'][0]:+.1f}); inside kernels "
             f"{cmp['kernel_us']:+.1f} us, in the gaps before them {cmp['gap_us']:+.1f} us.", "",
             "| kernel (main stream) | count | extra in kernels us | extra in gaps us |",
             "|---|---|---|---|"]
    for name, r in list(cmp["by_kernel"].items())[:12]:
        lines.append(f"| {name[:80]} | {r['count']} | {r['kernel_us']:+.1f} | {r['gap_us']:+.1f} |")
    lines += ["", "| # | kernel | extra gap us | extra duration us |", "|---|---|---|---|"]
    for i, name, dg, dk in cmp["worst"]:
        lines.append(f"| {i} | {name[:80]} | {dg:+.2f} | {dk:+.2f} |")
    lines += ["", "Other streams of the arm: " + "; ".join(
        f"{s}: {o['kernels']} kernels, {o['busy_us']:.1f} us busy ({', '.join(o['names'])})"
        for s, o in others.items()) + "."]
    try:
        write_probe({"compare": cmp, "other_streams": others, "base": args.base,
                     "arm": args.arm}, lines, args.json_out, args.md_out)
    except L2sError as e:
        sys.exit(f"trace_compare: {e}")


if __name__ == "__main__":
    main()
