"""Pictures of the predicted timeline: a Chrome/Perfetto trace and an SVG Gantt.

``chrome_trace(run)`` gives the trace-event JSON (``ph: X`` complete events,
``ts``/``dur`` in us) with one track per stream (main, aux = shared expert,
side = fills); protected ops (expert stream, attention core region) carry
``cat: protected`` and fills ``cat: fill``. ``gantt_svg(run)`` draws one
layer of each kind, extended into the next layer, with the same colours.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from l2sched.errors import Diagnostic, L2sInputError, Span
from l2sched.files import check_output_path, write_texts_atomically
from l2sched.lint.graph import layer_graph, timeline_order

STREAM_TID = {"main": 1, "aux": 2, "side": 3}
STREAM_NAME = {"main": "main stream", "aux": "aux stream (shared expert)",
               "side": "side stream (fills)"}
COLOURS = {"fill": "#e4572e", "expert_stream": "#7b2cbf", "attention_core": "#2a9d8f",
           "gemm": "#4c78a8", "shared_expert": "#72b7b2", "collective": "#f2c14e",
           "small": "#9d9d9d", "protected_small": "#57a773"}


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
                                f"{run.device.name}"}}]
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


def gantt_svg(run, width: int = 1400) -> str:
    """SVG Gantt chart: one panel per layer kind (its first prefetched layer,
    else its first layer), rows per stream, time in us from the layer start;
    each panel draws ``layer_graph`` of that layer (the layer, extended to the
    next layer's consumers of its fills, which are drawn faded)."""
    n = run.sg.num_layers
    picks: dict[str, int] = {}
    for f in run.sg.fills:
        picks.setdefault(run.sg.nodes[f]["kind"], run.sg.nodes[f]["pos"])
    for p in range(n):
        picks.setdefault(str(run.inventory.kinds[p]), p)
    row_h, pad, left = 22, 28, 190
    panels = []
    y = 10
    for kind, pos in sorted(picks.items(), key=lambda x: x[1]):
        g = layer_graph(run.sg, pos)
        # the subgraph view iterates in set order; draw in graph order
        nodes = [v for v in run.sg.nodes if v in g
                 and run.sim.timing[v].finish > run.sim.timing[v].start]
        own = [v for v in nodes if g.nodes[v]["pos"] == pos]
        t0 = min(run.sim.timing[v].start for v in own)
        t1 = max(run.sim.timing[v].finish for v in own)
        t1 = t1 + 0.35 * (t1 - t0)
        scale = (width - left - 20) / max(1.0, t1 - t0)
        parts = [f'<text x="10" y="{y + 16}" font-size="14" font-weight="bold">'
                 f'layer {pos} ({escape(kind)}), us from layer start</text>']
        y += pad
        for s, tid in STREAM_TID.items():
            ry = y + (tid - 1) * (row_h + 6)
            parts.append(f'<text x="10" y="{ry + 15}" font-size="12">'
                         f'{STREAM_NAME[s]}</text>')
            parts.append(f'<rect x="{left}" y="{ry}" width="{width - left - 20}" '
                         f'height="{row_h}" fill="#f4f4f4"/>')
        for v in nodes:
            d = g.nodes[v]
            t = run.sim.timing[v]
            if t.start > t1:
                continue
            x = left + (t.start - t0) * scale
            w = max(1.0, (min(t.finish, t1) - t.start) * scale)
            ry = y + (STREAM_TID[d["stream"]] - 1) * (row_h + 6)
            cls = d["cls"]
            if cls == "small" and d["eager_break"]:
                cls = "protected_small"
            op = 0.35 if d["pos"] != pos else 0.9
            label = d["op"] if d["cls"] != "fill" else \
                f'{d["op"]} {d["fill"].nbytes / 1e6:.1f} MB'
            parts.append(
                f'<rect x="{x:.1f}" y="{ry}" width="{w:.1f}" height="{row_h}" '
                f'fill="{COLOURS.get(cls, "#999")}" fill-opacity="{op}" stroke="#fff">'
                f'<title>{escape(label)}: {t.start - t0:.1f}..{t.finish - t0:.1f} us'
                f'</title></rect>')
            if w > 7 * len(label) * 0.6:
                parts.append(f'<text x="{x + 2:.1f}" y="{ry + 15}" font-size="10" '
                             f'fill="#fff">{escape(label)}</text>')
            if d["cls"] == "fill" and t.dram_start is not None:
                # shade the fill's memory phase across all rows: overlap is visible
                fx = left + (t.dram_start - t0) * scale
                fw = max(1.0, (min(t.dram_end, t1) - t.dram_start) * scale)
                parts.append(f'<rect x="{fx:.1f}" y="{y}" width="{fw:.1f}" '
                             f'height="{3 * (row_h + 6) - 6}" fill="{COLOURS["fill"]}" '
                             f'fill-opacity="0.08"/>')
        axis_y = y + 3 * (row_h + 6)
        step = 10 if (t1 - t0) < 300 else 50
        tick = 0.0
        while tick <= t1 - t0:
            x = left + tick * scale
            parts.append(f'<line x1="{x:.1f}" y1="{axis_y - 4}" x2="{x:.1f}" '
                         f'y2="{axis_y}" stroke="#333"/><text x="{x:.1f}" '
                         f'y="{axis_y + 12}" font-size="10" text-anchor="middle">'
                         f'{tick:.0f}</text>')
            tick += step
        y = axis_y + 30
        panels.extend(parts)
    legend = []
    for i, (cls, col) in enumerate(COLOURS.items()):
        legend.append(f'<rect x="{10 + i * 150}" y="{y}" width="12" height="12" '
                      f'fill="{col}"/><text x="{26 + i * 150}" y="{y + 11}" '
                      f'font-size="11">{cls.replace("_", " ")}</text>')
    y += 30
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
            f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
            + "".join(panels) + "".join(legend) + "</svg>\n")


def timeline_paths(output: str) -> tuple[Path, Path]:
    """The trace path ``output`` and the SVG beside it (same name, ``.svg``),
    checked with ``files.check_output_path`` first (so ``-o .``, ``-o ''``
    and ``-o /`` are one-line errors, not a traceback). Raises
    ``L2sInputError`` for those, and when ``output`` itself ends in ``.svg``
    (the trace and the chart would be one file)."""
    check_output_path(output)
    out = Path(output)
    if out.suffix.lower() == ".svg":
        raise L2sInputError(Diagnostic(
            "-o names the trace (.json); the SVG is written next to it with the "
            "same name and .svg", Span.point(str(output))))
    svg = out.with_suffix(".svg")
    check_output_path(svg)
    return out, svg


def write_timeline(run, output: str) -> list[str]:
    """Write ``output`` (Chrome trace JSON) and the SVG next to it (same
    name, ``.svg``), both or neither; returns both paths. Raises
    ``L2sInputError`` when ``output`` itself ends in ``.svg`` (the trace and
    the chart would be one file), when it is one of the schedule's files, or
    when a write fails."""
    out, svg = timeline_paths(output)
    write_texts_atomically([(out, json.dumps(chrome_trace(run)) + "\n"),
                            (svg, gantt_svg(run))], protect=run.schedule.files)
    return [str(out), str(svg)]
