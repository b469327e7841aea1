"""Left-over rule: bytes no window took after the last carry (L2S201)."""

from __future__ import annotations

from collections import defaultdict

from l2sched.lint.rules.base import Finding, Rule, layers_text, window_span
from l2sched.units import format_size

RULES = (
    Rule(
        "L2S201", "bytes-left-over", "info",
        what=("bytes that no window took after the last carry, with the tensor names."),
        why=("they are read cold; the author should know which."),
        example=("window A_MLA of the shipped SM120 schedule (36 MB) cannot take all of the MLA\n"
                 "layer's `self_attn.o_proj.weight`."),
        fix=("raise a budget, add a `carry`, or accept it."),
        example_command="l2sched lint schedules/glm53-flash-sm120-tp4.l2s --select L2S201"),
)


def check(run) -> list[Finding]:
    """L2S201: bytes no window took (after the last carry), with names."""
    schedule, plan, kinds = run.schedule, run.plan, run.inventory.kinds
    groups: dict = defaultdict(lambda: defaultdict(int))
    layers: dict = defaultdict(set)
    for lo in plan.left_over:
        key = (lo.window, str(kinds[lo.layer]))
        groups[key][lo.tensor] += lo.nbytes
        layers[key].add(lo.layer)
    out = []
    for (wname, kind), tensors in sorted(groups.items()):
        try:
            w = schedule.window(wname)
            span = window_span(w, "carry" if w.carry else "budget")
        except KeyError:
            span = None
        per_layer = sum(tensors.values()) // max(1, len(layers[(wname, kind)]))
        names = ", ".join(sorted(tensors))
        out.append(Finding("L2S201", f"window '{wname}' leaves "
                           f"{format_size(per_layer)} per layer unfetched after its "
                           f"last carry ({names}) in "
                           f"{layers_text(kind, layers[(wname, kind)])}", span,
                           {"tensors": sorted(tensors), "bytes_per_layer": per_layer}))
    return out
