"""Graph-mode rule: a window whose hook point does not run, or whose fills
the runtime skips, in the CUDA-graph mode decode runs in (L2S004)."""

from __future__ import annotations

from l2sched.lint.rules.base import Finding, Rule, window_span
from l2sched.model.adapters import get_adapter

RULES = (
    Rule(
        "L2S004", "hook-not-run-in-graph-mode", "warning",
        what=("the window's hook point does not run in the chosen `--graph-mode`, or the mode is\n"
             "`piecewise`, where the runtime skips prefetch."),
        why=("side-stream work that crosses a breakable capture boundary gives \"capture unjoined\"\n"
             "errors, so prefetch is skipped there; the window does nothing in that mode."),
        example=("`l2sched lint s.l2s --graph-mode piecewise`"),
        fix=("serve decode with FULL CUDA graphs, or accept that the window is inactive there.")),
)


def check(run) -> list[Finding]:
    """L2S004: a window's hook point is not run by Python in ``graph_mode``
    (``HookPoint.graph_modes``), or the mode is ``piecewise``, where the
    runtime skips prefetch ("inside a breakable (PIECEWISE) capture ...
    prefetch is skipped", docs/sources.md#runtime-rules)."""
    schedule, graph_mode = run.schedule, run.graph_mode
    out = []
    hooks = get_adapter(schedule.model).HOOKS_BY_NAME
    for w in schedule.windows:
        h = hooks.get(w.hook)
        if h is not None and graph_mode not in h.graph_modes:
            out.append(Finding("L2S004", f"hook point '{w.hook}' of window "
                               f"'{w.name}' never runs in {graph_mode} graph mode",
                               window_span(w)))
        elif graph_mode == "piecewise":
            out.append(Finding("L2S004", f"window '{w.name}' at '{w.hook}' never "
                               f"prefetches in piecewise graph mode (the runtime "
                               f"skips prefetch inside breakable captures)",
                               window_span(w)))
    return out
