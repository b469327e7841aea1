"""Lint rules: codes, severities, and the checks over a simulated step.

Every rule has a stable code, a severity and a one-line message naming the
window, op and tensor; ``docs/lint.md`` has what/why/example/fix per rule.
Timing rules aggregate over layers: one diagnostic per (rule, window, layer
kind, op), listing the layers. Spans come from the schedule (the window's
``at``/``budget``/``carry`` clause or the target/pattern that named a tensor).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..compile import expand_targets, pattern_matches
from ..errors import Diagnostic, Span
from ..semantic import format_layers, format_size

#: code -> (severity, short name). Severity is fixed per rule.
RULES: dict[str, tuple[str, str]] = {
    "L2S000": ("error", "input-error"),
    "L2S001": ("error", "target-matches-nothing"),
    "L2S002": ("error", "prefetched-twice"),
    "L2S003": ("error", "prefetch-of-written-buffer"),
    "L2S004": ("warning", "hook-not-run-in-graph-mode"),
    "L2S005": ("warning", "dense-layer-no-idle-window"),
    "L2S101": ("error", "fill-overlaps-expert-stream"),
    "L2S102": ("warning", "fill-overlaps-latency-bound-kernel"),
    "L2S103": ("warning", "fill-slows-gemm"),
    "L2S104": ("warning", "late-fill"),
    "L2S105": ("warning", "budget-exceeds-idle-window"),
    "L2S106": ("warning", "evicted-before-use"),
    "L2S107": ("error", "fill-larger-than-l2"),
    "L2S108": ("warning", "set-aside-above-device-maximum"),
    "L2S201": ("info", "bytes-left-over"),
}

#: Overlaps shorter than this (us) are rounding, not findings.
MIN_OVERLAP_US = 0.05
#: A GEMM slowed by less than this (us) by a concurrent fill is not reported.
MIN_SLOWDOWN_US = 1.0
#: Late or evicted amounts below this (bytes) are not reported.
MIN_BYTES = 1 << 20
#: Hit fractions below this at the consumer are reported (L2S106).
MIN_HIT_FRACTION = 0.9

#: Caches and buffers the model writes during decode, right before reading
#: them: never prefetch (prefetch-background.md "Caches ... are never
#: prefetched"; map sections 2-3). Globs over paths relative to the layer.
WRITTEN_BUFFERS: dict[str, str] = {
    "*kv_cache*": "the KV cache, written by the cache-update op before the core",
    "*k_cache*": "the indexer key cache, written by the kpool insert",
    "*conv_state*": "the KDA conv state, updated in place every step",
    "*ssm_state*": "the KDA recurrent state, updated in place every step",
    "*recurrent_state*": "the KDA recurrent state, updated in place every step",
    "*block_table*": "block tables, rewritten by the scheduler every step",
    "*topk_indices_buffer*": "the top-k index buffer the indexer writes",
    "*cos_sin_cache*": "a rotary cache",
}

_SUPPRESS = re.compile(r"#\s*l2s:\s*ignore(?:\[([A-Za-z0-9_, ]*)\])?")


@dataclass(frozen=True)
class Finding:
    """A rule violation before rendering: ``code``, one-line ``message``,
    ``span`` (or None), ``data`` (machine-readable extras for JSON)."""

    code: str
    message: str
    span: Span | None
    data: dict = field(default_factory=dict, compare=False)

    @property
    def severity(self) -> str:
        """The rule's severity (``RULES``)."""
        return RULES[self.code][0]

    def diagnostic(self, sources: dict) -> Diagnostic:
        """The renderable ``Diagnostic`` (source line from ``sources``:
        path -> text)."""
        line = None
        if self.span is not None and self.span.path in sources:
            lines = sources[self.span.path].splitlines()
            if 1 <= self.span.line <= len(lines):
                line = lines[self.span.line - 1]
        return Diagnostic(self.message, self.span, self.severity, self.code, line)


def code_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """ruff-style selection: a code is kept when some ``select`` entry is a
    prefix of it (empty = all) and no ``ignore`` entry is."""
    if select and not any(code.startswith(s) for s in select):
        return False
    return not any(code.startswith(s) for s in ignore)


def suppressed(f: Finding, sources: dict) -> bool:
    """True when the source line of ``f.span`` carries ``# l2s: ignore`` or
    ``# l2s: ignore[CODE, ...]`` naming ``f.code`` (or a prefix of it)."""
    if f.span is None or f.span.path not in sources:
        return False
    lines = sources[f.span.path].splitlines()
    if not 1 <= f.span.line <= len(lines):
        return False
    m = _SUPPRESS.search(lines[f.span.line - 1])
    if not m:
        return False
    if m.group(1) is None:
        return True
    codes = [c.strip() for c in m.group(1).split(",") if c.strip()]
    return any(f.code.startswith(c) for c in codes)


# --------------------------------------------------------------------------
# helpers


def _window_span(w, key: str = "at") -> Span:
    return w.spans.get(key) or w.spans.get("name") or w.span


def _layers_text(kind: str, layers: Iterable[int]) -> str:
    return f"{kind} layers {format_layers(sorted(set(layers)))}"


def _target_span(schedule, window_name: str, layer_rel: str, tensor: str) -> Span | None:
    """Span of the target (in ``window_name``, else any window) that names
    ``tensor`` with scope ``layer_rel`` (``this``/``next``)."""
    names = [window_name] + [w.name for w in schedule.windows if w.name != window_name]
    for name in names:
        try:
            w = schedule.window(name)
        except KeyError:
            continue
        for t in w.targets:
            if t.scope == layer_rel and any(pattern_matches(p.text, tensor)
                                            for p in t.patterns):
                return t.span
    return None


# --------------------------------------------------------------------------
# schedule-level rules (no simulation)


def check_targets(schedule, inventory) -> list[Finding]:
    """L2S001 (a pattern matches nothing in any layer its window fires in),
    L2S003 (a pattern names a cache or buffer written right before use) and
    L2S002 (a tensor named by two windows for the same decode step)."""
    out: list[Finding] = []
    n = len(inventory.layers)
    for w in schedule.windows:
        for t in w.targets:
            for p in t.patterns:
                written = [why for glob, why in WRITTEN_BUFFERS.items()
                           if re.fullmatch(_glob_re(glob), p.text)]
                if written:
                    out.append(Finding("L2S003", f"window '{w.name}' prefetches "
                                       f"'{p.text}': {written[0]}; it is written "
                                       f"right before it is read", p.span))
                    continue
                hit = False
                for layer in w.layers:
                    tl = layer if t.scope == "this" else (layer + 1) % n
                    for e in inventory.tensors(tl):
                        if pattern_matches(p.text, e.path) and (t.lazy or not e.lazy):
                            hit = True
                            break
                    if hit:
                        break
                if not hit:
                    lazy_hint = ""
                    for layer in w.layers[:1]:
                        tl = layer if t.scope == "this" else (layer + 1) % n
                        if any(pattern_matches(p.text, e.path) and e.lazy
                               for e in inventory.tensors(tl)):
                            lazy_hint = " (it names lazily created tensors: write " \
                                        f"'{t.scope} lazy ...')"
                    out.append(Finding("L2S001", f"target '{t.scope} {p.text}' of "
                                       f"window '{w.name}' matches no tensor in "
                                       f"its layers{lazy_hint}", p.span))
    # L2S002: the same storage bytes named for the same target layer twice
    claimed: dict[tuple[int, str], tuple[str, Any]] = {}
    reported: set = set()
    expanded: dict = {}  # targets depend only on (window, this kind, next kind)
    for layer in range(n):
        for w in schedule.windows:
            if layer not in w.layers:
                continue
            sig = (w.name, str(inventory.kinds[layer]),
                   str(inventory.kinds[(layer + 1) % n]))
            if sig not in expanded:
                expanded[sig] = [(tl != layer, e) for tl, e in
                                 expand_targets(w, layer, inventory)]
            for is_next, e in expanded[sig]:
                tl = (layer + 1) % n if is_next else layer
                key = (tl, e.view_of or e.path)
                if key in claimed and claimed[key][0] != w.name:
                    first = claimed[key][0]
                    if (w.name, first, e.path) in reported:
                        continue
                    reported.add((w.name, first, e.path))
                    scope = "this" if tl == layer else "next"
                    span = _target_span(schedule, w.name, scope, e.path)
                    out.append(Finding("L2S002", f"'{e.path}' (layer {tl}) is "
                                       f"prefetched by window '{first}' and again "
                                       f"by window '{w.name}' in one decode step",
                                       span or _window_span(w, "name"),
                                       {"tensor": e.path, "layer": tl}))
                else:
                    claimed.setdefault(key, (w.name, e))
    return out


def _glob_re(glob: str) -> str:
    return "".join(".*" if c == "*" else re.escape(c) for c in glob)


def check_graph_mode(schedule, adapter, graph_mode: str) -> list[Finding]:
    """L2S004: a window's hook point is not run by Python in ``graph_mode``
    (``HookPoint.graph_modes``), or the mode is ``piecewise``, where the
    runtime skips prefetch (prefetch-background.md: "Inside a breakable
    (PIECEWISE) capture ... prefetch is skipped")."""
    out = []
    hooks = getattr(adapter, "HOOKS_BY_NAME", {})
    for w in schedule.windows:
        h = hooks.get(w.hook)
        if h is not None and graph_mode not in h.graph_modes:
            out.append(Finding("L2S004", f"hook point '{w.hook}' of window "
                               f"'{w.name}' never runs in {graph_mode} graph mode",
                               _window_span(w)))
        elif graph_mode == "piecewise":
            out.append(Finding("L2S004", f"window '{w.name}' at '{w.hook}' never "
                               f"prefetches in piecewise graph mode (the runtime "
                               f"skips prefetch inside breakable captures)",
                               _window_span(w)))
    return out


def check_fill_size(schedule, plan, kinds, device) -> list[Finding]:
    """L2S107: one fill of a window fetches more bytes than the device's L2
    holds (``device.l2_bytes``): its own lines evict each other before any
    consumer runs, and the surplus is device-memory traffic for nothing
    (measured on the H200: the 120 MB window of schedules/bench/
    budget-over-l2.l2s made the step 1.2-5.2% slower,
    benchmarks/results/h200-2026-11-29b.md)."""
    worst: dict = {}
    layers: dict = defaultdict(set)
    for issue in plan.issues:
        if issue.bytes > device.l2_bytes:
            key = (issue.window, str(kinds[issue.layer]))
            worst[key] = max(worst.get(key, 0), issue.bytes)
            layers[key].add(issue.layer)
    out = []
    for (wname, kind), nbytes in sorted(worst.items()):
        try:
            span = _window_span(schedule.window(wname), "budget")
        except KeyError:
            span = None
        out.append(Finding("L2S107", f"window '{wname}' fills {format_size(nbytes)} at once, "
                           f"more than the {format_size(device.l2_bytes)} L2 of "
                           f"{device.name}: its lines evict each other before use, in "
                           f"{_layers_text(kind, layers[(wname, kind)])}", span,
                           {"window": wname, "bytes": nbytes, "l2_bytes": device.l2_bytes,
                            "layers": sorted(layers[(wname, kind)])}))
    return out


def check_set_aside(schedule, device) -> list[Finding]:
    """L2S108: the schedule reserves more persisting L2 than the device
    allows (``device.set_aside_max_bytes``); the runtime clamps it to the
    maximum (runtime.apply_set_aside), so the schedule does not say what
    runs."""
    want = schedule.set_aside
    if want <= 0 or want <= device.set_aside_max_bytes:
        return []
    return [Finding("L2S108", f"set_aside {format_size(want)} is above the "
                    f"{format_size(device.set_aside_max_bytes)} maximum of {device.name}; "
                    f"the runtime clamps it to the maximum (write 'set_aside max')",
                    schedule.spans.get("set_aside"),
                    {"set_aside": want, "max": device.set_aside_max_bytes})]


def check_left_over(schedule, plan, kinds) -> list[Finding]:
    """L2S201: bytes no window took (after the last carry), with names."""
    groups: dict = defaultdict(lambda: defaultdict(int))
    layers: dict = defaultdict(set)
    for lo in plan.left_over:
        key = (lo.window, str(kinds[lo.layer]))
        groups[key][lo.tensor] += lo.bytes
        layers[key].add(lo.layer)
    out = []
    for (wname, kind), tensors in sorted(groups.items()):
        try:
            w = schedule.window(wname)
            span = _window_span(w, "carry" if w.carry else "budget")
        except KeyError:
            span = None
        per_layer = sum(tensors.values()) // max(1, len(layers[(wname, kind)]))
        names = ", ".join(sorted(tensors))
        out.append(Finding("L2S201", f"window '{wname}' leaves "
                           f"{format_size(per_layer)} per layer unfetched after its "
                           f"last carry ({names}) in "
                           f"{_layers_text(kind, layers[(wname, kind)])}", span,
                           {"tensors": sorted(tensors), "bytes_per_layer": per_layer}))
    return out


# --------------------------------------------------------------------------
# timing rules (over the simulation)


def _overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def check_timing(run) -> list[Finding]:
    """L2S101/102/103/104/105/106 and L2S005 over ``run`` (a
    ``LintRun``: step graph ``sg``, simulation ``sim``, ``schedule``,
    ``device``)."""
    nodes = run.sg.nodes
    sim = run.sim
    sched = run.schedule
    acc: dict[tuple, dict] = {}

    def add(code, wname, kind, op, layer, value, extra=None):
        key = (code, wname, op)
        slot = acc.setdefault(key, {"layers": set(), "values": [], "extra": extra,
                                    "kinds": set()})
        slot["layers"].add(layer)
        slot["kinds"].add(kind)
        slot["values"].append(value)

    timing = sim.timing
    # per position, the active non-fill nodes (the only ones the rules
    # look at) with their attributes and timing, in graph order
    by_pos: dict[int, list] = defaultdict(list)
    for v, d in nodes.items():
        if d["cls"] != "fill" and d["active"]:
            by_pos[d["pos"]].append((d, timing[v]))
    device = run.device

    for f in run.sg.fills:
        fd = nodes[f]
        issue = fd["fill"]
        ft = timing[f]
        if ft.dram_start is None:
            continue
        layer = issue.layer
        kind = fd["kind"]
        try:
            w = sched.window(issue.window)
        except KeyError:
            continue
        f0, f1 = ft.dram_start, ft.dram_end
        stop = None  # L2S105: the first protected op starting after the fork
        for pos in (layer, layer + 1):
            where = "" if pos == layer else " of the next layer"
            for d, t in by_pos.get(pos, ()):
                cls = d["cls"]
                ov = _overlap(f0, f1, t.start, t.finish)
                if ov > MIN_OVERLAP_US:
                    if cls == "expert_stream":
                        add("L2S101", w.name, kind, d["op"] + where, layer, ov)
                    elif cls == "attention_core" or (
                            d["eager_break"] and cls == "small"):
                        add("L2S102", w.name, kind, d["op"] + where, layer, ov)
                    elif kind.endswith("dense") and pos == layer and \
                            cls == "gemm" and d["op"].startswith("mlp."):
                        add("L2S005", w.name, kind, d["op"], layer, ov)
                if cls == "gemm" and d["stream"] == "main" and \
                        t.dram_start is not None and \
                        t.contention_us >= MIN_SLOWDOWN_US \
                        and _overlap(f0, f1, t.dram_start, t.dram_end) > MIN_OVERLAP_US:
                    add("L2S103", w.name, kind, d["op"] + where, layer, t.contention_us)
                if t.start >= ft.start and (
                        cls in ("expert_stream", "attention_core") or d["eager_break"]):
                    if stop is None or t.start < stop[0]:
                        stop = (t.start, d["op"] + where)
        # L2S105: budget vs the idle window before the next protected op
        if stop is not None:
            idle = stop[0] - ft.start - device.fill_launch_us
            rate = min(device.fill_gbps, device.dram_read_gbps) * 1e3
            other = _other_dram_bytes(by_pos.get(layer, []) +
                                      by_pos.get(layer + 1, []), ft.start, stop[0])
            fit = max(0.0, min(idle * rate, idle * device.dram_read_gbps * 1e3
                               - other))
            if w.budget > fit and issue.bytes > fit:
                add("L2S105", w.name, kind, stop[1], layer, fit,
                    {"idle_us": idle, "fit": fit})

    # consumers: late fills and eviction
    for v, d in nodes.items():
        if d["cls"] == "fill":
            continue
        t = timing[v]
        for fid, late in t.late:
            if late < MIN_BYTES:
                continue
            fd = nodes[fid]
            where = "" if d["pos"] == fd["pos"] else " of the next layer"
            add("L2S104", fd["fill"].window, fd["kind"], d["op"] + where,
                fd["layer"], late)
        for fid, (hit, got) in t.hits_by_fill.items():
            if got >= MIN_BYTES and hit / got < MIN_HIT_FRACTION:
                fd = nodes[fid]
                where = "" if d["pos"] == fd["pos"] else " of the next layer"
                add("L2S106", fd["fill"].window, fd["kind"], d["op"] + where,
                    fd["layer"], hit / got, {"reads": [r.tensor for r in d["reads"]],
                                             "scope": "this" if not where else "next"})

    out = []
    for (code, wname, op), slot in sorted(acc.items(), key=lambda x: x[0]):
        w = sched.window(wname)
        kind = "/".join(sorted(slot["kinds"]))
        layers = _layers_text(kind, slot["layers"])
        vals = slot["values"]
        worst = max(vals) if code != "L2S106" else min(vals)
        data = {"window": wname, "layer_kinds": sorted(slot["kinds"]), "op": op,
                "layers": sorted(slot["layers"]), "value": round(worst, 3)}
        span = _window_span(w)
        if code in _TIMING_MESSAGES:
            msg = _TIMING_MESSAGES[code].format(
                w=wname, op=op, us=worst, size=format_size(int(worst)), layers=layers)
        elif code == "L2S105":
            extra = slot["extra"]
            fit = min(vals)
            span = _window_span(w, "budget")
            msg = (f"budget {format_size(w.budget)} of window '{wname}' is more than "
                   f"its idle window can absorb: {format_size(int(fit))} fit in "
                   f"{extra['idle_us']:.1f} us before '{op}' in {layers}")
            data["fit_bytes"] = int(fit)
        else:  # L2S106
            extra = slot["extra"]
            reads = extra["reads"]
            tspan = None
            for tensor in reads:
                tspan = _target_span(sched, wname, extra["scope"], tensor)
                if tspan:
                    break
            span = tspan or span
            prot = run.device.protected_bytes(sched.set_aside, sched.policy)
            why = (f"{sched.policy} protects {format_size(prot)}"
                   + (" without a set-aside" if sched.set_aside == 0 else ""))
            msg = (f"as little as {worst:.0%} of the bytes window '{wname}' filled for "
                   f"'{op}' ({', '.join(reads)}) are predicted still in L2 at use "
                   f"({why}) in {layers}")
            data["hit_fraction"] = round(worst, 3)
        out.append(Finding(code, msg, span, data))
    return out


#: One-line messages of the overlap/timing rules ({w} window, {op} op,
#: {us} worst us, {size} worst bytes, {layers} the layers).
_TIMING_MESSAGES = {
    "L2S101": "fill of window '{w}' overlaps the expert stream '{op}' by up to "
              "{us:.1f} us in {layers}",
    "L2S102": "fill of window '{w}' overlaps latency-bound '{op}' by up to "
              "{us:.1f} us in {layers}",
    "L2S103": "fill of window '{w}' slows '{op}' by up to {us:.1f} us "
              "(device-memory contention) in {layers}",
    "L2S005": "window '{w}' fires in dense-MLP layers with no idle window: its "
              "fill overlaps '{op}' by up to {us:.1f} us in {layers}",
    "L2S104": "'{op}' starts before window '{w}' has landed up to {size} of its "
              "bytes (late fill) in {layers}",
}


def _other_dram_bytes(nodes: Sequence[tuple], t0: float, t1: float) -> float:
    """Device-memory bytes the non-fill ``nodes`` (``(attributes, timing)``
    pairs) read during ``[t0, t1]`` (linear within each node's memory
    phase)."""
    total = 0.0
    for d, t in nodes:
        if t.dram_start is None or t.dram_end <= t.dram_start:
            continue
        if d["cls"] == "fill":
            continue
        ov = _overlap(t0, t1, t.dram_start, t.dram_end)
        total += t.dram_bytes * ov / (t.dram_end - t.dram_start)
    return total
