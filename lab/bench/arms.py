"""The arm sets of the research runs: the validation set of
docs/lint.md#validation (``validation_variants``) and the perturbations of a
fitted schedule (``perturbation_variants``), as ``NAME:KEY=VALUE,...``
variants for ``l2sched.bench.arms.arm_specs``."""

from __future__ import annotations

from l2sched.device import load_device
from l2sched.lang.resolve import load_schedule
from l2sched.bench import shipped_path
from l2sched.bench.arms import window_alone_variant


def validation_variants(schedule_path: str) -> list[str]:
    """``NAME:KEY=VALUE,...`` variants of the schedule at ``schedule_path``
    for the validation set (docs/lint.md#validation): each fill kernel
    (``kernel-bulk``, ``kernel-copy``, ``kernel-load``) and each window alone
    at its budget and at half of it (the other windows' budgets 0 B), e.g.
    ``only-B-30MB``."""
    sched = load_schedule(shipped_path(schedule_path), [])
    own = sched.kernel or load_device(sched.device).fill_default
    out = [f"kernel-{k}:kernel={k}" for k in ("bulk", "copy", "load") if k != own]
    for w in sched.windows:
        for b in (w.budget, w.budget // 2):
            mb = f"{b / 10**6:g}MB"
            out.append(window_alone_variant(f"only-{w.name}-{mb}", sched, w.name, mb))
    return out


def perturbation_variants(schedule_path: str) -> list[str]:
    """``NAME:KEY=VALUE,...`` perturbations of the schedule at
    ``schedule_path`` (issue 15: a fitted schedule measured beside its
    neighbours): every budget +25% (``budgets+25%``) and -25%
    (``budgets-25%``), the window with the most budget per step (budget x
    layers it fires in) removed (budget 0 B, ``without-W``), and the fill kernel the schedule does not use that
    the device profile rates best (``kernel-MODE``)."""
    sched = load_schedule(shipped_path(schedule_path), [])
    dev = load_device(sched.device)
    out = []
    for label, f in (("budgets+25%", 1.25), ("budgets-25%", 0.75)):
        out.append(f"{label}:" + ",".join(
            f"window.{w.name}.budget={round(w.budget * f / 10**3)}KB" for w in sched.windows))
    if sched.windows:
        big = max(sched.windows, key=lambda w: (w.budget * len(w.layers), w.name))
        out.append(f"without-{big.name}:window.{big.name}.budget=0MB")
    own = sched.kernel or dev.fill_default
    others = sorted((m for m in dev.fill_modes if m != own),
                    key=lambda m: (-dev.fill_modes[m].effect, m))
    if others:
        out.append(f"kernel-{others[0]}:kernel={others[0]}")
    return out
