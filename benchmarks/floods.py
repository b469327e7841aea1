"""Error floods (issue 34 item 3): wall time and output bytes of
``l2sched check``, ``compile`` and ``lint`` (human) on a schedule whose one
window names 50,000 patterns that match nothing, written 20 to a line
(``lines``) or all on one line (``one-line``), and on one of 2,000 windows
each with a misspelt hook point and a carry to an unknown window
(``typos``). Whole processes (``python -m l2sched``), median of
``--repeat``; prints a table and writes ``benchmarks/results/floods-<date>.json``
and ``.md``.

Usage (from the repository root)::

    python benchmarks/floods.py [--repeat 3] [--patterns 50000] [--windows 2000]
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


def typos_text(n: int) -> str:
    """``n`` windows, each with a misspelt hook point and an unknown carry."""
    out = [HEAD]
    for i in range(n):
        out.append(f"window W{i} at attn.pre_allreduce budget 1MB layers {i % 45} "
                   f"carry X{i} {{\n    this self_attn.o_proj\n}}\n")
    return "\n".join(out)


def measure(argv: list[str], repeat: int) -> tuple[float, int]:
    """Median wall seconds and stdout+stderr bytes of ``l2sched ARGV``."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "l2sched", *argv], cwd=ROOT,
                           capture_output=True)
        times.append(time.perf_counter() - t0)
        size = len(p.stdout) + len(p.stderr)
    return statistics.median(times), size


def main(argv=None) -> int:
    """Run the benchmark; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", type=int, default=50000)
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"lines": patterns_text(args.patterns, 20),
                 "one-line": patterns_text(args.patterns, args.patterns),
                 "typos": typos_text(args.windows)}
        for case, text in cases.items():
            path = os.path.join(tmp, f"{case}.l2s")
            Path(path).write_text(text, encoding="utf-8")
            for command in ("check", "compile", "lint"):
                print(f"floods: {case}: {command} ...", file=sys.stderr, flush=True)
                wall, size = measure([command, path], args.repeat)
                rows.append({"case": case, "command": command, "wall_s": round(wall, 2),
                             "output_bytes": size})
    table = ["| case | command | wall s (median) | output bytes |", "|---|---|---|---|"]
    table += [f"| {r['case']} | {r['command']} | {r['wall_s']:.2f} | {r['output_bytes']:,} |"
              for r in rows]
    text = "\n".join(table)
    print(text)
    date = datetime.date.today().isoformat()
    meta = {"date": date, "python": platform.python_version(), "cpus": os.cpu_count(),
            "repeat": args.repeat, "patterns": args.patterns, "windows": args.windows,
            "command": "python benchmarks/floods.py " + " ".join(argv or sys.argv[1:])}
    md = (f"# Error floods, {date}\n\n`{meta['command'].strip()}` on {meta['cpus']} "
          f"CPUs, Python {meta['python']}: whole-process wall time, median of "
          f"{args.repeat}; output = stdout + stderr bytes (human).\n\n{text}\n")
    base = Path(args.out) / f"floods-{date}"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1)
                                         + "\n", encoding="utf-8")
    base.with_suffix(".md").write_text(md, encoding="utf-8")
    print(f"wrote {base}.json and {base}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
