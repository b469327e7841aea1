"""Pictures of the predicted timeline: a Chrome/Perfetto trace and an SVG Gantt.

``chrome_trace(run)`` gives the trace-event JSON (``ph: X`` complete events,
``ts``/``dur`` in us, end points rounded to whole ns so slices on a track
nest or abut exactly) with one track per stream (main, aux = shared expert,
side = fills); protected ops (expert stream, attention core region) carry
``cat: protected`` and fills ``cat: fill``. ``gantt.gantt_svg(run)`` draws
one layer of each kind a window fires in on one time axis (re-exported
here); ``write_timeline`` writes both.
"""

from __future__ import annotations

import json
from pathlib import Path

from l2sched.errors import Diagnostic, L2sInputError, Span
from l2sched.files import check_output_path, is_stream, write_texts_atomically
from l2sched.lint.gantt import gantt_svg
from l2sched.lint.graph import timeline_order

STREAM_TID = {"main": 1, "aux": 2, "side": 3}
STREAM_NAME = {"main": "main stream", "aux": "aux stream (shared expert)",
               "side": "side stream (fills)"}


def _category(d) -> str:
    if d["cls"] == "fill":
        return "fill"
    if d["cls"] in ("expert_stream", "attention_core") or d["eager_break"]:
        return "protected"
    return d["cls"]


def _ts_dur(start: float, finish: float) -> dict:
    """``ts`` and ``dur`` (us) of a complete event from its end points in us:
    both end points are rounded to whole nanoseconds first and ``dur`` is
    their difference, so slices that abut or nest in the simulation abut or
    nest exactly in the trace (rounding ``ts`` and ``dur`` separately made a
    slice end 1 ns after the next one started)."""
    t0, t1 = round(start * 1000), round(finish * 1000)
    return {"ts": t0 / 1000, "dur": (t1 - t0) / 1000}


def chrome_trace(run) -> dict:
    """The predicted step as a Chrome trace-event document (events in a
    topological order of the step's networkx DiGraph)."""
    nodes = run.sg.nodes
    events = [{"ph": "M", "name": "process_name", "pid": 0,
               "args": {"name": f"l2sched lint: {run.schedule.name} on "
                                f"{run.device_profile.name}"}}]
    for s, tid in STREAM_TID.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                       "args": {"name": STREAM_NAME[s]}})
    for v in timeline_order(run.sg):
        d = nodes[v]
        t = run.sim.timing[v]
        if v == "join" or t.finish <= t.start:
            continue
        args = {"layer": d["layer"], "kind": d["kind"], "class": d["cls"]}
        if d["cls"] == "fill":
            args.update(window=d["fill"].window, hook=d["fill"].hook,
                        bytes=d["fill"].nbytes)
        elif t.read_bytes:
            args.update(read_bytes=t.read_bytes, l2_hit_bytes=round(t.hit_bytes))
        name = d["op"] if d["pos"] < run.sg.num_layers else f"{d['op']} (next step)"
        events.append({"ph": "X", "pid": 0, "tid": STREAM_TID[d["stream"]],
                       "name": f"L{d['layer']} {name}", "cat": _category(d),
                       **_ts_dur(t.start, t.finish),
                       "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def timeline_paths(output: str) -> tuple[Path, Path | None]:
    """The trace path ``output`` and the SVG beside it (same name, ``.svg``),
    checked with ``files.check_output_path`` first (so ``-o .``, ``-o ''``
    and ``-o /`` are one-line errors, not a traceback). The SVG path is
    derived only for a regular file: for a device, FIFO or socket
    (``-o /dev/null``, ``-o /dev/stdout``) it is None and no SVG is written
    (``/dev/null.svg`` would be a new regular file in /dev). Raises
    ``L2sInputError`` for those errors, and when ``output`` itself ends in
    ``.svg`` (the trace and the chart would be one file)."""
    check_output_path(output)
    out = Path(output)
    if out.suffix.lower() == ".svg":
        raise L2sInputError(Diagnostic(
            "-o names the trace (.json); the SVG is written next to it with the "
            "same name and .svg", Span.point(str(output))))
    if is_stream(output):
        return out, None
    svg = out.with_suffix(".svg")
    check_output_path(svg)
    return out, svg


def write_timeline(run, output: str, measured=None) -> list[str]:
    """Write ``output`` (Chrome trace JSON) and the SVG next to it (same
    name, ``.svg``; ``gantt.gantt_svg``, with the ``measured`` timeline
    beside the prediction when given), both or neither; returns the paths
    written (the trace only when ``output`` is not a regular file:
    ``timeline_paths``). Raises
    ``L2sInputError`` when ``output`` itself ends in ``.svg`` (the trace and
    the chart would be one file), when it is one of the schedule's files, or
    when a write fails."""
    out, svg = timeline_paths(output)
    texts = [(out, json.dumps(chrome_trace(run)) + "\n")]
    if svg is not None:
        texts.append((svg, gantt_svg(run, measured)))
    write_texts_atomically(texts, protect=run.schedule.files)
    return [str(p) for p in (out, svg) if p is not None]
