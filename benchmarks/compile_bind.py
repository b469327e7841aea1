"""Benchmark: compile + bind of the 45-layer GLM-5.3-Flash plan (issue 5
target: <= 50 ms). Prints a table and writes JSON.

Compile = ``load_schedule`` already done, then ``analytical_inventory`` +
``compile_plan`` for TP rank 0 at TP4. Bind = ``install`` into a CPU module
tree whose tensor paths and per-rank shapes equal the inventory (uninitialised
``torch.empty`` storage, routed experts left out: no window targets them),
then ``Installation.bind_all()`` with the dry-run backend: every range looked
up, clamped to its storage and aligned, exactly as at the first forward.

Run: ``python benchmarks/compile_bind.py [--repeat 20] [--out PATH]``
(needs torch; the compile path alone does not).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

SCHEDULE = "schedules/glm53-flash-sm120-tp4.l2s"


def build_tree(inventory):
    """``torch.nn.ModuleList`` of decoder layers holding every non-view,
    non-expert tensor of ``inventory`` at its path (parameters for eager
    tensors, plain attributes for lazy ones)."""
    import torch

    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32,
              "int32": torch.int32}
    layers = torch.nn.ModuleList()
    for i in range(len(inventory.layers)):
        root = torch.nn.Module()
        for e in inventory.tensors(i):
            if e.view_of or e.experts:
                continue
            *mods, leaf = e.path.split(".")
            obj = root
            for m in mods:
                if not hasattr(obj, m):
                    obj.add_module(m, torch.nn.Module())
                obj = getattr(obj, m)
            t = torch.empty(e.shape, dtype=dtypes[e.dtype])
            if e.lazy:
                object.__setattr__(obj, leaf, t)
            else:
                obj.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
        layers.append(root)
    return layers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from l2sched.compiler.compile import compile_plan
    from l2sched.lang.resolve import load_schedule
    from l2sched.model.config import load_model_config
    from l2sched.model.inventory import analytical_inventory
    from l2sched.runtime.dry_run import DryRunRuntime
    from l2sched.runtime.install import HookSite, install

    schedule = load_schedule(SCHEDULE)
    config = load_model_config(None)
    inventory = analytical_inventory(config, tp=4, ep=False, tp_rank=0)
    tree = build_tree(inventory)
    sites = {w.hook: HookSite("", "forward_pre") for w in schedule.windows}

    compile_ms, bind_ms, total_ms = [], [], []
    rows = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        inv = analytical_inventory(config, tp=4, ep=False, tp_rank=0)
        plan = compile_plan(schedule, inv, 0)
        t1 = time.perf_counter()
        inst = install(tree, plan, sites, DryRunRuntime(plan), join_on=None)
        inst.bind_all()
        t2 = time.perf_counter()
        rows = sum(len(b.rows) for b in inst.bound)
        inst.remove()
        compile_ms.append((t1 - t0) * 1e3)
        bind_ms.append((t2 - t1) * 1e3)
        total_ms.append((t2 - t0) * 1e3)

    def stats(v):
        return {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)}

    result = {
        "benchmark": "compile+bind, 45-layer GLM-5.3-Flash TP4 plan",
        "schedule": SCHEDULE,
        "date": datetime.date.today().isoformat(),
        "machine": {"python": platform.python_version(), "cpu": platform.processor()
                    or platform.machine(), "cores": __import__("os").cpu_count()},
        "repeat": args.repeat,
        "issues": len(plan.issues),
        "rows_bound": rows,
        "compile": stats(compile_ms),
        "bind": stats(bind_ms),
        "total": stats(total_ms),
        "target_ms": 50.0,
    }
    print(f"{'stage':<8} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for k in ("compile", "bind", "total"):
        s = result[k]
        print(f"{k:<8} {s['median_ms']:>10.2f} {s['min_ms']:>8.2f} {s['max_ms']:>8.2f}")
    print(f"{len(plan.issues)} issues, {rows} rows; target total <= 50 ms: "
          f"{'met' if result['total']['median_ms'] <= 50 else 'MISSED'}")
    out = Path(args.out or f"benchmarks/results/compile-bind-{result['date']}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
