"""Device rules: a fill kernel whose launch shape does not fit the device's
shared memory per block (L2S111), and the terms a prediction rests on that
were not measured on the box (L2S112).

L2S111 uses the runtime's own fitting (``device.kernel_spec.fit_spec``, a pure
function: what ``get_kernel`` builds in place of a shape that does not fit)
on the limits the profile gives (``DeviceProfile.limits``: ``[gpu]
smem_per_block_optin_bytes``). L2S112 reads the profile's field origins
(``device.provenance.unmeasured_terms``) at the schedule's TP degree for
the fill kernels its windows use.
"""

from __future__ import annotations

from l2sched.device.kernel_spec import KernelSpec, fit_spec
from l2sched.device.provenance import unmeasured_terms
from l2sched.lint.rules.base import Finding, Rule, window_span

RULES = (
    Rule(
        "L2S111", "fill-kernel-exceeds-shared-memory", "warning",
        what=("a window's fill kernel (its `[fill.MODE]` launch shape in the device profile: for\n"
              "`copy`, stages x chunk + 1,024 B of barriers) needs more shared memory per block than\n"
              "the device allows (`[gpu] smem_per_block_optin_bytes`). The message says what the\n"
              "runtime will fit it to (fewer stages, then a smaller chunk), or that nothing fits."),
        why=("the runtime never launches a kernel with more shared memory than the device has: it\n"
             "builds the fitted shape (one INFO line) or, when nothing fits, no kernel at all (prefetch\n"
             "of that kernel stays off). The profile's numbers (landed rate, slowdowns) belong to the\n"
             "shape it was measured with, so the prediction is not of what runs. The RTX PRO 6000\n"
             "(sm_120) allows 101,376 B per block (docs/sources.md#sm120-smem-limit); the H200's copy\n"
             "shape, 4 x 32 KiB + 1 KiB, needs 132,096 B."),
        example=("`kernel copy` with a profile of an SM120 box whose `[fill.copy]` kept the H200's\n"
                 "`stages = 4`, `chunk = 32768`."),
        fix=("write the fitted shape into the profile's `[fill.MODE]` table and measure it there\n"
             "(`l2sched profile` on the box fits and records it), or choose another kernel.")),
    Rule(
        "L2S112", "unmeasured-terms", "info",
        what=("the prediction for this schedule rests on device-profile terms that were not measured\n"
              "on the box the profile describes: kept from a base profile, estimates, conservative\n"
              "stand-ins or defaults (the profile's `[origin]` table; docs/devices.md). Only the terms\n"
              "of the schedule's TP degree (the all-reduce terms at TP > 1) and of its windows' fill\n"
              "kernels are named."),
        why=("an unmeasured cost is not a free one: a fill-vs-all-reduce slowdown left at its\n"
             "default 0 made `l2sched fit` propose six windows predicted +92..+174 us on an H200\n"
             "profile where the measured slowdown says no prefetch (issue 32)."),
        example=("any schedule with windows on the `h200` profile at TP4 (its TP4 all-reduce table\n"
                 "and stand-in kernel times are not measured)."),
        fix=("measure the box: `l2sched profile` (and `--collectives N` for the all-reduce terms)."),
        example_command="l2sched lint schedules/glm53-flash-h200-tp4.l2s --select L2S112"),
)


def check(run) -> list[Finding]:
    """L2S111 and L2S112 over ``run`` (a ``LintRun``)."""
    return check_kernel_shapes(run) + check_unmeasured(run)


def _window_modes(run) -> dict[str, list]:
    """``fill kernel -> windows using it`` (the window's kernel, else the
    schedule's, else the profile's default)."""
    out: dict[str, list] = {}
    sched, device_profile = run.schedule, run.device_profile
    for w in sched.windows:
        out.setdefault(w.kernel or sched.kernel or device_profile.fill_default, []).append(w)
    return out


def check_kernel_shapes(run) -> list[Finding]:
    """L2S111: one finding per fill kernel the schedule uses whose profile
    shape does not fit ``run.device_profile.limits`` (none when the profile gives
    no limits or no numbers for the kernel, L2S109's case), at the first
    window using it."""
    device_profile, limits = run.device_profile, run.device_profile.limits
    if limits is None:
        return []
    out = []
    for mode, windows in _window_modes(run).items():
        fm = device_profile.fill_modes.get(mode)
        if fm is None:
            continue
        spec = KernelSpec(mode, fm.grid, fm.threads, fm.chunk, fm.stages)
        got = fit_spec(spec, limits)
        if got == spec:
            continue
        room = limits.smem_per_block_optin_bytes
        then = (f"the runtime fits it to {got.shape_text()}" if got is not None else
                "no shape fits, so the runtime builds no kernel and prefetch with it stays off")
        names = ", ".join(f"'{w.name}'" for w in windows)
        out.append(Finding(
            "L2S111", f"fill kernel {spec.shape_text()} of window(s) {names} needs more than "
            f"the {room:,} B of shared memory per block of {device_profile.name}; {then} (the "
            f"profile's numbers are of the unfitted shape)", window_span(windows[0]),
            {"kernel": mode, "smem_bytes": spec.smem_bytes, "limit_bytes": room,
             "fitted": None if got is None else {"chunk": got.chunk, "stages": got.stages,
                                                 "smem_bytes": got.smem_bytes},
             "windows": [w.name for w in windows]}))
    return out


def check_unmeasured(run) -> list[Finding]:
    """L2S112: one finding naming the profile terms the prediction rests
    on that were not measured on the box (``unmeasured_terms`` at the
    schedule's TP degree, for the kernels its windows use); none for a
    schedule without windows or when every term was measured."""
    sched, device_profile = run.schedule, run.device_profile
    modes = set(_window_modes(run))
    if not modes:
        return []
    terms = unmeasured_terms(device_profile, sched.tp, modes)
    if not terms:
        return []
    span = sched.spans.get("device") or window_span(sched.windows[0])
    if not device_profile.is_measured:
        msg = (f"device profile {device_profile.name} is an estimate: none of the {len(terms)} "
               f"terms this prediction rests on was measured on the box")
    else:
        msg = (f"the prediction rests on {len(terms)} term(s) of {device_profile.name} "
               f"not measured on this box: {', '.join(terms)}")
    return [Finding("L2S112", msg, span, {"terms": terms, "tp": sched.tp})]
