"""On which of the graph executor's streams did each arm's kernels run? From the
kernel traces of `l2sched bench run --trace-dir` (issue 36: does a fill's capture
launch move the model's own kernels off its main stream?).

    python3 lab/experiments/trace_streams.py DIR/trace-M16-none.json DIR/trace-M16-ARM.json... \
        [--json-out streams.json] [--md-out streams.md]

The first trace is the base (no fills). Per trace: its main stream (the one with
the most kernels), the model's kernels there, and every other stream with its fill
kernels (names containing ``fill_kernel``, l2sched's CuTe DSL fills) and its other
kernels. "Off main" = the base's main-stream kernels minus the arm's: the model's
kernels that the executor ran on another stream. The non-fill kernels on the streams
that hold fills are listed by name. `trace_compare.py` refuses such
pairs (their main streams differ); this script is for them.
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.bench.trace import kernel_timeline, main_stream  # noqa: E402
from probe_output import write_probe  # noqa: E402

#: A substring of the fill kernels' names (l2sched.runtime.kernel's CuTe DSL kernels).
FILL_NAME = "fill_kernel"


def streams_of(timeline: dict) -> dict:
    """``{"main": stream, "main_kernels": n, "streams": {stream: {"fills",
    "other_names": {name: count}}}}`` of a ``kernel_timeline`` (every stream but
    the main one under ``streams``; stream ids as strings)."""
    ms = main_stream(timeline)
    rest = {}
    for s, ks in timeline.items():
        if s == ms:
            continue
        rest[str(s)] = {"fills": sum(FILL_NAME in n for _, _, n in ks),
                        "other_names": dict(collections.Counter(
                            n for _, _, n in ks if FILL_NAME not in n))}
    return {"main": str(ms), "main_kernels": len(timeline[ms]), "streams": rest}


def summary(base: dict, arm: dict) -> dict:
    """The arm's streams (``streams_of``) against the base's: ``off_main`` (the
    base's main-stream kernels minus the arm's), ``fill_streams`` (streams with a
    fill), and ``moved_names``: the non-fill kernels on streams that hold fills."""
    moved = collections.Counter()
    for rec in arm["streams"].values():
        if rec["fills"]:
            moved.update(rec["other_names"])
    return {"off_main": base["main_kernels"] - arm["main_kernels"],
            "fill_streams": sum(1 for r in arm["streams"].values() if r["fills"]),
            "fills": sum(r["fills"] for r in arm["streams"].values()),
            "moved_names": dict(moved.most_common())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("arms", nargs="+")
    ap.add_argument("--json-out", default="/dev/null")
    ap.add_argument("--md-out", default="")
    args = ap.parse_args(argv)
    found = {}
    for path in [args.base] + args.arms:
        try:
            found[path] = streams_of(kernel_timeline(path))
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            sys.exit(f"trace_streams: {path}: {e}")
    base = found[args.base]
    lines = [f"# Streams of the arms against {os.path.basename(args.base)} "
             f"(main stream: {base['main_kernels']} kernels)", "",
             "| trace | main-stream kernels | off main | fills | streams with fills "
             "| non-fill kernels on fill streams |", "|---|---|---|---|---|---|"]
    out = {"base": args.base, "traces": found, "summary": {}}
    for path in args.arms:
        s = out["summary"][path] = summary(base, found[path])
        moved = ", ".join(f"{n[:48]} x{c}" for n, c in s["moved_names"].items()) or "-"
        lines.append(f"| {os.path.basename(path)} | {found[path]['main_kernels']} | "
                     f"{s['off_main']} | {s['fills']} | {s['fill_streams']} | {moved} |")
    write_probe(out, lines, args.json_out, args.md_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
