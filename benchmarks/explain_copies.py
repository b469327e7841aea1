"""``l2sched explain PLAN`` on a plan whose issues are copied K times
(issue 43: 10 copies took 6.9 s, 20 took 25 s, 200 did not finish in
60 s). Each copy repeats every issue, so the plan check reports an issue
written twice and bytes fetched twice for each: the work is locating
K x issues problems in a file K times longer. Whole processes (``python -m
l2sched explain``), median of ``--repeat``, each stopped after
``--timeout`` seconds; prints a table and writes
``benchmarks/results/explain-copies-<date>[-LABEL].json`` and ``.md``.

Usage (from the repository root)::

    python benchmarks/explain_copies.py [--copies 10,20,200] [--repeat 3]
                                        [--timeout 120] [--label after]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floods import write_report  # the same report files as floods.py

ROOT = Path(__file__).resolve().parent.parent
SCHEDULE = "schedules/glm53-flash-h200-tp4.l2s"


def measure(argv: list[str], repeat: int, timeout: float) -> tuple[float | None, int]:
    """Median wall seconds of ``l2sched ARGV`` (None when a run passed
    ``timeout``) and its exit code."""
    times, rc = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-m", "l2sched", *argv], cwd=ROOT,
                               capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, -1
        times.append(time.perf_counter() - t0)
        rc = p.returncode
    return statistics.median(times), rc


def main(argv=None) -> int:
    """Run the benchmark; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", default="1,10,20,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    copies = [int(c) for c in args.copies.split(",") if c]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        subprocess.run([sys.executable, "-m", "l2sched", "compile", SCHEDULE, "-o", plan],
                       cwd=ROOT, check=True, capture_output=True)
        doc = json.loads(Path(plan).read_text(encoding="utf-8"))
        for k in copies:
            path = os.path.join(tmp, f"plan_x{k}.json")
            Path(path).write_text(json.dumps({**doc, "issues": doc["issues"] * k},
                                             indent=1), encoding="utf-8")
            print(f"explain_copies: {k} ...", file=sys.stderr, flush=True)
            wall, rc = measure(["explain", path], args.repeat, args.timeout)
            rows.append({"copies": k, "issues": len(doc["issues"]) * k,
                         "bytes": os.path.getsize(path), "exit": rc,
                         "wall_s": None if wall is None else round(wall, 2)})
    table = ["| copies | issues | plan bytes | exit | wall s (median) |",
             "|---|---|---|---|---|"]
    table += [f"| {r['copies']} | {r['issues']:,} | {r['bytes']:,} | {r['exit']} | "
              + (f"{r['wall_s']:.2f}" if r["wall_s"] is not None
                 else f"> {args.timeout:g} (stopped)") + " |" for r in rows]
    text = "\n".join(table)
    print(text)
    write_report(args.out, "explain-copies", args.label, "explain on copied issues",
                 rows, text,
                 f"`l2sched explain` of the plan of `{SCHEDULE}` with its issues copied "
                 f"K times (exit 1: every copy is reported); whole-process wall time, "
                 f"median of {args.repeat}",
                 "python benchmarks/explain_copies.py " + " ".join(argv or sys.argv[1:]),
                 repeat=args.repeat, timeout_s=args.timeout, schedule=SCHEDULE)
    return 0

if __name__ == "__main__":
    sys.exit(main())
