"""The plugin's one summary line per rank (``summary_line``): bytes per
window, windows per layer kind, the device-profile terms the lint rested
on that were not measured (``unmeasured_note``) and, once vLLM has captured
its CUDA graphs, the fills the runtime saw start late behind
programmatic-launch kernels (``programmatic_note``). Made at install, again
when hooks move (``vllm.replaced``), so it counts only issues that can fire,
and again after the capture when that note is not empty.
"""

from __future__ import annotations

from collections import defaultdict

from l2sched.device.provenance import unmeasured_terms
from l2sched.runtime.capture_nodes import DEFAULT_CAPTURE_LAUNCH
from l2sched.units import format_size
from l2sched.vllm.config import PluginConfig
from l2sched.device import DeviceProfile

#: At most this many unmeasured terms are named in the summary line.
UNMEASURED_SHOWN = 3
#: Where docs/runtime.md says what programmatic-launch chains do to a fill.
PROGRAMMATIC_DOC = "docs/runtime.md#programmatic-launch-chains"


def programmatic_note(stats) -> str:
    """The summary's note on fills whose hook a FULL capture showed followed
    by a kernel launched with programmatic stream serialization
    (``RuntimeStats.programmatic_late``, from ``runtime.pdl_watch``): ``""``
    when there is none (or the runtime has no such counter), else ``; N
    fill(s) after programmatic-launch kernels start late
    (docs/runtime.md#programmatic-launch-chains)``."""
    n = int(getattr(stats, "programmatic_late", 0) or 0)
    if n <= 0:
        return ""
    return (f"; {n} fill{'s' if n > 1 else ''} after programmatic-launch kernels "
            f"start late ({PROGRAMMATIC_DOC})")


#: Where docs/runtime.md says what MEMSET nodes of the model's graph cost beside forked fills.
MEMSET_DOC = "docs/runtime.md#memset-nodes-in-the-captured-step-issue-48"


def memset_note(runtime) -> str:
    """The summary's note on the MEMSET nodes of the model's captured step
    (``RuntimeStats.memset_nodes``, from ``runtime.pdl_watch``) when its
    fills are forked (``capture_launch`` ``fork``): each costs the model's
    stream about 1.5-2 us per step beside forked fills, whatever they move
    (issue 48, benchmarks/results/h100-2026-12-07-tax-memset/). ``""`` when
    there is none, the runtime has no such counter or launches otherwise."""
    stats = getattr(runtime, "stats", None)
    n = int(getattr(stats, "memset_nodes", 0) or 0)
    if n <= 0 or getattr(runtime, "capture_launch", None) != "fork":
        return ""
    return (f"; the captured step has {n} MEMSET node{'s' if n > 1 else ''}, each about "
            f"1.5-2 us per step beside forked fills: try capture_launch deferred ({MEMSET_DOC})")


def unmeasured_note(device_profile: DeviceProfile, tp: int, plan, schedule,
                    cfg: PluginConfig) -> str:
    """The summary's note on the device-profile terms the lint and the loss
    gate rest on that were not measured on the box the profile describes
    (``device.provenance.unmeasured_terms`` at TP ``tp`` for the fill
    kernels of ``plan``'s issues, and a fork cost measured with another capture
    launch than ``cfg.capture_launch``'s): ``""`` when all were (or with the lint
    off), else ``N unmeasured profile terms: KEY (ORIGIN), ...`` with at
    most ``UNMEASURED_SHOWN`` named."""
    if cfg.lint == "off" or not plan.issues:
        return ""
    modes = {wi.kernel or schedule.kernel or device_profile.fill_default for wi in plan.issues}
    terms = unmeasured_terms(device_profile, tp, modes,
                             capture_launch=cfg.capture_launch or DEFAULT_CAPTURE_LAUNCH)
    if not terms:
        return ""
    more = len(terms) - UNMEASURED_SHOWN
    shown = ", ".join(terms[:UNMEASURED_SHOWN]) + (f", {more} more" if more > 0 else "")
    return f"; {len(terms)} unmeasured profile term{'s' if len(terms) > 1 else ''}: {shown}"


def summary_line(schedule, plan, inventory, cfg: PluginConfig, device: str,
             lint_note: str, unmeasured: str = "", runtime_note: str = "",
             groups=None) -> str:
    """The one summary line: issues, fill launches (with ``groups``, the
    runtime's ``groups_of``: the issues of one hook point with one kernel
    are one launch), bytes per window, windows per layer kind, then
    ``unmeasured`` (``unmeasured_note``) and ``runtime_note``
    (``programmatic_note``) at its end."""
    per_window: dict[str, list[int]] = defaultdict(list)
    kinds_windows: dict[str, list[str]] = defaultdict(list)
    for wi in plan.issues:
        per_window[wi.window].append(wi.nbytes)
        k = str(inventory.kinds[wi.layer])
        if wi.window not in kinds_windows[k]:
            kinds_windows[k].append(wi.window)
    windows = ", ".join(
        f"{w} {format_size(sum(v))} in {len(v)} layer{'s' if len(v) > 1 else ''}"
        for w, v in per_window.items())
    kinds = "; ".join(
        f"{k}: {'+'.join(kinds_windows.get(k, [])) or 'none'}"
        for k in sorted({str(k) for k in inventory.kinds}))
    total = sum(wi.nbytes for wi in plan.issues)
    launches = ""
    if groups is not None:
        n = len(groups(plan))
        launches = f"{n} fill launch{'' if n == 1 else 'es'}, "
    left = sum(lo.nbytes for lo in plan.left_over)
    over = ", ".join(cfg.overrides)
    return (f"schedule {schedule.name} ({cfg.schedule}{'; set ' + over if over else ''}"
            f") installed{'' if cfg.fills == 'on' else ' switched off (fills off)'}, "
            f"backend {cfg.backend}, device {device}, {lint_note}: "
            f"{len(plan.issues)} issues, {launches}{format_size(total)} per decode step "
            f"[{windows}]; windows per layer kind [{kinds}]; left over "
            f"{format_size(left)}{unmeasured}{runtime_note}")
