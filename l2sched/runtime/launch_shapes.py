"""Each fill issue's kernel and launch shape (``KernelSpec``): the mode the
schedule or the device profile names, the profile's shape for it, and the
grid each launch group needs (``sized_specs``). torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from l2sched.compiler.plan import Plan
from l2sched.runtime import kernel as K
from l2sched.runtime.fill_kernels import launch_ctas


def issue_specs(plan: Plan, fill: Mapping | None = None, fill_default: str = "bulk",
                **shape) -> list[K.KernelSpec]:
    """The fill kernel of every issue of ``plan``: the issue's ``kernel``
    (the schedule's choice), else ``fill_default`` (the device profile's);
    its launch shape from ``fill`` (mode -> an object with ``grid``,
    ``threads``, ``chunk``, ``stages``: the profile's ``FillMode``s), else
    the kernel module's defaults; the plan's cache policy. ``shape``
    (``mode``, ``grid``, ``threads``, ``chunk``, ``stages``; ``None`` =
    unset) overrides every issue (benchmarks). Raises ``ValueError`` for a
    spec that cannot be built."""
    fill = fill or {}
    shape = {k: v for k, v in shape.items() if v is not None}
    out = []
    for wi in plan.issues:
        mode = shape.get("mode") or wi.kernel or fill_default
        fm = fill.get(mode)
        base = ({"grid": fm.grid, "threads": fm.threads, "chunk": fm.chunk,
                 "stages": fm.stages} if fm is not None else {})
        out.append(K.KernelSpec(**{**base, **shape, "mode": mode,
                                   "policy": plan.policy}).check())
    return out


def sized_specs(plan: Plan, specs: Sequence[K.KernelSpec],
                groups: Sequence[tuple[int, ...]]) -> list[K.KernelSpec]:
    """``specs`` (one per issue of ``plan``) with each launch group's grid cut
    to what its rows need (``fill_kernels.launch_ctas`` over the ranges of
    the group's issues, the same spec for every issue of a group)."""
    out = list(specs)
    for g in groups:
        sizes = [r.nbytes for j in g for r in plan.issues[j].ranges]
        spec = specs[g[0]]
        sized = dataclasses.replace(spec, grid=launch_ctas(spec, sizes))
        for j in g:
            out[j] = sized
    return out
