"""Mode rules: a window whose hook point does not run, or whose fills the
runtime skips, in the CUDA-graph mode decode runs in (L2S004); a window
whose fill kernel the device profile has no numbers for (L2S109)."""

from __future__ import annotations

from l2sched.lint.rules.base import Finding, Rule, window_span
from l2sched.model.adapters import get_adapter

RULES = (
    Rule(
        "L2S109", "fill-kernel-not-in-profile", "error",
        what=("a window's fill kernel (`kernel bulk|copy|load`, the schedule's, or the\n"
              "device profile's default) has no `[fill.MODE]` numbers in the device profile."),
        why=("the lint cannot predict what that kernel lands or costs on this device, and\n"
             "the runtime takes its launch shape from the same table; the prediction\n"
             "falls back to the profile's default kernel and means little."),
        example=("`kernel copy` on a profile measured before the copy mode existed."),
        fix=("run `l2sched profile` on the box (it measures every fill kernel), or name\n"
             "a kernel the profile has (`l2sched lint` lists them in this message).")),
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
    """L2S004 and L2S109 over ``run`` (a ``LintRun``)."""
    return check_graph_mode(run) + check_fill_kernels(run)


def check_fill_kernels(run) -> list[Finding]:
    """L2S109: the fill kernel of a window is missing from the device
    profile's ``fill_modes``; one finding per window, at the clause that
    chose the kernel (the window's ``kernel``, else the schedule's)."""
    schedule, device_profile = run.schedule, run.device_profile
    out = []
    for w in schedule.windows:
        mode = w.kernel or schedule.kernel or device_profile.fill_default
        if mode in device_profile.fill_modes:
            continue
        span = (w.spans.get("kernel") if w.kernel else schedule.spans.get("kernel")
                ) or window_span(w)
        out.append(Finding("L2S109", f"window '{w.name}' fills with the '{mode}' "
                           f"kernel, but device profile {device_profile.name} has numbers for "
                           f"{', '.join(sorted(device_profile.fill_modes)) or 'no kernel'}",
                           span, {"window": w.name, "kernel": mode}))
    return out


def check_graph_mode(run) -> list[Finding]:
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
