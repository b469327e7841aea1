"""Measuring a box into a device profile: ``l2sched profile``.

The probes (``probes``: L2 re-read sweep, fill kernels, interference
(``interference``), set-aside; ``ops``: the per-op cold/hot table;
``step_fill``: what each fill kernel's landed bytes buy inside the decode
step; ``fill_fork``: what a fill costs the captured step; ``collectives``:
the all-reduce across N GPUs, from ``l2sched bench tp`` runs,
``tp_interference`` and ``collective_terms``) and the device profile they
write (``write``, with each field's origin from ``origins``; ``gaps``: the
step gaps; ``state``: the resumable state file). The decode step the probes
time is ``l2sched.bench``'s, which this package sits above. torch is
imported inside functions only.
"""
