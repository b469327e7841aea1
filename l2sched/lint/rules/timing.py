"""Timing rules over the simulated decode step: a fill overlapping the
expert stream (L2S101), a latency-bound kernel (L2S102), a GEMM it slows
(L2S103) or a dense MLP (L2S005), or a window in dense-MLP layers whose idle
time before the MLP the device profile does not measure (L2S005); a consumer
that starts before its bytes landed (L2S104); a budget larger than the idle
window (L2S105); filled bytes evicted before use (L2S106).

Each rule aggregates over layers: one finding per (rule, window, op), naming
the layers and the worst value over them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from l2sched.device.provenance import field_origins
from l2sched.device.schema import LEGACY_OPS_MODEL
from l2sched.lint.rules.base import (
    Finding,
    Rule,
    fires_in,
    layers_of,
    next_layers,
    target_span,
    window_span,
)
from l2sched.units import format_size

RULES = (
    Rule(
        "L2S005", "dense-layer-no-idle-window", "warning",
        what=("a window fires in a dense-MLP layer and its fill overlaps the dense MLP's GEMMs, or\n"
              "the device profile does not measure that layer kind's op times (no measured\n"
              "`[ops.MODEL.\"KIND\"]` entries), so the idle time before the MLP is a stand-in."),
        why=("the 75 MB dense MLP follows attention with no idle window; the fill and the MLP\n"
             "fight for device-memory bandwidth (the seed never prefetched layers 0-2). Where the\n"
             "profile has no measured times for the layer's ops, the predicted idle time before the\n"
             "MLP rests on assumed kernel times, and no published run prefetched these layers."),
        example=("`window D at attn.pre_all_reduce budget 60MB layers dense { next self_attn.* }`"),
        fix=("restrict the window with `layers ... except dense` or shrink it to what fits before\n"
             "`mlp.gate_up_proj`.")),
    Rule(
        "L2S101", "fill-overlaps-expert-stream", "error",
        what=("a fill is still reading device memory while the routed-expert kernels run."),
        why=("the expert stream is the largest memory-bound op of the layer; bytes the fill takes\n"
             "there come straight out of the MoE time. The seed measured the MoE kernel at 79 us/layer\n"
             "with fills spilling into it and 71 us once windows B/C moved before the all-reduces."),
        example=("`schedules/glm53-flash-sm120-tp4-post-ar.l2s` (B at `attn.post_all_reduce`, 35 MB)."),
        fix=("fire the window earlier (before the all-reduce: `attn.pre_all_reduce`), lower its\n"
             "budget to the bytes the summary says fit, or carry the rest to a later window.")),
    Rule(
        "L2S102", "fill-overlaps-latency-bound-kernel", "warning",
        what=("a fill overlaps the attention core region: an `attention_core` op or a small kernel\n"
             "inside an eager-break region (KDA conv + recurrent core, the MLA indexer top-k, the MLA core)."),
        why=("these kernels are latency-bound; a bulk fill raises their memory latency and costs\n"
             "more than it saves. The seed: carrying a head of the next layer's first projection in\n"
             "window A was neutral to negative because the fill overlapped the KDA core."),
        example=("`window A at attn.after_first_proj budget 36MB { this self_attn.o_proj\n"
             "next self_attn.in_proj_qkvbfg_a }`"),
        fix=("keep window A to what lands before the core (this layer's o_proj); let B/C carry the\n"
             "next layer's projection.")),
    Rule(
        "L2S103", "fill-slows-gemm", "warning",
        what=("a main-stream GEMM reading device memory runs concurrently with a fill and is\n"
             "predicted at least 1 us slower than alone."),
        why=("both share device-memory bandwidth. The seed: putting o_proj in window C instead of A\n"
             "made the next layer's in_proj slower (17 -> 24 us)."),
        example=("window C at `moe.post_all_reduce` with `next self_attn.o_proj`."),
        fix=("move the bytes to a window whose fill ends before the GEMM (before an all-reduce),\n"
             "or make sure the GEMM's own bytes are prefetched so it reads L2.")),
    Rule(
        "L2S104", "late-fill", "warning",
        what=("a consumer starts before the fill holding its bytes has landed them (>= 1 MiB)."),
        why=("the missing bytes are read from device memory twice (fill and consumer) and the\n"
             "consumer shares bandwidth with its own fill."),
        example=("the post-all-reduce variant's C fill vs the next layer's `kda.in_proj`."),
        fix=("fire the window earlier, or put the consumer's bytes earlier in the fill order.")),
    Rule(
        "L2S105", "budget-exceeds-idle-window", "warning",
        what=("the window's budget is larger than the bytes its idle window can absorb: from the\n"
             "fork to the next protected op (expert stream, attention core region) at fill bandwidth,\n"
             "minus other device-memory traffic in that interval. The message says how many bytes fit."),
        why=("the rest of the fill spills into the protected op (see L2S101/L2S102)."),
        example=("post-all-reduce B, 35 MB budget, ~32 MB fit before `moe.w13`."),
        fix=("set the budget to the bytes that fit and carry the rest.")),
    Rule(
        "L2S106", "evicted-before-use", "warning",
        what=("the predicted fraction of a fill's bytes still in L2 when their consumer runs is\n"
             "below 0.9."),
        why=("without a persisting set-aside only part of an evict_last fill survives the expert\n"
             "stream (SM120: about 1/3 of a 50 MB fill was lost, 17.3 us instead of 11 us)."),
        example=("the shipped SM120 schedule, which reserves no set-aside (`set_aside 0`): window B's\n"
                 "next-layer targets."),
        fix=("reserve a set-aside (`set_aside 50MB` or `max`; costs prefill throughput, so opt in per\n"
             "deployment), or fill less before the expert stream."),
        example_command="l2sched lint schedules/glm53-flash-sm120-tp4.l2s --select L2S106"),
)

#: Suffix of an op of the layer after the one the window fires in.
NEXT = " of the next layer"
#: Overlaps shorter than this (us) are rounding, not findings.
MIN_OVERLAP_US = 0.05
#: A GEMM slowed by less than this (us) by a concurrent fill is not reported.
MIN_SLOWDOWN_US = 1.0
#: Late or evicted amounts below this (bytes) are not reported.
MIN_BYTES = 1 << 20
#: Hit fractions below this at the consumer are reported (L2S106).
MIN_HIT_FRACTION = 0.9



def _overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


@dataclass
class _Slot:
    """One (rule, window, op) aggregate: the layers and kinds it occurred
    in, its values (us, bytes or fractions) and rule-specific extras."""

    layers: set = field(default_factory=set)
    kinds: set = field(default_factory=set)
    values: list = field(default_factory=list)
    extra: dict | None = None


class _Found:
    """Occurrences per (code, window, op), in first-seen order."""

    def __init__(self):
        self.slots: dict[tuple, _Slot] = {}

    def add(self, code, wname, kind, op, layer, value, extra=None) -> None:
        slot = self.slots.setdefault((code, wname, op), _Slot(extra=extra))
        slot.layers.add(layer)
        slot.kinds.add(kind)
        slot.values.append(value)


def check(run) -> list[Finding]:
    """L2S005 and L2S101-L2S106 over ``run`` (a ``LintRun``: step graph
    ``sg``, simulation ``sim``, ``schedule``, ``device_profile``)."""
    timing = run.sim.timing
    # per position, the active non-fill nodes (the only ones the rules
    # look at) with their attributes and timing, in graph order
    by_pos: dict[int, list] = defaultdict(list)
    for v, d in run.sg.nodes.items():
        if d["cls"] != "fill" and d["active"]:
            by_pos[d["pos"]].append((d, timing[v]))
    found = _Found()
    for f in run.sg.fills:
        _fill_findings(run, f, by_pos, found)
    _consumer_findings(run, found)
    return [_finding(run, code, wname, op, slot)
            for (code, wname, op), slot in sorted(found.slots.items(),
                                                   key=lambda x: x[0])]


def _fill_findings(run, f: str, by_pos: dict, found: _Found) -> None:
    """L2S101/102/005/103/105 of fill node ``f``: what its device-memory
    phase overlaps in its layer and the next, and whether its budget fits
    the idle window before the next protected op."""
    fd = run.sg.nodes[f]
    issue = fd["fill"]
    ft = run.sim.timing[f]
    if ft.dram_start is None:
        return
    layer = issue.layer
    kind = fd["kind"]
    try:
        w = run.schedule.window(issue.window)
    except KeyError:
        return
    f0, f1 = ft.dram_start, ft.dram_end
    stop = None  # L2S105: the first protected op starting after the fork
    for pos in (layer, layer + 1):
        where = "" if pos == layer else NEXT
        for d, t in by_pos.get(pos, ()):
            cls = d["cls"]
            ov = _overlap(f0, f1, t.start, t.finish)
            if ov > MIN_OVERLAP_US:
                if cls == "expert_stream":
                    found.add("L2S101", w.name, kind, d["op"] + where, layer, ov)
                elif cls == "attention_core" or (
                        d["eager_break"] and cls == "small"):
                    found.add("L2S102", w.name, kind, d["op"] + where, layer, ov)
                elif kind.endswith("dense") and pos == layer and \
                        cls == "gemm" and d["op"].startswith("mlp."):
                    found.add("L2S005", w.name, kind, d["op"], layer, ov)
            if cls == "gemm" and d["stream"] == "main" and \
                    t.dram_start is not None and \
                    t.contention_us >= MIN_SLOWDOWN_US \
                    and _overlap(f0, f1, t.dram_start, t.dram_end) > MIN_OVERLAP_US:
                found.add("L2S103", w.name, kind, d["op"] + where, layer,
                          t.contention_us)
            if t.start >= ft.start and (
                    cls in ("expert_stream", "attention_core") or d["eager_break"]):
                if stop is None or t.start < stop[0]:
                    stop = (t.start, d["op"] + where)
    if kind.endswith("dense") and kind not in _measured_kinds(run):
        # no measured idle time before the MLP: flagged even without an
        # overlap (an overlap found above says more and keeps its message)
        mlp = next((d["op"] for d, _t in by_pos.get(layer, ())
                    if d["cls"] == "gemm" and d["op"].startswith("mlp.")), None)
        if mlp is not None and ("L2S005", w.name, mlp) not in found.slots:
            found.add("L2S005", w.name, kind, mlp, layer, 0.0, {"unmeasured": True})
    if stop is None:
        return
    # L2S105: budget vs the idle window before the next protected op
    device_profile = run.device_profile
    idle = stop[0] - ft.start - device_profile.fill_launch_us
    rate = min(device_profile.fill_gbps, device_profile.dram_read_gbps) * 1e3
    other = _other_dram_bytes(by_pos.get(layer, []) + by_pos.get(layer + 1, []),
                              ft.start, stop[0])
    fit = max(0.0, min(idle * rate, idle * device_profile.dram_read_gbps * 1e3 - other))
    if w.budget > fit and issue.nbytes > fit:
        found.add("L2S105", w.name, kind, stop[1], layer, fit,
                  {"idle_us": idle, "fit": fit})


def _measured_kinds(run) -> frozenset:
    """The layer kinds of ``run``'s model whose op times the device profile
    measured on its box: some ``[ops.MODEL."KIND"]`` entry for the kind, in
    op tables whose origin is ``measured`` (``device.provenance``). Cached
    on the run."""
    got = getattr(run, "_measured_kinds", None)
    if got is not None:
        return got
    device_profile, model = run.device_profile, run.sg.model
    origins = field_origins(device_profile)
    out = set()
    for table_model in (model, LEGACY_OPS_MODEL):
        o = origins.get(f"ops.{table_model}")
        if o is not None and o.measured:
            out |= {k for k, _op in device_profile.ops.get(table_model, {})}
    got = frozenset(out)
    try:
        run._measured_kinds = got
    except AttributeError:  # a run object without attributes of its own
        pass
    return got


def _consumer_findings(run, found: _Found) -> None:
    """L2S104 (late fills) and L2S106 (eviction) at every consumer."""
    nodes = run.sg.nodes
    for v, d in nodes.items():
        if d["cls"] == "fill":
            continue
        t = run.sim.timing[v]
        for fid, late in t.late:
            if late < MIN_BYTES:
                continue
            fd = nodes[fid]
            where = "" if d["pos"] == fd["pos"] else NEXT
            found.add("L2S104", fd["fill"].window, fd["kind"], d["op"] + where,
                      fd["layer"], late)
        for fid, (hit, got) in t.hits_by_fill.items():
            if got >= MIN_BYTES and hit / got < MIN_HIT_FRACTION:
                fd = nodes[fid]
                where = "" if d["pos"] == fd["pos"] else NEXT
                found.add("L2S106", fd["fill"].window, fd["kind"], d["op"] + where,
                          fd["layer"], hit / got,
                          {"reads": [r.tensor for r in d["reads"]],
                           "scope": "this" if not where else "next"})


def _finding(run, code: str, wname: str, op: str, slot: _Slot) -> Finding:
    """The one finding of a (rule, window, op) aggregate."""
    sched = run.schedule
    w = sched.window(wname)
    kind = "/".join(sorted(slot.kinds))
    # where the window fires; an op of the next layer runs one layer later
    layers = f"the window {fires_in(kind, slot.layers)}"
    quoted = f"'{op}'"
    if op.endswith(NEXT):
        name = op[:-len(NEXT)]
        quoted = f"'{name}'{NEXT}"
        op_layers = next_layers(slot.layers, run.sg.num_layers)
        layers += (f"; '{name}' "
                   f"{layers_of('runs in', op_layers, slot.layers, run.sg.num_layers)}")
    vals = slot.values
    worst = max(vals) if code != "L2S106" else min(vals)
    data = {"window": wname, "layer_kinds": sorted(slot.kinds), "op": op,
            "layers": sorted(slot.layers), "value": round(worst, 3)}
    span = window_span(w)
    if code == "L2S005" and slot.extra and slot.extra.get("unmeasured"):
        msg = (f"window '{wname}' fires in dense-MLP layers whose idle time before {quoted} "
               f"device profile {run.device_profile.name} does not measure (no measured op times "
               f"for layer kind {kind}: the idle window is a stand-in); {layers}")
        data["unmeasured"] = True
    elif code in _TIMING_MESSAGES:
        msg = _TIMING_MESSAGES[code].format(
            w=wname, op=quoted, us=worst, size=format_size(int(worst)), layers=layers)
    elif code == "L2S105":
        fit = min(vals)
        span = window_span(w, "budget")
        idle = slot.extra["idle_us"]
        room = (f"{format_size(int(fit))} fit in {idle:.1f} us before {quoted}"
                if idle > 0 else
                f"none: it opens {-idle:.1f} us after {quoted} starts" if idle < 0 else
                f"none: it opens as {quoted} starts")
        msg = (f"budget {format_size(w.budget)} of window '{wname}' is more than "
               f"its idle window can absorb: {room}; {layers}")
        data["fit_bytes"] = int(fit)
    else:  # L2S106
        reads = slot.extra["reads"]
        tspan = None
        for tensor in reads:
            tspan = target_span(sched, wname, slot.extra["scope"], tensor)
            if tspan:
                break
        span = tspan or span
        prot = run.device_profile.protected_bytes(sched.set_aside, sched.policy)
        why = (f"{sched.policy} protects {format_size(prot)}"
               + (" without a set-aside" if sched.set_aside == 0 else ""))
        msg = (f"as little as {worst:.0%} of the bytes window '{wname}' filled for "
               f"{quoted} ({', '.join(reads)}) are predicted still in L2 at use "
               f"({why}); {layers}")
        data["hit_fraction"] = round(worst, 3)
    return Finding(code, msg, span, data)


#: One-line messages of the overlap/timing rules ({w} window, {op} op,
#: {us} worst us, {size} worst bytes, {layers} the layers).
_TIMING_MESSAGES = {
    "L2S101": "fill of window '{w}' overlaps the expert stream {op} by up to "
              "{us:.1f} us; {layers}",
    "L2S102": "fill of window '{w}' overlaps latency-bound {op} by up to "
              "{us:.1f} us; {layers}",
    "L2S103": "fill of window '{w}' slows {op} by up to {us:.1f} us "
              "(device-memory contention); {layers}",
    "L2S005": "window '{w}' fires in dense-MLP layers with no idle window: its "
              "fill overlaps {op} by up to {us:.1f} us; {layers}",
    "L2S104": "{op} starts before window '{w}' has landed up to {size} of its "
              "bytes (late fill); {layers}",
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
