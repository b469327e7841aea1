"""The SVG Gantt chart of a decode step: what ``l2sched timeline`` draws
next to the Chrome trace.

One panel per layer kind a window fires in (its first such layer), all on
ONE time axis (us from the layer's start; the axis is drawn once, below the
panels, with grid lines through all of them), each with rows per CUDA stream:
main, aux (shared expert), side (fills). The next layer's ops, drawn because
they read bytes this layer's fills fetched, are faded; each fill's
device-memory phase is shaded across the rows, so overlaps show. Every fill
is labelled (window, bytes) in a label lane under the side row, with a
leader line; an op's name is written in its bar only when it fits. Lint
findings that point at a time (L2S005, L2S101-L2S107) are outlined in red
and tagged with their code; the overlap of L2S101/L2S102/L2S005 is hatched.
Every op is named in the drawing (``<text>``, so the names survive PNG
export): in its bar when the name fits, else in an op label lane under the
rows, with a leader line. Under the predicted rows a **no prefetch** row
draws the same layer's main-stream ops as the lint simulates them without
fills (``LintRun.base``), on the same axis, so a bar that moved or grew
shows where the step's time goes; each op label carries its duration
change against that baseline (``+1.2``, us) when it is at least 0.1 us,
and the panel heading gives the layer's time with and without prefetch.
The title names the schedule, device, TP and M; the caption gives the
predicted step-time change (and measured results the schedule carries);
the legend lists every mark. With a measured ``l2sched bench run`` result
(``measured.MeasuredTimeline``), each panel also draws the measured layer on
the same axis, under the predicted one.

Long module: one SVG layout (rows, lanes, axis, caption, legend share the
same geometry constants and y bookkeeping); split, each part would need the
others' coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

from l2sched.lint.graph import layer_graph
from l2sched.lint.report import measured_lines, predicted_gain_pct
from l2sched.units import format_signed, format_size, plural

#: Colour per mark class (also the legend's order).
COLOURS = {"fill": "#e4572e", "expert_stream": "#7b2cbf", "attention_core": "#2a9d8f",
           "gemm": "#4c78a8", "shared_expert": "#72b7b2", "collective": "#f2c14e",
           "small": "#9d9d9d", "protected_small": "#57a773"}
#: Legend text per class.
CLASS_NAMES = {"fill": "fill (side stream): window, bytes",
               "expert_stream": "routed experts (expert stream)",
               "attention_core": "attention core", "gemm": "GEMM (weights from memory)",
               "shared_expert": "shared expert (aux stream)",
               "collective": "all-reduce", "small": "small kernel",
               "protected_small": "latency-bound kernel (KDA conv/core, MLA indexer)"}
STREAMS = ("main", "aux", "side")
STREAM_NAMES = {"main": "main stream", "aux": "aux (shared expert)",
                "side": "side (fills)"}
#: An op's duration change against the no-prefetch run is written in its
#: label from this size (us).
MIN_DELTA_US = 0.1
#: Findings that point at a time in the step, drawn on the picture.
TIMED_CODES = ("L2S005", "L2S101", "L2S102", "L2S103", "L2S104", "L2S105",
               "L2S106", "L2S107")
OVERLAP_CODES = ("L2S005", "L2S101", "L2S102")
FINDING = "#d00000"
#: Average width of a character of the 10 px label font (px), a safe bound
#: for sans-serif, so labels are never wider than the room they are given.
CHAR_PX = 6.2
ROW_H, ROW_GAP, LABEL_H = 20, 4, 13
LEFT, RIGHT = 190, 30


@dataclass
class Bar:
    """One mark of a panel: ``row`` (a stream), ``t0``/``t1`` (us from the
    layer's start), ``cls`` (a ``COLOURS`` key), ``label`` (written in the bar
    when it fits, or in the label lane for fills), ``title`` (tooltip),
    ``faded`` (the next layer's op), ``dram`` (a fill's device-memory phase,
    shaded), ``codes`` (findings on it), ``key`` (node id), ``delta`` (its
    duration change against the no-prefetch run, us, or "")."""

    row: str
    t0: float
    t1: float
    cls: str
    label: str
    title: str
    faded: bool = False
    dram: tuple[float, float] | None = None
    codes: list = field(default_factory=list)
    key: str = ""
    delta: str = ""

    @property
    def text(self) -> str:
        """The name drawn: the label, with the duration change against the
        no-prefetch run when there is one."""
        return f"{self.label} {self.delta}" if self.delta else self.label


@dataclass
class Panel:
    """A layer drawn: ``heading``, predicted ``bars``, ``overlaps`` (code,
    row, t0, t1) to hatch, and optionally the ``measured`` bars."""

    heading: str
    bars: list
    overlaps: list = field(default_factory=list)
    measured: list | None = None
    measured_note: str = ""
    baseline: list = field(default_factory=list)


def _cls(d) -> str:
    return "protected_small" if d["cls"] == "small" and d["eager_break"] else d["cls"]


def panel_layers(run) -> tuple[list[tuple[str, int]], list[str]]:
    """``([(kind, layer)], [kinds without fills])``: per layer kind, the
    layer a window fires in where the most findings with a time occur (the
    first such layer on a tie), so the picture shows them; the kinds where
    no window fires are listed for the caption instead of drawn."""
    score: dict[int, int] = {}
    for f in run.findings:
        if f.code in TIMED_CODES:
            for layer in f.data.get("layers", ()):
                score[layer] = score.get(layer, 0) + 1
    best: dict[str, int] = {}
    for f in run.sg.fills:
        d = run.sg.nodes[f]
        k, layer = d["kind"], d["pos"]
        if k not in best or score.get(layer, 0) > score.get(best[k], 0):
            best[k] = layer
    kinds = list(dict.fromkeys(str(k) for k in run.inventory.kinds))
    picks = sorted(((k, best[k]) for k in kinds if k in best), key=lambda x: x[1])
    return picks, [k for k in kinds if k not in best]


def predicted_panel(run, kind: str, layer: int) -> Panel:
    """The predicted bars of ``layer`` (extended into the next layer's ops
    that read bytes its fills fetched), findings attached."""
    g = layer_graph(run.sg, layer)
    timing, base = run.sim.timing, run.base.timing
    ids = [v for v in run.sg.nodes if v in g and timing[v].finish > timing[v].start]
    t0 = min(timing[v].start for v in ids if run.sg.nodes[v]["pos"] == layer)
    bars = []
    for v in ids:
        d, t = run.sg.nodes[v], timing[v]
        faded = d["pos"] != layer
        delta = ""
        if d["cls"] == "fill":
            issue = d["fill"]
            label = f"{issue.window} {format_size(issue.nbytes)}"
            dram = None if t.dram_start is None else (t.dram_start - t0, t.dram_end - t0)
        else:
            label, dram = d["op"], None
            if v in base:
                dt = (t.finish - t.start) - (base[v].finish - base[v].start)
                delta = f"{dt:+.1f}" if abs(dt) >= MIN_DELTA_US else ""
        title = (f"L{d['layer']} {label}: {t.start - t0:.1f}..{t.finish - t0:.1f} us"
                 + (f" ({delta} us vs no prefetch)" if delta else "")
                 + (" (next layer)" if faded else ""))
        bars.append(Bar(d["stream"], t.start - t0, t.finish - t0, _cls(d), label,
                        title, faded, dram, key=v, delta=delta))
    with_us, without_us, baseline = _layer_times(run, layer)
    panel = Panel(f"layer {layer} ({kind}): {with_us:.1f} us with prefetch, "
                  f"{without_us:.1f} us without "
                  f"({format_signed(with_us - without_us, '+.1f')} us)", bars,
                  baseline=baseline)
    _attach_findings(run, layer, panel, t0)
    return panel


def _layer_times(run, layer: int) -> tuple[float, float, list]:
    """``(us with prefetch, us without, no-prefetch main-stream bars)`` of
    ``layer``: its time from its first op's start to the next layer's (to
    its last op's finish for the last layer), and its main-stream ops as
    the no-prefetch simulation places them (us from the layer's start)."""
    def span(sg, timing):
        mine = [v for v, d in sg.nodes.items() if d["pos"] == layer]
        nxt = [v for v, d in sg.nodes.items() if d["pos"] == layer + 1]
        start = min(timing[v].start for v in mine)
        end = (min(timing[v].start for v in nxt) if nxt
               else max(timing[v].finish for v in mine))
        return start, end - start, mine

    _, with_us, _ = span(run.sg, run.sim.timing)
    b0, without_us, mine = span(run.base_sg, run.base.timing)
    bars = []
    for v in mine:
        d, t = run.base_sg.nodes[v], run.base.timing[v]
        if d["stream"] == "main" and d["cls"] != "fill" and t.finish > t.start:
            bars.append(Bar("main", t.start - b0, t.finish - b0, _cls(d), d["op"],
                            f"L{layer} {d['op']} without prefetch: {t.start - b0:.1f}.."
                            f"{t.finish - b0:.1f} us", key=v))
    return with_us, without_us, bars


def _attach_findings(run, layer: int, panel: Panel, t0: float) -> None:
    """Mark the findings of ``layer`` on ``panel``: the op (or fill) each
    names gets its code; an overlap finding also hatches the overlap."""
    by_key = {b.key: b for b in panel.bars}
    for f in run.findings:
        if f.code not in TIMED_CODES or layer not in f.data.get("layers", ()):
            continue
        window = f.data.get("window")
        fill = by_key.get(f"{layer}:fill:{window}")
        op = f.data.get("op", "")
        pos = layer + 1 if op.endswith(" of the next layer") else layer
        target = by_key.get(f"{pos}:{op.removesuffix(' of the next layer')}")
        marked = target if target is not None and f.code != "L2S107" else fill
        if marked is not None and f.code not in marked.codes:
            marked.codes.append(f.code)
        if f.code in OVERLAP_CODES and fill is not None and target is not None \
                and fill.dram is not None:
            a, b = max(fill.dram[0], target.t0), min(fill.dram[1], target.t1)
            if b > a:
                panel.overlaps.append((f.code, target.row, a, b))


def gantt_svg(run, measured=None, width: int = 1400) -> str:
    """The SVG (see the module docstring) of ``run`` (a ``LintRun``);
    ``measured``: a ``measured.MeasuredTimeline`` to draw beside the
    prediction, or None. Times in us; ``width`` in px."""
    picks, skipped = panel_layers(run)
    panels = [predicted_panel(run, k, i) for k, i in picks]
    if measured is not None:
        for p, (_, layer) in zip(panels, picks):
            classes = {d["op"]: _cls(d) for d in run.sg.nodes.values()
                       if d["pos"] in (layer, layer + 1) and d["cls"] != "fill"}
            shown = {b.label for b in p.bars if b.faded}
            p.measured, p.measured_note = measured.panel_bars(layer, classes, shown)
    extent = max([b.t1 for p in panels for b in p.bars + (p.measured or [])] + [1.0])
    plot_w = width - LEFT - RIGHT
    scale = plot_w / (extent * 1.02)
    out: list[str] = []
    y = _title(run, out, width, measured)
    grid_top = y
    for p in panels:
        y = _panel(p, out, y, scale, plot_w)
    if not panels:
        out.append(f'<text x="10" y="{y + 14}" font-size="12">no window fills in this '
                   f'step: nothing to draw</text>')
        y += 24
    y = _axis(out, grid_top, y, scale, extent, plot_w)
    y = _caption(run, out, y, skipped, measured, {i for _, i in picks})
    y = _legend(out, y, width, measured is not None)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
            f'font-family="sans-serif">\n<defs><pattern id="hatch" width="6" height="6" '
            f'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" '
            f'height="6" fill="{FINDING}" fill-opacity="0.55"/></pattern></defs>\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(out)
            + "\n</svg>\n")


def _title(run, out: list, width: int, measured) -> int:
    """The title lines; returns the next free y."""
    s = run.schedule
    title = (f"{s.name}: predicted decode step on {run.device_profile.name}, TP{s.tp}, "
             f"M={run.tokens} ({run.graph_mode} CUDA graph)")
    if measured is not None:
        title += f", beside the measured one ({measured.arm} arm)"
    out.append(f'<title>{escape(title)}</title>')
    out.append(f'<text class="title" x="10" y="24" font-size="16" font-weight="bold">'
               f'{escape(title)}</text>')
    out.append(f'<text x="10" y="42" font-size="11" fill="#444">{escape(s.path)}; one '
               f'panel per layer kind a window fires in, all on the time axis at the '
               f'bottom (us from the layer\'s start)</text>')
    return 54


def _panel(p: Panel, out: list, y: int, scale: float, plot_w: float) -> int:
    """One panel; returns the next free y."""
    out.append(f'<g class="panel"><text x="10" y="{y + 14}" font-size="13" '
               f'font-weight="bold">{escape(p.heading)}</text>')
    y += 20
    y = _stream_rows(p.bars, p.overlaps, out, y, scale, plot_w, "predicted")
    if p.baseline:
        y = _baseline_row(p.baseline, out, y, scale, plot_w)
    if p.measured is not None:
        out.append(f'<text x="10" y="{y + 12}" font-size="11" fill="#444">'
                   f'{escape(p.measured_note)}</text>')
        y += 16
        y = _stream_rows(p.measured, [], out, y, scale, plot_w, "measured")
    out.append("</g>")
    return y + 10


def _stream_rows(bars, overlaps, out: list, y: int, scale: float, plot_w: float,
                 what: str) -> int:
    """The finding tags, three stream rows and the fill label lane of one
    timeline (``what``: predicted or measured); returns the next free y."""
    x = lambda t: LEFT + t * scale  # noqa: E731
    tags = [(x(b.t0), code) for b in bars for code in b.codes]
    tag_lines = _pack([(px, code) for px, code in tags], plot_w)
    y += len({line for line, _, _ in tag_lines}) * LABEL_H
    top = y
    rows = {s: top + i * (ROW_H + ROW_GAP) for i, s in enumerate(STREAMS)}
    for s in STREAMS:
        out.append(f'<text x="10" y="{rows[s] + 14}" font-size="11">{what}: '
                   f'{STREAM_NAMES[s]}</text><rect x="{LEFT}" y="{rows[s]}" '
                   f'width="{plot_w:.0f}" height="{ROW_H}" fill="#f4f4f4"/>')
    for line, px, code in tag_lines:
        ty = top - (line + 1) * LABEL_H + 10
        out.append(f'<text class="finding" x="{px:.1f}" y="{ty}" font-size="10" '
                   f'font-weight="bold" fill="{FINDING}">{code}</text>')
    for b in bars:
        if b.dram is not None:  # the fill's memory phase, across all rows
            out.append(f'<rect class="dram" x="{x(b.dram[0]):.1f}" y="{top}" '
                       f'width="{max(1.0, (b.dram[1] - b.dram[0]) * scale):.1f}" '
                       f'height="{3 * (ROW_H + ROW_GAP) - ROW_GAP}" '
                       f'fill="{COLOURS["fill"]}" fill-opacity="0.08"/>')
    names = [_bar(b, out, rows[b.row], x(b.t0), max(1.0, (b.t1 - b.t0) * scale))
             for b in bars]
    for code, row, a, b in overlaps:  # on top of the bars, under their names
        out.append(f'<rect class="overlap" x="{x(a):.1f}" y="{rows[row]}" '
                   f'width="{max(1.0, (b - a) * scale):.1f}" height="{ROW_H}" '
                   f'fill="url(#hatch)"><title>{code}: overlap {b - a:.1f} us'
                   f'</title></rect>')
    out.extend(n for n, _ in names if n)
    fills = [(x(b.t0), b.label) for b in bars if b.cls == "fill"]
    placed = _pack(fills, plot_w)
    lane = rows["side"] + ROW_H + 4
    for line, px, text in placed:
        ly = lane + (line + 1) * LABEL_H - 3
        src = next(fx for fx, t in fills if t == text)
        out.append(f'<line x1="{src + 0.5:.1f}" y1="{rows["side"] + ROW_H}" '
                   f'x2="{px + 0.5:.1f}" y2="{ly - 9}" stroke="#e4572e" '
                   f'stroke-width="0.7"/><text class="fill-label" x="{px:.1f}" '
                   f'y="{ly}" font-size="10" fill="#7a2a14">{escape(text)}</text>')
    lines = 1 + max((line for line, _, _ in placed), default=-1)
    lane += lines * LABEL_H + 2
    # ops whose name does not fit in the bar: named in a lane of their own
    unnamed = [b for b, (_, fits) in zip(bars, names) if b.cls != "fill" and not fits]
    placed = _pack([(x(b.t0), b.text) for b in unnamed], plot_w)
    in_order = sorted(unnamed, key=lambda b: (x(b.t0), b.text))  # _pack's order
    for (line, px, text), b in zip(placed, in_order):
        ly = lane + (line + 1) * LABEL_H - 3
        src = x(b.t0) + max(1.0, (b.t1 - b.t0) * scale) / 2
        colour = "#999" if b.faded else "#555"
        out.append(f'<line x1="{src:.1f}" y1="{rows[b.row] + ROW_H}" x2="{px + 0.5:.1f}" '
                   f'y2="{ly - 9}" stroke="{colour}" stroke-width="0.5" '
                   f'stroke-dasharray="2,2"/><text class="op-label" x="{px:.1f}" '
                   f'y="{ly}" font-size="10" fill="{colour}">{escape(text)}</text>')
    lines = 1 + max((line for line, _, _ in placed), default=-1)
    return lane + lines * LABEL_H + 6


def _baseline_row(bars, out: list, y: int, scale: float, plot_w: float) -> int:
    """The no-prefetch row: the layer's main-stream ops as the lint
    simulates them without fills, on the panel's axis; returns the next
    free y."""
    x = lambda t: LEFT + t * scale  # noqa: E731
    out.append(f'<g class="baseline"><text x="10" y="{y + 14}" font-size="11">'
               f'no prefetch: main stream</text><rect x="{LEFT}" y="{y}" '
               f'width="{plot_w:.0f}" height="{ROW_H}" fill="#f4f4f4"/>')
    names = []
    for b in bars:
        bx, bw = x(b.t0), max(1.0, (b.t1 - b.t0) * scale)
        out.append(f'<rect class="bar base" x="{bx:.1f}" y="{y}" width="{bw:.1f}" '
                   f'height="{ROW_H}" fill="{COLOURS.get(b.cls, "#999")}" '
                   f'fill-opacity="0.5" stroke="#fff"><title>{escape(b.title)}</title>'
                   f'</rect>')
        if len(b.label) * CHAR_PX + 4 <= bw:
            names.append(f'<text x="{bx + 2:.1f}" y="{y + 14}" font-size="10" '
                         f'fill="#222">{escape(b.label)}</text>')
    end = max((b.t1 for b in bars), default=0.0)
    out.extend(names)
    out.append(f'<line x1="{x(end):.1f}" y1="{y - 2}" x2="{x(end):.1f}" '
               f'y2="{y + ROW_H + 2}" stroke="#333" stroke-width="1.5"/></g>')
    return y + ROW_H + 8


def _bar(b: Bar, out: list, ry: int, bx: float, bw: float) -> tuple[str, bool]:
    """One bar into ``out``; returns ``(its name's text element, drawn
    later on top, or "", whether the name fits in the bar)`` (fills are
    named in their lane, other names that do not fit in the op lane)."""
    stroke = (f' stroke="{FINDING}" stroke-width="2"' if b.codes else ' stroke="#fff"')
    opacity = 0.35 if b.faded else 0.9
    title = b.title + (f" [{', '.join(b.codes)}]" if b.codes else "")
    cls = "bar faded" if b.faded else "bar"
    out.append(f'<rect class="{cls}" x="{bx:.1f}" y="{ry}" width="{bw:.1f}" '
               f'height="{ROW_H}" fill="{COLOURS.get(b.cls, "#999")}" '
               f'fill-opacity="{opacity}"{stroke}><title>{escape(title)}</title></rect>')
    if b.cls != "fill" and len(b.text) * CHAR_PX + 4 <= bw:
        colour = "#222" if b.faded or b.cls in ("collective", "small") else "#fff"
        return (f'<text class="op-name" x="{bx + 2:.1f}" y="{ry + 14}" font-size="10" '
                f'fill="{colour}">{escape(b.text)}</text>'), True
    return "", False


def _pack(items, plot_w: float) -> list[tuple[int, float, str]]:
    """Place texts ``(x, text)`` on lines so none overlaps another or leaves
    the plot: each at its x (moved left to fit the right edge) on the first
    line where it clears the previous text by 6 px. Returns ``(line, x,
    text)``."""
    ends: list[float] = []
    placed = []
    right = LEFT + plot_w
    for px, text in sorted(items):
        w = len(text) * CHAR_PX
        px = min(px, right - w)
        for line, end in enumerate(ends):
            if px >= end + 6:
                ends[line] = px + w
                break
        else:
            line = len(ends)
            ends.append(px + w)
        placed.append((line, px, text))
    return placed


def _axis(out: list, top: int, y: int, scale: float, extent: float,
          plot_w: float) -> int:
    """The one time axis of all panels, with grid lines through them."""
    step = _tick_step(extent)
    out.append(f'<g class="axis"><line x1="{LEFT}" y1="{y}" x2="{LEFT + plot_w:.0f}" '
               f'y2="{y}" stroke="#333"/>')
    t = 0.0
    while t <= extent * 1.02:
        px = LEFT + t * scale
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{y}" '
                   f'stroke="#000" stroke-opacity="0.08"/><line x1="{px:.1f}" '
                   f'y1="{y}" x2="{px:.1f}" y2="{y + 5}" stroke="#333"/><text '
                   f'x="{px:.1f}" y="{y + 17}" font-size="10" text-anchor="middle">'
                   f'{t:g}</text>')
        t += step
    out.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{y + 32}" font-size="11" '
               f'text-anchor="middle">time from the layer\'s start (us), the same '
               f'scale in every panel</text></g>')
    return y + 44


def _tick_step(extent: float) -> float:
    """1, 2 or 5 x 10^k us, for about 10 ticks."""
    raw = extent / 10
    k = 10 ** math.floor(math.log10(raw))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= raw)


def _findings_line(run, drawn: set) -> str:
    """``Findings: 1 error, 2 warnings, 4 info; marked in red: L2S101, ...;
    in layers not drawn: ...; not tied to a time: L2S201.``"""
    counts = {sev: sum(f.severity == sev for f in run.findings)
              for sev in ("error", "warning", "info")}
    marked, elsewhere, untimed = set(), set(), set()
    for f in run.findings:
        if f.code not in TIMED_CODES:
            untimed.add(f.code)
        elif drawn & set(f.data.get("layers", ())):
            marked.add(f.code)
        else:
            elsewhere.add(f.code)
    text = (f"Findings: {plural(counts['error'], 'error')}, "
            f"{plural(counts['warning'], 'warning')}, {counts['info']} info")
    for what, codes in (("marked in red where they occur", marked),
                        ("only in layers not drawn", elsewhere - marked),
                        ("not tied to a time", untimed)):
        if codes:
            text += f"; {what}: {', '.join(sorted(codes))}"
    return text + " (`l2sched lint` lists them)."


def _caption(run, out: list, y: int, skipped: list, measured, drawn: set) -> int:
    """Predicted step change, measured results, findings, kinds not drawn."""
    a, b = run.step_period("sim"), run.step_period("base")
    lines = [(f"Predicted decode step: {a:.0f} us with prefetch, {b:.0f} us without: "
              f"{format_signed((a - b) / b, '+.1%')} step time (gain "
              f"{format_signed(predicted_gain_pct(run), '+.1f')}% of the step without "
              f"prefetch).")]
    lines += [m[0].upper() + m[1:] + "." for m in measured_lines(run)]
    if measured is not None:
        lines.append(measured.caption(run.tokens))
    lines.append(_findings_line(run, drawn))
    if skipped:
        lines.append(f"No window fires in {', '.join(skipped)} layers: not drawn.")
    for i, text in enumerate(lines):
        out.append(f'<text class="caption" x="10" y="{y + 14 + 16 * i}" '
                   f'font-size="12">{escape(text)}</text>')
    return y + 16 * len(lines) + 10


def _legend(out: list, y: int, width: int, measured: bool) -> int:
    """Every mark of the picture, wrapped to ``width``."""
    entries = [(f'<rect width="12" height="12" fill="{c}"/>', CLASS_NAMES[k])
               for k, c in COLOURS.items()]
    entries += [
        (f'<rect width="12" height="12" fill="{COLOURS["gemm"]}" fill-opacity="0.35"/>',
         "next layer's op (faded): reads bytes this layer's fills fetched"),
        (f'<rect width="12" height="12" fill="{COLOURS["fill"]}" fill-opacity="0.15"/>',
         "shaded: a fill reading device memory (across all rows)"),
        ('<rect width="12" height="12" fill="url(#hatch)"/>',
         "hatched: overlap a finding reports (L2S101/L2S102/L2S005)"),
        ((f'<rect width="12" height="12" fill="#fff" stroke="{FINDING}" '
          f'stroke-width="2"/>'), "red outline + code: a lint finding at that op or fill"),
        (f'<rect width="12" height="12" fill="{COLOURS["gemm"]}" fill-opacity="0.5"/>',
         "no prefetch row: the same ops simulated without fills; bar = its end"),
        ('<text x="0" y="10" font-size="9" fill="#555">+1</text>',
         "after an op's name: its duration change vs no prefetch (us)"),
    ]
    if measured:
        entries.append(('<rect width="12" height="12" fill="#bbb"/>',
                        "measured rows: the bench run's in-graph event times"))
    out.append(f'<g class="legend"><text x="10" y="{y + 12}" font-size="12" '
               f'font-weight="bold">Legend</text>')
    x, y = 10, y + 20
    for swatch, text in entries:
        w = 22 + len(text) * 6.0 + 18
        if x + w > width - 10:
            x, y = 10, y + 18
        out.append(f'<g class="legend-entry" transform="translate({x:.0f},{y})">'
                   f'{swatch}<text x="18" y="10" font-size="11">{escape(text)}</text></g>')
        x += w
    out.append("</g>")
    return y + 24
