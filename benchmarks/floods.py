"""Error floods (issue 34 item 3, issue 43): wall time, output bytes and
peak memory of ``l2sched check``, ``compile`` and ``lint`` (human) on a
schedule whose one window names 50,000 patterns that match nothing, written
20 to a line (``lines``), all on one line (``one-line``), one target each
(``targets``: ``this nomatch_0.weight`` per line) or one glob target each
(``target-globs``: ``this nomatch_0.*``), and on one of 2,000 windows each
with a misspelt hook point and a carry to an unknown window (``typos``).
Whole processes (``python -m l2sched``), median of ``--repeat``; prints a
table and writes ``benchmarks/results/floods-<date>[-LABEL].json`` and
``.md``.

Usage (from the repository root)::

    python benchmarks/floods.py [--repeat 3] [--patterns 50000] [--windows 2000]
                                [--cases targets,target-globs] [--label after]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAD = "schedule flood\n\nmodel glm5next\ndevice h200\ntp 4\n"


def patterns_text(n: int, per_line: int) -> str:
    """One window naming ``n`` patterns that match nothing, ``per_line`` to a line."""
    pats = [f"nomatch_{i}.weight" for i in range(n)]
    lines = [f"    this {', '.join(pats[i:i + per_line])}" for i in range(0, n, per_line)]
    return HEAD + "\nwindow P at attn.pre_all_reduce budget 50MB {\n" + \
        "\n".join(lines) + "\n}\n"


def targets_text(n: int, glob: bool = False) -> str:
    """One window with ``n`` targets of one pattern each that matches
    nothing (``nomatch_I.weight``, or the glob ``nomatch_I.*``)."""
    suffix = ".*" if glob else ".weight"
    lines = [f"    this nomatch_{i}{suffix}" for i in range(n)]
    return HEAD + "\nwindow P at attn.pre_all_reduce budget 50MB {\n" + \
        "\n".join(lines) + "\n}\n"


def typos_text(n: int) -> str:
    """``n`` windows, each with a misspelt hook point and an unknown carry."""
    out = [HEAD]
    for i in range(n):
        out.append(f"window W{i} at attn.pre_allreduce budget 1MB layers {i % 45} "
                   f"carry X{i} {{\n    this self_attn.o_proj\n}}\n")
    return "\n".join(out)


#: Runs ``python -m l2sched ARGV`` and, at exit, writes its own peak
#: resident memory (``ru_maxrss``, KiB on Linux) to stderr after a marker.
_PEAK = ("import atexit, resource, runpy, sys\n"
         "atexit.register(lambda: sys.stderr.write('\\n@@peak_kib %d\\n' % "
         "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
         "sys.argv = ['l2sched'] + sys.argv[1:]\n"
         "runpy.run_module('l2sched', run_name='__main__')\n")


#: case -> its schedule text from the options
CASES = {
    "lines": lambda a: patterns_text(a.patterns, 20),
    "one-line": lambda a: patterns_text(a.patterns, a.patterns),
    "targets": lambda a: targets_text(a.patterns),
    "target-globs": lambda a: targets_text(a.patterns, glob=True),
    "typos": lambda a: typos_text(a.windows),
}


def measure(argv: list[str], repeat: int) -> tuple[float, int, int]:
    """Median wall seconds, stdout+stderr bytes and the largest peak
    resident memory (MB) of ``l2sched ARGV`` (``python -m l2sched``)."""
    times, size, peak = [], 0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _PEAK, *argv], cwd=ROOT,
                           capture_output=True)
        times.append(time.perf_counter() - t0)
        err, _, kib = p.stderr.rpartition(b"\n@@peak_kib ")
        size = len(p.stdout) + len(err)
        peak = max(peak, int(kib.split()[0]) // 1024 if kib.strip() else 0)
    return statistics.median(times), size, peak


def main(argv=None) -> int:
    """Run the benchmark; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", type=int, default=50000)
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"comma-separated cases (default: all: {', '.join(CASES)})")
    ap.add_argument("--label", default="",
                    help="appended to the result files' names (floods-DATE-LABEL)")
    args = ap.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r} (cases: {', '.join(CASES)})")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            path = os.path.join(tmp, f"{case}.l2s")
            Path(path).write_text(CASES[case](args), encoding="utf-8")
            for command in ("check", "compile", "lint"):
                print(f"floods: {case}: {command} ...", file=sys.stderr, flush=True)
                wall, size, peak = measure([command, path], args.repeat)
                rows.append({"case": case, "command": command, "wall_s": round(wall, 2),
                             "output_bytes": size, "peak_mb": peak})
    table = ["| case | command | wall s (median) | output bytes | peak MB |",
             "|---|---|---|---|---|"]
    table += [f"| {r['case']} | {r['command']} | {r['wall_s']:.2f} | "
              f"{r['output_bytes']:,} | {r['peak_mb']} |" for r in rows]
    text = "\n".join(table)
    print(text)
    write_report(args.out, "floods", args.label, "Error floods", rows, text,
                 f"whole-process wall time, median of {args.repeat}; output = stdout + "
                 "stderr bytes (human); peak = the process's largest resident memory",
                 "python benchmarks/floods.py " + " ".join(argv or sys.argv[1:]),
                 repeat=args.repeat, patterns=args.patterns, windows=args.windows)
    return 0


def write_report(out: str, name: str, label: str, title: str, rows: list, table: str,
                 what: str, command: str, **meta) -> Path:
    """Write ``OUT/NAME-DATE[-LABEL].json`` (the run's machine, ``meta`` and
    ``rows``) and ``.md`` (``title``, the ``command`` with the machine and
    its load, ``what`` was measured, the ``table``); returns their path
    without the suffix."""
    date = datetime.date.today().isoformat()
    meta = {"date": date, "python": platform.python_version(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0], "command": command.strip(), **meta}
    md = (f"# {title}, {date}\n\n`{meta['command']}` on {meta['cpus']} CPUs (1-minute "
          f"load average {meta['load_average']:.1f} at the end), Python "
          f"{meta['python']}: {what}.\n\n{table}\n")
    base = Path(out) / (f"{name}-{date}" + (f"-{label}" if label else ""))
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1)
                                         + "\n", encoding="utf-8")
    base.with_suffix(".md").write_text(md, encoding="utf-8")
    print(f"wrote {base}.json and {base}.md", file=sys.stderr)
    return base


if __name__ == "__main__":
    sys.exit(main())
