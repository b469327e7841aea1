"""Kernel-level traces of the bench's decode-step graphs (``bench run
--trace-dir``) and what they say about where a step's time goes.

``trace_replays`` replays each arm's untimed CUDA graph once more under
``torch.profiler`` (CUDA activity: every kernel of the replay with its
stream, start and duration as CUPTI reports them, no event nodes added to
the graph) and exports a Chrome trace per arm. ``kernel_timeline`` reads
such a trace back: the kernels of the replay, per stream, in start order.
``compare_timelines`` lines two arms' main-stream kernels up (same kernel
names in the same order; the fills run on other streams) and sums where
one arm is slower: in the kernels themselves or in the gaps before them.

Units: microseconds (the Chrome trace's ``ts``/``dur``).
"""

from __future__ import annotations

import json
from pathlib import Path


def trace_replays(graphs: dict, trace_dir: str, M: int, torch, before=None) -> dict:
    """One warm replay, then one replay under ``torch.profiler`` of every
    graph in ``graphs`` (arm name -> ``CUDAGraph``); writes
    ``trace_dir/trace-M<M>-<arm>.json``. ``before(arm)`` runs before each
    replay (the bench's set-aside isolation). Returns arm -> the trace path.
    Raises ``OSError`` when the directory cannot be made."""
    from torch.profiler import ProfilerActivity, profile

    out_dir = Path(trace_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, g in graphs.items():
        if g is None:
            continue
        if before is not None:
            before(name)
        g.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        path = out_dir / f"trace-M{M}-{safe}.json"
        prof.export_chrome_trace(str(path))
        paths[name] = str(path)
    return paths


def kernel_timeline(trace: dict | str) -> dict:
    """The GPU kernels of a Chrome trace (a dict, or a path to one): stream
    (the ``tid`` of the kernel events) -> ``[(ts_us, dur_us, name)]`` in
    start order. Raises ``OSError`` for an unreadable file and ``ValueError``
    for one that is not a Chrome trace (no ``traceEvents`` list of objects,
    a kernel event without a numeric ``ts``) or has no kernel events."""
    if not isinstance(trace, dict):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: expected an object with a 'traceEvents' list")
    streams: dict = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise ValueError(f"traceEvents[{i}] is not an object")
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            try:
                ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"traceEvents[{i}]: a kernel event needs numeric 'ts' "
                                 "and 'dur'") from None
            streams.setdefault(e.get("tid"), []).append((ts, dur, str(e.get("name", ""))))
    if not streams:
        raise ValueError("no GPU kernel events (cat 'kernel') in the trace")
    for ks in streams.values():
        ks.sort()
    return streams


def main_stream(timeline: dict):
    """The stream with the most kernels (the model's main stream)."""
    return max(timeline, key=lambda s: len(timeline[s]))


def compare_timelines(base: dict, arm: dict) -> dict:
    """Where ``arm``'s main stream loses time against ``base``'s (two
    ``kernel_timeline`` results of the same step). The main streams' kernel
    names must match one to one (``ValueError`` otherwise). Returns
    ``{"span_us": (base, arm), "kernel_us": extra time inside kernels,
    "gap_us": extra time in the gaps before them, "by_kernel": name ->
    {"count", "kernel_us", "gap_us"} (extra us per kernel name, largest
    first), "worst": the 20 single kernels with the largest extra
    gap + duration: (index, name, extra gap, extra duration)}``."""
    a, b = base[main_stream(base)], arm[main_stream(arm)]
    if [k[2] for k in a] != [k[2] for k in b]:
        raise ValueError(f"the main streams differ: {len(a)} vs {len(b)} kernels, "
                         "or other names in another order")
    by: dict = {}
    worst = []
    gap_total = kern_total = 0.0
    for i in range(len(a)):
        gap_a = a[i][0] - (a[i - 1][0] + a[i - 1][1]) if i else 0.0
        gap_b = b[i][0] - (b[i - 1][0] + b[i - 1][1]) if i else 0.0
        dg, dk = gap_b - gap_a, b[i][1] - a[i][1]
        gap_total += dg
        kern_total += dk
        r = by.setdefault(a[i][2], {"count": 0, "kernel_us": 0.0, "gap_us": 0.0})
        r["count"] += 1
        r["kernel_us"] += dk
        r["gap_us"] += dg
        worst.append((i, a[i][2], dg, dk))
    worst.sort(key=lambda w: -(w[2] + w[3]))
    span = (a[-1][0] + a[-1][1] - a[0][0], b[-1][0] + b[-1][1] - b[0][0])
    return {"span_us": span, "kernel_us": kern_total, "gap_us": gap_total,
            "by_kernel": dict(sorted(by.items(),
                                     key=lambda kv: -(kv[1]["kernel_us"] + kv[1]["gap_us"]))),
            "worst": worst[:20]}
