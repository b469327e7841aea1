"""How ``l2sched check``, ``compile`` and ``lint`` scale with a schedule's size.

Generates schedules with 100..20,000 windows (one target each, spread over
the hook points and layers) and one window with 1..20,000 target patterns
(distinct globs over the layer's tensor paths), times each command in
process (``l2sched.cli.main``, output to a null stream; the interpreter's
start and imports are not counted), prints a table and writes
``benchmarks/results/scaling-<date>.json`` and ``.md``.

Usage (from the repository root)::

    python benchmarks/scaling.py                      # the full curve
    python benchmarks/scaling.py --quick              # up to 2,000
    python benchmarks/scaling.py --windows 100,1000 --patterns 1,100 --repeat 3

Times are the process's CPU seconds (the median of ``--repeat`` runs; wall
times are in the JSON too): the work is single-threaded, so CPU time stays
meaningful when other work shares the machine. Near-linear means: time /
size roughly constant from the middle of the range up (the ``us/unit``
columns). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from l2sched.cli import main  # noqa: E402

#: Hook points that fire in every layer kind of GLM-5.3-Flash.
HOOKS = ("layer.entry", "attn.after_first_proj", "attn.before_core",
         "attn.after_core", "attn.pre_all_reduce", "attn.post_all_reduce",
         "layer.exit")
#: Target patterns the generated windows name (each matches in some layer kind).
TARGETS = ("self_attn.o_proj", "hc_attn_*", "input_layernorm",
           "post_attention_layernorm", "hc_ffn_*", "self_attn.in_proj_qkvbfg_a",
           "self_attn.fused_qkv_a_proj", "self_attn.q_b_proj", "mlp.gate",
           "self_attn.indexer.wq_b")
#: Tensor paths the pattern variants are made from (KDA and MLA layers).
PATHS = ("self_attn.o_proj.weight", "self_attn.in_proj_qkvbfg_a.weight",
         "self_attn.f_b_proj.weight", "self_attn.g_b_proj.weight",
         "input_layernorm.weight", "post_attention_layernorm.weight",
         "self_attn.fused_qkv_a_proj.weight", "self_attn.q_b_proj.weight",
         "self_attn.indexer.wq_b.weight", "self_attn.indexer.wk_weights_proj.weight",
         "mlp.gate.weight", "mlp.shared_experts.gate_up_proj.weight",
         "mlp.shared_experts.down_proj.weight", "self_attn.indexer.k_norm.weight",
         "self_attn.indexer.index_kpool_compress_gate")
HEAD = "schedule scaling\n\nmodel glm5next\ndevice h200\ntp 4\n"
DEFAULT_WINDOWS = (100, 300, 1000, 3000, 10000, 20000)
DEFAULT_PATTERNS = (1, 10, 100, 1000, 2000, 5000, 10000, 20000)


def windows_schedule(n: int) -> str:
    """A schedule of ``n`` windows: window ``i`` fires in layer ``i % 45``
    at a hook point of every layer kind, budget 1 MB, one target."""
    out = [HEAD]
    for i in range(n):
        scope = "this" if i % 3 else "next"
        out.append(f"window W{i} at {HOOKS[i % len(HOOKS)]} budget 1MB layers {i % 45} {{\n"
                   f"    {scope} {TARGETS[i % len(TARGETS)]}\n}}\n")
    return "\n".join(out)


def pattern_variants(n: int) -> list[str]:
    """``n`` distinct glob patterns, each matching one tensor path of
    ``PATHS``: the path with two of its characters written as ``?`` or as a
    one-character set ``[c]`` (a deterministic order that mixes the paths)."""
    out: list[str] = []
    seen: set[str] = set()
    forms = (lambda c: "?", lambda c: f"[{c}]")
    for path in PATHS:
        for a in range(len(path)):
            for b in range(a + 1, len(path)):
                if path[a] == "." or path[b] == ".":
                    continue
                for fa in forms:
                    for fb in forms:
                        p = path[:a] + fa(path[a]) + path[a + 1:b] + fb(path[b]) + \
                            path[b + 1:]
                        if p not in seen:
                            seen.add(p)
                            out.append(p)
    if len(out) < n:
        raise ValueError(f"only {len(out)} distinct patterns available, asked {n}")
    out.sort(key=lambda p: (zlib.crc32(p.encode()), p))
    return out[:n]


def patterns_schedule(n: int) -> str:
    """One window (every layer, budget 50 MB) with ``n`` target patterns, 20
    to a ``this`` line."""
    pats = pattern_variants(n)
    lines = [f"    this {', '.join(pats[i:i + 20])}" for i in range(0, n, 20)]
    return HEAD + "\nwindow P at attn.pre_all_reduce budget 50MB {\n" + \
        "\n".join(lines) + "\n}\n"


def time_command(argv: list[str], repeat: int) -> tuple[float, float]:
    """``(CPU s, wall s)`` of ``l2sched ARGV`` in process (medians of
    ``repeat`` runs), stdout and stderr to a null stream. The process's CPU
    time is the measure: one thread does the work, so other load on the
    machine changes the wall time but hardly the CPU time."""
    cpu, wall = [], []
    for _ in range(repeat):
        sink = io.StringIO()
        c0, t0 = time.process_time(), time.perf_counter()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu), statistics.median(wall)


def run(kind: str, sizes, repeat: int, tmp: str) -> list[dict]:
    """Time check/compile/lint on the generated schedules of ``kind``
    (``windows`` or ``patterns``) at every size."""
    rows = []
    for n in sizes:
        text = windows_schedule(n) if kind == "windows" else patterns_schedule(n)
        path = os.path.join(tmp, f"{kind}-{n}.l2s")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        row = {"kind": kind, "size": n, "lines": text.count("\n")}
        for command in ("check", "compile", "lint"):
            print(f"scaling: {kind}={n}: {command} ...", file=sys.stderr, flush=True)
            argv = [command, path] + (["--no-summary"] if command == "lint" else [])
            cpu, wall = time_command(argv, repeat)
            row[command], row[command + "_wall"] = round(cpu, 4), round(wall, 4)
        print(f"scaling: {kind}={n}: CPU check {row['check']:.2f} s, compile "
              f"{row['compile']:.2f} s, lint {row['lint']:.2f} s (wall "
              f"{row['lint_wall']:.2f} s)", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """A markdown table: size, CPU seconds per command, and CPU
    microseconds per window/pattern (flat = linear)."""
    out = [("| kind | size | check s | compile s | lint s | check us/unit | "
            "compile us/unit | lint us/unit |"), "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per = [f"{1e6 * r[c] / r['size']:.0f}" for c in ("check", "compile", "lint")]
        out.append(f"| {r['kind']} | {r['size']:,} | {r['check']:.3f} | "
                   f"{r['compile']:.3f} | {r['lint']:.3f} | " + " | ".join(per) + " |")
    return "\n".join(out)


def main_cli(argv=None) -> int:
    """Run the benchmark; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", default=",".join(map(str, DEFAULT_WINDOWS)))
    ap.add_argument("--patterns", default=",".join(map(str, DEFAULT_PATTERNS)))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="sizes up to 2,000")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="directory for scaling-<date>.json and .md")
    args = ap.parse_args(argv)
    sizes_w = [int(x) for x in args.windows.split(",") if x]
    sizes_p = [int(x) for x in args.patterns.split(",") if x]
    if args.quick:
        sizes_w = [n for n in sizes_w if n <= 2000]
        sizes_p = [n for n in sizes_p if n <= 2000]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = run("windows", sizes_w, args.repeat, tmp) + \
            run("patterns", sizes_p, args.repeat, tmp)
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))
    text = table(rows)
    print(text)
    date = datetime.date.today().isoformat()
    meta = {"date": date, "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "repeat": args.repeat, "load_average_1min": load,
            "command": "python benchmarks/scaling.py "
            + " ".join(argv if argv is not None else sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"scaling-{date}")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(f"# l2sched check/compile/lint scaling, {date}\n\n"
                f"`{meta['command'].strip()}` on {meta['cpus']} CPUs, Python "
                f"{meta['python']} (1-minute load average {load[0]} before, "
                f"{load[1]} after: other work shared the CPUs); in-process CPU "
                f"time of the command (s), median of {args.repeat} (wall times in "
                f"the JSON); `us/unit` = CPU microseconds per window or pattern."
                f"\n\n"
                + text + "\n")
    print(f"wrote {base}.json and {base}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main_cli())
