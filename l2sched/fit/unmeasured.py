"""Unmeasured costs are never free: the terms a fitted decision rests on
that were not measured on the box (``device.provenance.unmeasured_terms``),
and the two cases in which ``l2sched fit`` writes no windows unless
``--allow-unmeasured`` (``withheld_because``): at TP > 1 a gain that rests
on a fill-vs-all-reduce slowdown nobody measured on the box (a fill beside
an NVLink all-reduce measured 0.4-2.7 x slower all-reduces on 2 H200s,
benchmarks/results/h200x2-2026-12-01-profile-collectives.md, and the
schedules fitted without that term measured slower at every M there), and a
profile made with ``l2sched profile --quick`` (no ``step_fill`` probe).
"""

from __future__ import annotations

import dataclasses

from l2sched.device.provenance import allreduce_slowdown_unmeasured, unmeasured_terms
from l2sched.device import DeviceProfile


def withheld_because(device_profile: DeviceProfile, tp: int, kernels) -> list[str]:
    """Why a fit on ``device_profile`` (a ``DeviceProfile``) at TP degree ``tp``
    with fill ``kernels`` writes no windows unless ``--allow-unmeasured``:
    one sentence per unmeasured fill-vs-all-reduce slowdown (TP > 1), and
    one for a ``--quick`` profile; empty when neither."""
    out = [f"{term} at TP{tp}: run `l2sched profile --collectives {tp}` on this box"
           for term in allreduce_slowdown_unmeasured(device_profile, tp, kernels)]
    if device_profile.provenance.get("quick"):
        out.append("the profile was made with `l2sched profile --quick` (no step_fill "
                   "probe), which is not for fitting: run `l2sched profile` without --quick")
    return out


def gate_unmeasured(result, device_profile: DeviceProfile, opts):
    """``result`` (a ``FitResult`` with windows) with the unmeasured terms
    of its kernel recorded; when ``withheld_because`` names a reason and
    ``opts.allow_unmeasured`` is off, a no-prefetch result holding
    ``result`` as ``withheld`` instead."""
    kernels = {result.candidate.kernel}
    blocking = tuple(withheld_because(device_profile, opts.tp, kernels))
    found = dataclasses.replace(result, unmeasured=tuple(unmeasured_terms(
        device_profile, opts.tp, kernels)), unmeasured_blocking=blocking)
    if not blocking or opts.allow_unmeasured:
        return found
    empty = [(m, w, 0.0, 0.0, floor) for m, w, _med, _lb, floor in result.rows]
    return dataclasses.replace(found, candidate=None, rows=empty, objective=0.0,
                               withheld=found)
