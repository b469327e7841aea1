"""Size rules: a fill larger than the L2 (L2S107) and a set-aside above
the device maximum (L2S108)."""

from __future__ import annotations

from collections import defaultdict

from l2sched.lint.rules.base import Finding, Rule, fires_in, window_span
from l2sched.units import format_size

RULES = (
    Rule(
        "L2S107", "fill-larger-than-l2", "error",
        what=("one fill of a window fetches more bytes than the device profile's L2 (`l2.bytes`)."),
        why=("its own lines evict each other before any consumer runs; the surplus is device-memory\n"
             "traffic that competes with the GEMMs and the expert stream for nothing. Measured on the\n"
             "H200: `schedules/bench/budget-over-l2.l2s` (120 MB window B on a 60 MiB L2) made the step\n"
             "1.2-5.2% slower at M=1..64 (benchmarks/results/h200-2026-11-29b.md)."),
        example=("`window B at attn.pre_all_reduce budget 120MB layers moe { ... }` on `device h200`."),
        fix=("keep each window's budget well under the L2 (under the evict_last protected bytes\n"
             "for bytes that must survive the expert stream) and carry the rest to a later window.")),
    Rule(
        "L2S108", "set-aside-above-device-maximum", "warning",
        what=("`set_aside` asks for more persisting L2 than the device profile's\n"
             "`set_aside_max_bytes`."),
        why=("the runtime clamps the request to the driver's maximum (and logs what it got), so the\n"
             "schedule does not say what runs, and the lint's residency model uses the clamped value."),
        example=("`set_aside 1GB` on `device h200` (maximum 39,321,600 B)."),
        fix=("write `set_aside max`, or a size at most the maximum.")),
)


def check(run) -> list[Finding]:
    """L2S107 and L2S108 over ``run`` (a ``LintRun``)."""
    return check_fill_size(run) + check_set_aside(run)


def check_fill_size(run) -> list[Finding]:
    """L2S107: one fill of a window fetches more bytes than the device's L2
    holds (``device_profile.l2_bytes``): its own lines evict each other before any
    consumer runs, and the surplus is device-memory traffic for nothing
    (measured on the H200: the 120 MB window of schedules/bench/
    budget-over-l2.l2s made the step 1.2-5.2% slower,
    benchmarks/results/h200-2026-11-29b.md)."""
    schedule, plan, kinds, device_profile = (run.schedule, run.plan, run.inventory.kinds,
                                     run.device_profile)
    worst: dict = {}
    layers: dict = defaultdict(set)
    for issue in plan.issues:
        if issue.nbytes > device_profile.l2_bytes:
            key = (issue.window, str(kinds[issue.layer]))
            worst[key] = max(worst.get(key, 0), issue.nbytes)
            layers[key].add(issue.layer)
    out = []
    for (wname, kind), nbytes in sorted(worst.items()):
        try:
            span = window_span(schedule.window(wname), "budget")
        except KeyError:
            span = None
        out.append(Finding("L2S107", f"window '{wname}' fills {format_size(nbytes)} at once, "
                           f"more than the {format_size(device_profile.l2_bytes)} L2 of "
                           f"{device_profile.name}: its lines evict each other before use; it "
                           f"{fires_in(kind, layers[(wname, kind)])}", span,
                           {"window": wname, "bytes": nbytes, "l2_bytes": device_profile.l2_bytes,
                            "layers": sorted(layers[(wname, kind)])}))
    return out


def check_set_aside(run) -> list[Finding]:
    """L2S108: the schedule reserves more persisting L2 than the device
    allows (``device_profile.set_aside_max_bytes``); the runtime clamps it to the
    maximum (``runtime.cuda.apply_set_aside``), so the schedule does not say what
    runs."""
    schedule, device_profile = run.schedule, run.device_profile
    want = schedule.set_aside
    if want <= 0 or want <= device_profile.set_aside_max_bytes:
        return []
    return [Finding("L2S108", f"set_aside {format_size(want)} is above the "
                    f"{format_size(device_profile.set_aside_max_bytes)} maximum of "
                    f"{device_profile.name}; "
                    f"the runtime clamps it to the maximum (write 'set_aside max')",
                    schedule.spans.get("set_aside"),
                    {"set_aside": want, "max": device_profile.set_aside_max_bytes})]
