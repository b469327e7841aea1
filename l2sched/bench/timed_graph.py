"""The timed graph variant of ``bench run``'s decode step: one arm's step
captured with external CUDA events before/after every op on its stream and
on the side stream after the ops at which fills were issued
(``step.StepTiming``), its replays read into per-op durations, finish times,
the expert stream and each fill's exit (``collect``), and their medians
(``summarize``). Units: us. ``bench run``'s flow is in ``profile.run``.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left


def sync_unless_dry(torch, dry: bool) -> None:
    """``torch.cuda.synchronize()`` unless ``dry`` (the fake-clock run)."""
    if not dry:
        torch.cuda.synchronize()


def quantile(xs, q):
    """The ``q`` quantile (0..1) of the values ``xs``, linearly interpolated
    between the sorted values; None when ``xs`` is empty."""
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats(xs) -> dict:
    """``{median, p10, p90, n}`` of a list of us values."""
    return {"median": quantile(xs, 0.5), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9),
            "n": len(xs)}


class TimedGraph:
    """The timed variant of one arm's step: ``graph`` (a ``CUDAGraph`` with
    event-record nodes; None for a timed eager step or in dry mode) and the
    events its capture recorded: ``records`` ``[(layer, op, stream, before,
    after)]``, ``side`` ``[(layer, op, fills, event)]`` (event None: fills
    captured as nodes, counted only), ``start``/``end`` (main stream, first
    and last)."""

    def __init__(self, graph, records, side, start, end):
        self.graph, self.records, self.side = graph, records, side
        self.start, self.end = start, end


def capture_timed(runner, torch, dry, fill_count, fill_events=True) -> TimedGraph:
    """Capture the timed graph variant of the installed arm: one uncaptured
    timed step creates the external events (``StepRunner.new_event_pool``),
    then the capture records the same events as graph nodes. ``fill_count``:
    callable, fills issued so far. ``fill_events`` False: the runtime
    captures fills as nodes of the model's stream (``capture_nodes.NODE_LAUNCHES``),
    so no side-stream event times their exit (they are counted). In dry mode
    the "capture" is a second fake-clock step."""
    runner.timing, runner.in_graph, runner.fill_count = True, True, fill_count
    runner.fill_events = fill_events
    runner.new_event_pool()
    try:
        runner.step()
        sync_unless_dry(torch, dry)
        g = None
        if dry:
            runner.step()
        else:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                runner.step()
            torch.cuda.synchronize()
    finally:
        runner.timing = runner.in_graph = False
        runner.fill_count, runner.fill_events = None, True
    return TimedGraph(g, runner.records, runner.side_records,
                      runner.start_event, runner.end_event)


def timed_eager(runner, torch, dry, fill_count) -> TimedGraph:
    """Fallback: one timed *eager* step (plain events, 40 ms lead spin); its
    per-op times are host-launch-bound, not the graph's."""
    runner.timing, runner.fill_count = True, fill_count
    try:
        runner.step(lead_us=0 if dry else 40000)
    finally:
        runner.timing = False
        runner.fill_count = None
    sync_unless_dry(torch, dry)
    return TimedGraph(None, runner.records, runner.side_records,
                      runner.start_event, runner.end_event)


def collect(tg: TimedGraph, acc: dict) -> None:
    """Append one replay's (or timed eager step's) values into ``acc``: per
    op ``"layer:op"`` its duration, start and finish (us from the step's
    start event); the step (start to end event); the main-stream gap (median
    over the step of next op's start - previous op's finish); the expert
    stream (sum of the ``moe.w13``/``moe.w2`` durations); per side event its
    time (the last fill kernel's exit), the start of the first ``moe.w13``
    starting at or after the start of the op the fills were issued at (the
    expert stream they must finish before; None after the last MoE layer and
    for fills issued after the step's last op, recorded as op ``step_end``)
    and the margin (expert start - fill exit; positive = exited before)."""
    st = tg.start
    ops = acc.setdefault("ops", {})
    at: dict[str, tuple[float, float]] = {}
    main_prev = None
    gaps, expert, w13 = [], 0.0, []
    for layer, op, stream, e0, e1 in tg.records:
        key = f"{layer}:{op}"
        s, f = st.elapsed_time(e0) * 1000.0, st.elapsed_time(e1) * 1000.0
        d = ops.setdefault(key, {"dur": [], "start": [], "finish": [], "stream": stream})
        d["dur"].append(f - s)
        d["start"].append(s)
        d["finish"].append(f)
        at[key] = (s, f)
        if stream == "main":
            if main_prev is not None:
                gaps.append(s - main_prev)
            main_prev = f
        if op in ("moe.w13", "moe.w2"):
            expert += f - s
        if op == "moe.w13":
            w13.append(s)
    w13.sort()
    acc.setdefault("step", []).append(st.elapsed_time(tg.end) * 1000.0)
    if gaps:
        acc.setdefault("main_gap", []).append(statistics.median(gaps))
    acc.setdefault("expert", []).append(expert)
    fills = acc.setdefault("fills", {})
    for layer, op, n, ev in tg.side:
        key = f"{layer}:{op}"
        f = fills.setdefault(key, {"fills": n, "exit": [], "expert_start": [], "margin": []})
        if ev is None:  # a fill captured as a node: counted, its exit not timed
            continue
        t = st.elapsed_time(ev) * 1000.0
        j = bisect_left(w13, at[key][0]) if key in at else len(w13)  # step_end: none after
        es = w13[j] if j < len(w13) else None
        f["exit"].append(t)
        if es is not None:
            f["expert_start"].append(es)
            f["margin"].append(es - t)


def _med(xs):
    return statistics.median(xs) if xs else None


def summarize(acc: dict, source: str) -> dict:
    """Medians over the replays in ``acc`` (``collect``). ``source``:
    ``graph`` (in-graph events) or ``eager`` (the fallback). Keys: ``ops``
    (``"layer:op" -> {dur_us, start_us, finish_us, stream}``),
    ``in_graph_step_us`` / ``eager_step_us`` (start to end event),
    ``main_gap_us``, ``expert_stream_us`` (stats of the per-replay sum of
    expert GEMM durations), ``fills`` (``"layer:op" -> {fills, fill_exit_us,
    expert_start_us, exit_before_experts_us}``). All us."""
    ops = {k: {"dur_us": statistics.median(v["dur"]),
               "start_us": statistics.median(v["start"]),
               "finish_us": statistics.median(v["finish"]), "stream": v["stream"]}
           for k, v in acc.get("ops", {}).items()}
    fills = {k: {"fills": v["fills"], "fill_exit_us": _med(v["exit"]),
                 "expert_start_us": _med(v["expert_start"]),
                 "exit_before_experts_us": _med(v["margin"])}
             for k, v in acc.get("fills", {}).items()}
    out = {"per_op_source": source, "ops": ops, "fills": fills,
           "expert_stream_us": stats(acc.get("expert", [])),
           "main_gap_us": stats(acc.get("main_gap", []))}
    out["in_graph_step_us" if source == "graph" else "eager_step_us"] = stats(acc.get("step", []))
    return out
