"""Reading a fill's measured cost to a concurrent op as the lint's slowdown.

The lint (``lint.simulate``) slows an op that runs beside a fill to ``1 / (1
+ s)`` of its rate while the fill reads device memory: the fill's
``launch_us``, then ``bytes / gbps`` of reads (``FillMode``). A probe
measures the extra time the op took beside a fill of known bytes. The
slowdown a device profile keeps is the one that makes the lint's own
picture of that probe reproduce the measured extra (``slowdown_for_extra``),
so the term means the same in the probe and in the step. Used for
``fill.MODE.slowdown`` and ``gemm_slowdown`` (``l2sched profile``'s
interference probe: a 200-kernel latency chain and a GEMM chain) and
``allreduce_slowdown`` (``bench tp``'s all-reduce beside a fill). Units: us.
"""

from __future__ import annotations


def slowdown_for_extra(extra_us: float, busy_us: float, launch_us: float,
                       read_us: float) -> float | None:
    """The slowdown ``s`` (fraction) that makes an op of ``busy_us`` take
    ``extra_us`` longer when a fill is forked with it and reads device memory
    for ``read_us`` after ``launch_us`` (the op runs at ``1 / (1 + s)`` of its
    rate during the read). Either the read outlasts the op's remaining
    ``busy_us - launch_us`` (then ``s = extra / remaining``) or it ends first
    (then ``extra = read_us x s / (1 + s)``). 0 for an extra <= 0; None when
    no ``s`` explains it (the read starts after the op ended, or is shorter
    than the extra itself)."""
    if extra_us <= 0:
        return 0.0
    remaining = busy_us - launch_us
    if remaining <= 0:
        return None
    if remaining + extra_us <= read_us:
        return extra_us / remaining
    if read_us > extra_us:
        return extra_us / (read_us - extra_us)
    return None
