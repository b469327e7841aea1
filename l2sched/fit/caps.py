"""The budget caps of ``l2sched fit``: how many bytes a fill at a hook
point could land before the next routed-expert stream.

The no-prefetch step is simulated (on the search's surrogate model and its
pessimistic profile) at every M. For a hook point of a layer, the idle time
is from the hook firing (the end of the main-stream op before it) to the
start of the next expert stream in this or the next layer; a fill there
moves at most ``(idle - launch) x rate`` bytes before it would overlap the
experts (L2S101), where ``rate`` is the fastest fill kernel's rate capped by
the device-memory bandwidth and ``launch`` the cheapest kernel launch.
``CAP_MARGIN`` leaves room for the main-stream ops a fill slows (which
lengthen the window). A hook with no expert stream after it is capped by the
effective L2. The cap of a (kind, hook) is the smallest over layers and M.

Units: bytes (B), microseconds (us), GB/s = 10^9 B/s.
"""

from __future__ import annotations

from l2sched.device.kernel_spec import KernelSpec, fit_spec
from l2sched.device import DeviceProfile

#: Margin over a hook's idle-window bytes (see the module docstring).
CAP_MARGIN = 1.25


def hook_caps(evaluator, empty, adapter, streams, capacity: int) -> dict:
    """``(kind, hook) -> cap`` (B) from the no-prefetch runs of schedule
    ``empty`` on ``evaluator`` (an ``Evaluator`` whose first variant is the
    profile the caps are for); ``capacity`` is the effective L2 (B)."""
    device_profile = evaluator.variants[0].device_profile
    modes = device_profile.fill_modes.values()
    rate = max(min(fm.gbps, device_profile.dram_read_gbps) for fm in modes) * 1e3
    launch = min(fm.launch_us for fm in modes)
    caps: dict = {}
    for _name, lr in evaluator.lint_runs(empty):
        for key, idle in idle_windows(lr, evaluator.inventory, adapter, streams):
            got = capacity if idle is None else \
                max(0.0, idle - launch) * rate * CAP_MARGIN
            caps[key] = min(caps.get(key, got), got, capacity)
    return caps


def idle_windows(lr, inventory, adapter, streams):
    """``((kind, hook), idle us)`` for every hook of every layer of a
    no-prefetch ``LintRun``: the time from the hook firing to the start of
    the next routed-expert stream in this or the next layer (None when
    there is none)."""
    sg, timing = lr.base_sg, lr.base.timing
    experts: dict[int, list[float]] = {}
    for v, d in sg.nodes.items():
        if d["cls"] == "expert_stream" and d["active"]:
            experts.setdefault(d["pos"], []).append(timing[v].start)
    for pos in range(sg.num_layers):
        kind = inventory.kinds[pos]
        ops = adapter.decode_timeline(kind)
        later = sorted(experts.get(pos, []) + experts.get(pos + 1, []))
        for (kname, hook), s in streams.items():
            if kname != str(kind):
                continue
            fire = fire_time(timing, pos, ops, s.position)
            nxt = next((t for t in later if t >= fire - 1e-9), None)
            yield (kname, hook), (None if nxt is None else nxt - fire)


def fire_time(timing, pos: int, ops, position: float) -> float:
    """When a hook at ``position`` (see ``space.hook_positions``) of the
    layer at step position ``pos`` fires (us): the finish of the main-stream
    op before it, or the start of the layer's first op."""
    j = round(position - 0.5)
    while j >= 0 and ops[j].stream == "aux":
        j -= 1
    if j < 0:
        return timing[f"{pos}:{ops[0].name}"].start
    return timing[f"{pos}:{ops[j].name}"].finish


def fitting_kernels(device_profile: DeviceProfile) -> tuple[list[str], dict[str, str]]:
    """The fill kernels of ``device_profile`` (a ``DeviceProfile``) whose launch
    shape (``[fill.MODE]``) fits the GPU's limits as the profile gives them
    (``DeviceProfile.limits``; every kernel when it gives none), sorted, and
    ``mode -> why not`` for the others. A shape that does not fit would be
    fitted to another shape on that GPU (``device.kernel_spec.fit_spec``), and
    the profile's numbers are not that shape's, so the fit does not propose
    it."""
    limits = device_profile.limits
    ok: list[str] = []
    why: dict[str, str] = {}
    for mode, fm in sorted(device_profile.fill_modes.items()):
        spec = KernelSpec(mode, fm.grid, fm.threads, fm.chunk, fm.stages)
        if limits is None or fit_spec(spec, limits) == spec:
            ok.append(mode)
            continue
        why[mode] = (f"its shape {spec.shape_text()} does not fit the "
                     f"{limits.smem_per_block_optin_bytes:,} B of shared memory per "
                     f"block of device profile {device_profile.name}")
    return ok, why
