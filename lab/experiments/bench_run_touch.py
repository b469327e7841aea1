"""`python -m lab bench run` with extra "touch" arms: does what a fill buys in the
decode step come from the lines it lands, or from the address translations
its reads leave cached?

    python3 lab/experiments/bench_run_touch.py [--touch SCHEDULE ...]
        [--touch-chunk BYTES] [--window-b-groups DIR] BENCH-RUN-ARGS...

- ``--touch SCHEDULE`` (repeatable): an arm ``touch/<stem>`` that installs
  SCHEDULE with the benchmark-only ``touch`` fill kernel (one 4-byte load
  per ``--touch-chunk`` bytes, default 64 KiB, 264 CTAs x 32 threads): the
  same hook points and rows as the schedule, but about 0.05% of its bytes
  land, while the translation of every 64 KiB of the rows is looked up.
- ``--window-b-groups DIR``: write into DIR three one-window schedules, window
  B of the shipped h200 schedule with one of its target groups each
  (``B-mhc-norms``, ``B-router``, ``B-next-attn``), to pass as
  ``--bench-dir DIR`` (results/h200-2026-12-01-decoy-b.md names them).

Diagnostic only; results in benchmarks/results/h200-2026-12-01-step-fill.md.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from l2sched.bench import run as bench_run  # noqa: E402
# `python -m lab bench run`: the product's bench run with the research arm sets
# (--validation, --perturbations, --controls, --bench-dir)
from lab import main  # noqa: E402
import lab.kernels  # noqa: E402

lab.kernels.register()  # the touch mode

SHIPPED = os.path.join(ROOT, "schedules", "glm53-flash-h200-tp4.l2s")

#: Window B's target groups (lines of the shipped schedule's window B).
WINDOW_B_GROUPS = {
    "B-mhc-norms": ["this post_attention_layernorm, hc_ffn_*",
                    "next hc_attn_*, input_layernorm"],
    "B-router": ["this mlp.gate"],
    "B-next-attn": ["next lazy self_attn.* except self_attn.o_proj, self_attn.kv_b_proj, "
                    "self_attn.mla_attn, self_attn.?_conv1d"],
}


def write_window_b_groups(out_dir: str) -> None:
    """One schedule per ``WINDOW_B_GROUPS`` entry in ``out_dir``: the shipped
    schedule's header and its window B (30 MB, moe layers) with that group."""
    text = open(SHIPPED, encoding="utf-8").read()
    # from the `schedule NAME` line (a comment above it may say "schedule")
    head = text[re.search(r"^schedule ", text, re.M).start():text.index("\nwindow ")]
    head = "\n".join(ln for ln in head.splitlines() if not ln.startswith("#")) + "\n\n"
    os.makedirs(out_dir, exist_ok=True)
    for name, lines in WINDOW_B_GROUPS.items():
        body = head.replace("schedule glm53-flash-h200-tp4",
                            "schedule " + name.lower().replace("-", "_"))
        body += ("window B at attn.pre_all_reduce budget 30MB layers moe {\n"
                 + "".join(f"    {ln}\n" for ln in lines) + "}\n")
        with open(os.path.join(out_dir, name + ".l2s"), "w", encoding="utf-8") as f:
            f.write(body)


def add_touch_arms(schedules: list[str], chunk: int) -> None:
    """Append a ``touch/<stem>`` arm per schedule to the bench's arm list."""
    specs = bench_run.arm_specs

    def with_touch(*a, **k):
        arms = specs(*a, **k)
        for path in schedules:
            stem = os.path.basename(path).removesuffix(".l2s")
            arms.append({"name": f"touch/{stem}", "path": path, "overrides": [],
                         "runtime": {"mode": "touch", "grid": 264, "threads": 32,
                                     "chunk": chunk}})
        return arms
    bench_run.arm_specs = with_touch


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every other argument goes to `python -m lab bench run` (see its --help).")
    ap.add_argument("--touch", action="append", default=[])
    ap.add_argument("--touch-chunk", type=int, default=65536)
    ap.add_argument("--window-b-groups", default="")
    opts, rest = ap.parse_known_args()
    if opts.touch_chunk < 32 or opts.touch_chunk % 16:
        ap.error(f"--touch-chunk must be a multiple of 16 and >= 32, got {opts.touch_chunk}")
    for path in opts.touch:
        if not os.path.isfile(path) and not opts.window_b_groups:
            ap.error(f"--touch {path}: no such schedule file")
    if opts.window_b_groups:
        if os.path.exists(opts.window_b_groups) and not os.path.isdir(opts.window_b_groups):
            ap.error(f"--window-b-groups {opts.window_b_groups}: exists and is not a directory")
        write_window_b_groups(opts.window_b_groups)
    if opts.touch:
        add_touch_arms(opts.touch, opts.touch_chunk)
    sys.exit(main(["bench", "run", *rest]))
