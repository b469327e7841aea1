"""Launch rules: a window whose hook point is followed by a kernel vLLM
launches with programmatic dependent launch (L2S113).

The facts are the model adapter's (``PDL_LAUNCHES``: ``records.PdlLaunch``,
each with its vLLM 0.33.0 source and the arch, M, layer and config under
which it holds); the arch is the device profile's ``compute_capability``.
The next kernel after a hook is the first active main-stream op of the step
graph after the op the window's fill forks from. A profile without a
compute capability, or an op the adapter lists no fact for, gets no
finding (the lint cannot tell, so it says nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from l2sched.lint.rules.base import Finding, Rule, fires_in, window_span
from l2sched.model.adapters import get_adapter
from l2sched.model.adapters.protocol import optional_member

#: How late a side-stream fill started behind a programmatic-launch chain on
#: the H200, us (low, high): ``../shared/probes/dispatch.cu``, variants
#: ``*-pdl``, as ``../shared/probes/README.md`` reports it ("8-25 us after
#: its hook"). The lint's simulation does not model it; the message quotes it.
PROBE_LATE_US = (8.0, 25.0)
#: Op classes a fill must land before (as L2S105's idle window).
_PROTECTED = ("expert_stream", "attention_core")

RULES = (
    Rule(
        "L2S113", "fill-behind-programmatic-launch", "warning",
        what=("the kernel right after a window's hook point is one vLLM launches with programmatic\n"
              "dependent launch (PDL) on this device at this M (the model adapter's `PDL_LAUNCHES`:\n"
              "the op, its vLLM source, the GPU architectures, the largest M, the layers and the model\n"
              "config it needs; the arch is the device profile's `compute_capability`). The message\n"
              "names the kernel, the vLLM source, and the idle time the simulated step gives the fill\n"
              "before the next protected op. A profile without `compute_capability`, or an op whose\n"
              "launch the adapter does not list, gets no finding: the lint cannot tell."),
        why=("a side-stream fill forked after kernel K of a programmatic-launch chain starts when\n"
             "K+1 starts, not at the hook: 8-25 us late on an H200 (`../shared/probes/dispatch.cu`,\n"
             "`../shared/probes/README.md`). A window placed before an op can then land after it; the\n"
             "lint's simulation starts the fill at the hook, so its timing findings are optimistic\n"
             "there. The runtime reports what a real capture shows (docs/runtime.md, \"Programmatic-launch\n"
             "chains\")."),
        example=("a GLM-5.3 window at `attn.post_all_reduce` on the `h200` profile (sm_90): the next\n"
                 "kernel is the TileLang mHC kernel of `mhc.ffn_pre`, launched with PDL on sm_90 and newer."),
        fix=("move the window to a hook whose next kernel is launched without PDL (one op earlier),\n"
             "or measure it with the plugin's `capture_launch launch-order`, which puts the fill in the\n"
             "model's chain ahead of that kernel; the plugin's summary says how many fills started late.")),
)


@dataclass
class _Slot:
    layers: set = field(default_factory=set)
    kinds: set = field(default_factory=set)
    idle: list = field(default_factory=list)
    stop: str = ""
    fact: object = None
    hook: str = ""


def _fork_sources(sg) -> dict[str, str]:
    """Fill node id -> the op node its fork edge comes from."""
    out = {}
    for u, succ in sg.adj.items():
        for v, e in succ.items():
            if e.get("kind") == "fork" and sg.nodes[v]["cls"] == "fill":
                out[v] = u
    return out


def _next_active(sg, index: dict, src: str) -> str | None:
    """The first active main-stream node after ``src`` (``None`` at the end)."""
    i = index.get(src)
    if i is None:
        return None
    for nid in sg.main[i + 1:]:
        if sg.nodes[nid]["active"]:
            return nid
    return None


def _idle(run, fill: str, pos: int) -> tuple[float, str] | None:
    """(us from the fill's simulated start to the next protected op, that
    op's name) in the fill's layer or the next; ``None`` without one."""
    t0 = run.sim.timing[fill].start
    best = None
    for v, d in run.sg.nodes.items():
        if d["pos"] not in (pos, pos + 1) or not d["active"] or d["cls"] == "fill":
            continue
        if d["cls"] in _PROTECTED or (d["eager_break"] and d["cls"] == "small"):
            t = run.sim.timing[v].start
            if t >= t0 and (best is None or t < best[0]):
                best = (t, d["op"] + ("" if d["pos"] == pos else " of the next layer"))
    return None if best is None else (best[0] - t0, best[1])


def check(run) -> list[Finding]:
    """L2S113 over ``run`` (a ``LintRun``: step graph, simulation, device
    profile, model config, tokens)."""
    cc = getattr(run.device_profile, "compute_capability", None)
    if cc is None:
        return []
    adapter = get_adapter(run.schedule.model)
    facts = optional_member(adapter, "PDL_LAUNCHES")
    if not facts:
        return []
    by_op: dict[str, list] = {}
    for f in facts:
        by_op.setdefault(f.op, []).append(f)
    sg, inv = run.sg, run.inventory
    index = {nid: i for i, nid in enumerate(sg.main)}
    config = getattr(run, "model_config", None)
    slots: dict[tuple[str, str], _Slot] = {}
    for fill, src in _fork_sources(sg).items():
        nxt = _next_active(sg, index, src)
        if nxt is None:
            continue
        nd = sg.nodes[nxt]
        for fact in by_op.get(nd["op"], ()):
            layer = nd["layer"]
            if not fact.layer_holds(layer, sg.num_layers):
                continue
            if not fact.holds(cc, run.tokens, inv.kinds[layer], config):
                continue
            fd = sg.nodes[fill]
            issue = fd["fill"]
            slot = slots.setdefault((issue.window, nd["op"]), _Slot(fact=fact, hook=issue.hook))
            slot.layers.add(issue.layer)
            slot.kinds.add(fd["kind"])
            idle = _idle(run, fill, fd["pos"])
            if idle is not None:
                slot.idle.append(idle[0])
                slot.stop = slot.stop or idle[1]
            break
    return [_finding(run, wname, op, slot) for (wname, op), slot in sorted(slots.items())]


def _finding(run, wname: str, op: str, slot: _Slot) -> Finding:
    fact = slot.fact
    kind = "/".join(sorted(slot.kinds))
    major, minor = run.device_profile.compute_capability
    lo, hi = PROBE_LATE_US
    idle = ""
    if slot.idle:
        idle = (f"; the simulated step gives the fill {min(slot.idle):.1f} us before "
                f"'{slot.stop}' from the hook")
    msg = (f"window '{wname}' at {slot.hook}: the next kernel, '{op}' ({fact.kernel}), is "
           f"launched with programmatic dependent launch on sm_{major}{minor} at "
           f"M={run.tokens}, so the fill starts when '{op}' starts, not at the hook "
           f"({lo:g}-{hi:g} us late on an H200 in ../shared/probes/dispatch.cu){idle}; "
           f"the window {fires_in(kind, slot.layers)}; vLLM 0.33.0: {fact.source}"
           + (f" (when {fact.requires} is installed)" if fact.requires else ""))
    data = {"window": wname, "op": op, "hook": slot.hook, "kernel": fact.kernel,
            "layers": sorted(slot.layers), "layer_kinds": sorted(slot.kinds),
            "compute_capability": [major, minor], "tokens": run.tokens,
            "source": fact.source, "probe_late_us": [lo, hi],
            "idle_us": round(min(slot.idle), 3) if slot.idle else None}
    w = run.schedule.window(wname)
    return Finding("L2S113", msg, window_span(w), data)
