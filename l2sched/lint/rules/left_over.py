"""Left-over rule: bytes no window took after the last carry (L2S201)."""

from __future__ import annotations

from collections import defaultdict

from l2sched.lint.rules.base import Finding, Rule, fires_in, layers_of, window_span
from l2sched.units import format_size

RULES = (
    Rule(
        "L2S201", "bytes-left-over", "info",
        what=("bytes that no window took after the last carry, with the tensor names."),
        why=("they are read cold; the author should know which."),
        example=("A_MLA at 36 MB leaves 1.75 MB of `self_attn.o_proj.weight`. The message names\n"
                 "the layers the window fires in and, for `next` targets, the layers the bytes\n"
                 "belong to (`fires in kda+moe layers 4..5, 8..9; the bytes are tensors of layers\n"
                 "5..6, 9..10`)."),
        fix=("raise a budget, add a `carry`, or accept it."),
        example_command="l2sched lint schedules/glm53-flash-sm120-tp4.l2s --select L2S201"),
)


def check(run) -> list[Finding]:
    """L2S201: bytes no window took (after the last carry), with names, per
    (window, kind of the layers it fires in, kind of the layers the bytes
    belong to): where the window fires and, when they differ, the layers
    whose tensors the bytes are."""
    schedule, plan, kinds = run.schedule, run.plan, run.inventory.kinds
    groups: dict = defaultdict(lambda: defaultdict(int))
    fired: dict = defaultdict(set)
    owners: dict = defaultdict(set)
    for lo in plan.left_over:
        at = lo.fired_in if lo.fired_in >= 0 else lo.layer
        key = (lo.window, str(kinds[at]), str(kinds[lo.layer]))
        groups[key][lo.tensor] += lo.nbytes
        fired[key].add(at)
        owners[key].add(lo.layer)
    out = []
    for (wname, kind, owner_kind), tensors in sorted(groups.items()):
        try:
            w = schedule.window(wname)
            span = window_span(w, "carry" if w.carry else "budget")
        except KeyError:
            span = None
        key = (wname, kind, owner_kind)
        per_fire = sum(tensors.values()) // max(1, len(fired[key]))
        names = ", ".join(sorted(tensors))
        where = (f"the bytes are "
                 f"{layers_of(f'tensors of {owner_kind}', owners[key], fired[key], len(kinds))}"
                 if owners[key] != fired[key] else "the bytes are tensors of the layers "
                 "it fires in")
        out.append(Finding("L2S201", f"window '{wname}' leaves "
                           f"{format_size(per_fire)} unfetched each time it fires, after "
                           f"its last carry ({names}); it {fires_in(kind, fired[key])}; "
                           f"{where}", span,
                           {"tensors": sorted(tensors), "bytes_per_layer": per_fire,
                            "layers": sorted(fired[key]),
                            "tensor_layers": sorted(owners[key])}))
    return out
