"""Lint speed on the 45-layer GLM-5.3-Flash schedule (not a timed test).

Prints a table and writes ``benchmarks/results/lint-speed-<date>.json``:
whole-process ``l2sched lint`` wall time (subprocess, includes interpreter
start-up and imports) and in-process ``lint_path`` time, median/min/max over
``--repeat`` runs, in seconds. Target: whole-process median <= 0.3 s on a
2-core machine (issue 4).

The command is the ``l2sched`` console script next to this interpreter (not a
version-manager shim on PATH, which adds its own start-up; when PATH finds a
different ``l2sched``, that one is timed too). With PYTHONDONTWRITEBYTECODE
set and an editable install, every run compiles l2sched from source; a second
row times the same command with a warm bytecode cache in a temporary
PYTHONPYCACHEPREFIX (what an ordinary install sees). ``import networkx`` and
bare interpreter start-up are timed for reference, with the load average.

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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"


def _stats(xs):
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
            "runs": len(xs)}


def _time_cmd(cmd, repeat, env=None, ok=(0, 1)):
    xs = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        xs.append(time.perf_counter() - t)
        if r.returncode not in ok:
            raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    return xs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args(argv)
    local = Path(sys.executable).parent / "l2sched"
    on_path = shutil.which("l2sched")
    exe = str(local) if local.exists() else on_path
    cmd = ([exe] if exe else [sys.executable, "-m", "l2sched"]) + ["lint", args.schedule]
    load_before = os.getloadavg()
    rows = []  # (label, stats)
    result = {
        "date": datetime.date.today().isoformat(), "schedule": args.schedule,
        "command": " ".join(cmd), "python": platform.python_version(),
        "cpus": os.cpu_count(), "machine": platform.machine(),
        "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "target_whole_process_median_s": 0.3,
    }
    result["whole_process"] = _stats(_time_cmd(cmd, args.repeat))
    rows.append(("whole process `l2sched lint`", result["whole_process"]))
    with tempfile.TemporaryDirectory(prefix="l2s-pycache-") as cache:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        _time_cmd(cmd, 1, env)  # fill the cache
        result["whole_process_bytecode_cached"] = _stats(_time_cmd(cmd, args.repeat, env))
    rows.append(("  same, warm bytecode cache", result["whole_process_bytecode_cached"]))
    if on_path and exe and os.path.realpath(on_path) != os.path.realpath(exe):
        shim = [on_path] + cmd[1:]
        result["whole_process_via_path"] = dict(
            _stats(_time_cmd(shim, args.repeat)), command=" ".join(shim))
        rows.append(("  same, `l2sched` found on PATH", result["whole_process_via_path"]))
    t = time.perf_counter()
    from l2sched.lint import lint_path  # noqa: E402  (import time measured)
    result["lint_import_s"] = time.perf_counter() - t
    inproc = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        lint_path(args.schedule)
        inproc.append(time.perf_counter() - t)
    result["in_process"] = _stats(inproc)
    rows.append(("in-process lint_path", result["in_process"]))
    result["bare_python_startup"] = _stats(
        _time_cmd([sys.executable, "-c", "pass"], args.repeat))
    rows.append(("bare `python -c pass`", result["bare_python_startup"]))
    result["python_import_networkx"] = _stats(
        _time_cmd([sys.executable, "-c", "import networkx"], args.repeat))
    rows.append(("`python -c 'import networkx'`", result["python_import_networkx"]))
    result["loadavg_before_after"] = [list(load_before), list(os.getloadavg())]
    table = [("measure", "median s", "min s", "max s")]
    table += [(label, *(f"{st[k]:.3f}" for k in ("median_s", "min_s", "max_s")))
              for label, st in rows]
    w = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    med = result["whole_process"]["median_s"]
    print(f"command: {result['command']}")
    print(f"target: whole-process median <= 0.3 s: {'met' if med <= 0.3 else 'NOT met'} "
          f"({med:.3f} s); load average before/after: "
          f"{load_before[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    out = ROOT / "benchmarks" / "results" / f"lint-speed-{result['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
