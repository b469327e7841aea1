"""The ideal gain of ``l2sched bench run``: every op that reads bytes a plan
prefetches (a *consumer*), timed standalone cold (after a 256 MB read flush)
and L2-resident (right after itself) on one representative layer per
(layer kind, op); the ideal gain is the sum over all consumer occurrences of
(cold - hot). Units: us. torch comes in as an argument (imported by the
caller inside its functions).
"""

from __future__ import annotations

import statistics

from l2sched.compiler.compile import storage_entry


def _consumers(plan, inv, runner) -> dict:
    """``(kind, op) -> [layers]`` of ops that read bytes the plan fetches."""
    fetched = set()
    for w in plan.issues:
        for r in w.ranges:
            fetched.add((r.layer, r.tensor))
    out: dict = {}
    for i in range(len(inv.layers)):
        for op in runner.ops_of(i):
            for p in op.reads:
                try:
                    e = inv.tensor(i, p)
                except KeyError:
                    continue
                st = storage_entry(inv, i, e)
                if (i, st.path) in fetched:
                    out.setdefault((str(inv.kinds[i]), op.name), []).append(i)
                    break
    return out


def ideal_gain(runner, plan, inv, torch, dry, reps) -> dict:
    """Cold and L2-resident standalone time of every prefetched consumer op
    (one representative layer per (kind, op)); ideal gain = sum over all
    consumer occurrences of (cold - hot), us. ``runner``: the ``StepRunner``
    whose op bodies are timed; ``plan``: the compiled plan whose fetched
    bytes make an op a consumer; ``dry``: no GPU, every time 0; ``reps``:
    cold and hot timings per op (medians). Returns ``{consumers: [{kind,
    op, layers, cold_us, hot_us, gain_us}], ideal_gain_us}``."""
    cons = _consumers(plan, inv, runner)
    flush = None if dry else torch.empty(256 * 10 ** 6 // 2, dtype=torch.bfloat16,
                                         device="cuda").normal_()
    rows = []
    total = 0.0
    for (kind, op), layers in sorted(cons.items()):
        lay = runner.model.layers[layers[0]]
        runner._ops = {o.name: o for o in runner.ops_of(layers[0])}
        o = runner._ops[op]
        cold, hot = [], []
        for _ in range(reps):
            for which in ("cold", "hot"):
                if dry:
                    cold.append(0.0), hot.append(0.0)
                    break
                if which == "cold":
                    flush.sum()
                else:
                    runner._body(lay, o)
                runner.spin(300)  # host launch of the timed op must not show: keep the GPU busy
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                runner._body(lay, o)
                e1.record()
                torch.cuda.synchronize()
                (cold if which == "cold" else hot).append(e0.elapsed_time(e1) * 1000.0)
        c, h = statistics.median(cold), statistics.median(hot)
        total += max(0.0, c - h) * len(layers)
        rows.append({"kind": kind, "op": op, "layers": len(layers), "cold_us": c,
                     "hot_us": h, "gain_us": max(0.0, c - h) * len(layers)})
    return {"consumers": rows, "ideal_gain_us": total}

