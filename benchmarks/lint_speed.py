"""Lint speed on the 45-layer GLM-5.3-Flash schedule (not a timed test).

Prints a table and writes ``benchmarks/results/lint-speed-<date>.json``:
whole-process ``l2sched lint`` wall time (subprocess, includes interpreter
start-up and imports) and in-process ``lint_path`` time, median/min/max over
``--repeat`` runs, in seconds. Target: whole-process median <= 0.3 s on a
2-core machine (issue 4).

    python benchmarks/lint_speed.py [--repeat 11] [SCHEDULE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"


def _stats(xs):
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
            "runs": len(xs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args(argv)
    exe = shutil.which("l2sched")
    cmd = [exe] if exe else [sys.executable, "-m", "l2sched.cli"]
    cmd += ["lint", args.schedule]
    proc = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        proc.append(time.perf_counter() - t)
        if r.returncode not in (0, 1):
            print(r.stderr, file=sys.stderr)
            return 2
    t = time.perf_counter()
    from l2sched.lint import lint_path  # noqa: E402  (import time measured)
    import_s = time.perf_counter() - t
    inproc = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        lint_path(args.schedule)
        inproc.append(time.perf_counter() - t)
    py = subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
    t = time.perf_counter()
    for _ in range(5):
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
    bare = (time.perf_counter() - t) / 5
    del py
    result = {
        "date": datetime.date.today().isoformat(), "schedule": args.schedule,
        "command": " ".join(cmd), "python": platform.python_version(),
        "cpus": os.cpu_count(), "machine": platform.machine(),
        "whole_process": _stats(proc), "in_process": _stats(inproc),
        "lint_import_s": import_s, "bare_python_startup_s": bare,
        "target_whole_process_median_s": 0.3,
    }
    rows = [("measure", "median s", "min s", "max s"),
            ("whole process `l2sched lint`", *(f"{result['whole_process'][k]:.3f}"
                                              for k in ("median_s", "min_s", "max_s"))),
            ("in-process lint_path", *(f"{result['in_process'][k]:.3f}"
                                       for k in ("median_s", "min_s", "max_s"))),
            ("bare `python -c pass`", f"{bare:.3f}", "", "")]
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    out = ROOT / "benchmarks" / "results" / f"lint-speed-{result['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
