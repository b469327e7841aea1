"""Lint speed of two commits side by side (not a timed test).

Checks out each ref with ``git archive`` into a temporary folder and times,
interleaved (A, B, A, B, ... so both see the same machine load), the whole
process ``python -c 'from l2sched.cli import main; main(["lint", SCHEDULE])'``
with that folder first on ``sys.path`` (interpreter start-up, imports and the
lint), and the in-process lint of the same schedule (``--repeat`` runs in one
warm process per ref), each as wall time and as CPU time (user + system; less
sensitive to other load on the machine). Prints a table and writes
``benchmarks/results/lint-speed-compare-<date>.{json,md}``. Seconds; medians
with min and max.

    python benchmarks/lint_speed_compare.py OLD_REF [NEW_REF=HEAD] [--repeat 15]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEDULE = "schedules/glm53-flash-sm120-tp4.l2s"
WHOLE = ("import sys; sys.path.insert(0, {tree!r}); from l2sched.cli import main; "
         "sys.exit(main(['lint', {sched!r}]))")
IN_PROCESS = """
import json, statistics, sys, time
sys.path.insert(0, {tree!r})
from l2sched.cli import main
import contextlib, io
xs, cpu = [], []
for _ in range({repeat}):
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        main(["lint", {sched!r}])
    xs.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
print(json.dumps([xs, cpu]))
"""


def _checkout(ref: str, dest: Path) -> str:
    """The tree of ``ref`` under ``dest``; returns the full commit hash."""
    sha = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    data = subprocess.run(["git", "archive", "--format=tar", sha], cwd=ROOT, check=True,
                          capture_output=True).stdout
    dest.mkdir(parents=True)
    tar_path = dest.parent / (dest.name + ".tar")
    tar_path.write_bytes(data)
    with tarfile.open(tar_path) as t:
        t.extractall(dest, filter="data")
    return sha


def _stats(xs):
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
            "runs": len(xs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default="HEAD")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="")
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        trees, shas = {}, {}
        for label, ref in (("old", args.old), ("new", args.new)):
            trees[label] = Path(tmp) / label
            shas[label] = _checkout(ref, trees[label])
        whole: dict[str, list[float]] = {"old": [], "new": []}
        whole_cpu: dict[str, list[float]] = {"old": [], "new": []}
        for label in ("old", "new"):  # warm the bytecode caches once
            subprocess.run([sys.executable, "-c", WHOLE.format(tree=str(trees[label]),
                                                              sched=SCHEDULE)],
                           cwd=trees[label], env=env, capture_output=True)
        for _ in range(args.repeat):
            for label in ("old", "new"):
                t = time.perf_counter()
                ru = resource.getrusage(resource.RUSAGE_CHILDREN)
                r = subprocess.run([sys.executable, "-c",
                                    WHOLE.format(tree=str(trees[label]), sched=SCHEDULE)],
                                   cwd=trees[label], env=env, capture_output=True, text=True)
                whole[label].append(time.perf_counter() - t)
                ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
                whole_cpu[label].append(ru2.ru_utime - ru.ru_utime + ru2.ru_stime - ru.ru_stime)
                if r.returncode not in (0, 1):
                    raise SystemExit(f"{label}: exit {r.returncode}\n{r.stderr[-2000:]}")
        inproc = {}
        for label in ("old", "new"):
            r = subprocess.run([sys.executable, "-c", IN_PROCESS.format(
                tree=str(trees[label]), sched=SCHEDULE, repeat=args.repeat)],
                cwd=trees[label], env=env, capture_output=True, text=True, check=True)
            inproc[label] = json.loads(r.stdout.strip().splitlines()[-1])
            inproc[label + "_cpu"] = inproc[label][1]
            inproc[label] = inproc[label][0]
    res = {"date": datetime.date.today().isoformat(), "schedule": SCHEDULE,
           "python": sys.version.split()[0], "machine": platform.machine(),
           "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
           "old": {"ref": args.old, "commit": shas["old"], "whole_process": _stats(whole["old"]),
                   "whole_process_cpu": _stats(whole_cpu["old"]),
                   "in_process": _stats(inproc["old"]),
                   "in_process_cpu": _stats(inproc["old_cpu"])},
           "new": {"ref": args.new, "commit": shas["new"], "whole_process": _stats(whole["new"]),
                   "whole_process_cpu": _stats(whole_cpu["new"]),
                   "in_process": _stats(inproc["new"]),
                   "in_process_cpu": _stats(inproc["new_cpu"])}}
    rows = ["| commit | whole process wall s | whole process CPU s | in-process wall s "
            "| in-process CPU s |", "|---|---|---|---|---|"]

    def cell(x, f="{:.3f}"):
        return (f.format(x["median_s"]) + " (" + f.format(x["min_s"]) + "-"
                + f.format(x["max_s"]) + ")")
    for label in ("old", "new"):
        r = res[label]
        rows.append(f"| {label} {r['ref']} ({r['commit'][:10]}) | {cell(r['whole_process'])} "
                    f"| {cell(r['whole_process_cpu'])} | {cell(r['in_process'], '{:.4f}')} "
                    f"| {cell(r['in_process_cpu'], '{:.4f}')} |")
    md = "\n".join([f"# Lint speed side by side ({res['date']})", "",
                    f"`python benchmarks/lint_speed_compare.py {args.old} {args.new} "
                    f"--repeat {args.repeat}`: `l2sched lint {SCHEDULE}`, interleaved runs, "
                    f"Python {res['python']}, {res['cpus']} CPUs, load average "
                    f"{res['load_avg'][0]:.2f} at the end.", ""] + rows) + "\n"
    print(md)
    out = ROOT / "benchmarks" / "results" / f"lint-speed-compare-{res['date']}"
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
