"""The lower confidence bound of ``l2sched fit``: pessimistic variants of a
device profile, and the noise floor a fitted gain must beat.

The lint's model predicts one step-time gain from one device profile. A
measured profile (``l2sched profile``) records the spread of some of its
numbers in ``[measured]`` (``median``, ``p10``, ``p90`` of the probe); the
fit propagates them by simulating the same schedule on *variants* of the
profile and taking, per decode-token count M, the smallest gain
(``Variant``, ``profile_variants``):

- ``median``: the profile as written;
- ``low``: every number whose pessimistic direction is known is moved to
  its pessimistic end (``DIRECTIONAL``): at the measured quantile when the
  profile has a spread for it (value x p10/median or p90/median), else by the
  fixed factor of ``DIRECTIONAL`` (an ASSUMPTION, not a measurement); numbers
  whose direction is not known (``AMBIGUOUS``: a slower device slows the
  no-prefetch step too) are moved to their p10;
- ``high``: as ``low`` but the ``AMBIGUOUS`` numbers at their p90; only made
  when the profile has a spread for one of them.

The bound is "measured" only as far as the spreads are: ``BoundInfo`` lists
which numbers came from ``[measured]`` and which got the fixed pessimism, and
the fitted schedule's header says so.

Noise floor (``l2sched.lint.noise.noise_floor_us``, the fit's, shared with the lint's L2S110 and the vLLM plugin's gate): the A/A floors of the out-of-sample
validation run on the lent H200, ``benchmarks/results/h200-2026-12-01-
validation-2.md`` ("Noise floor per M from the A/A arm (90th percentile of
|A/A gain| over resampled rounds): M=1: 3.9 us, M=4: 17.2 us, M=16: 17.3 us,
M=64: 31.1 us"); other M take the floor of the nearest measured M in log(M).

Units: microseconds (us), bytes (B), GB/s = 10^9 B/s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from l2sched.device.provenance import field_origins, generic_key
from l2sched.device import DeviceProfile

#: Numbers whose pessimistic direction for a prefetch gain is known:
#: ``[measured]`` key (``MODE`` = every fill kernel) -> (direction,
#: fixed factor used when the profile has no p10/p90 for it, what it is).
#: ``low`` means a smaller value gives a smaller gain. The factors are
#: ASSUMPTIONS (no measured spread exists for these numbers); they are of the
#: order of the spread between fill sizes in the H200 profile's ``landed``
#: table (0.86-0.91 for copy at 16-32 MB).
DIRECTIONAL: dict[str, tuple[str, float, str]] = {
    "fill.MODE.effect": ("low", 0.8, "fill landed fraction / effect"),
    "fill.MODE.gbps": ("low", 0.9, "fill landed rate"),
    "fill.MODE.launch_us": ("high", 1.25, "fill launch cost"),
    "fill.MODE.slowdown": ("high", 1.5, "fill slowdown of latency-bound kernels"),
    "fill.MODE.gemm_slowdown": ("high", 1.5, "fill slowdown of L2-resident GEMMs"),
    "fill.MODE.attention_slowdown": ("high", 1.5, "fill slowdown of attention cores"),
    "fill.MODE.routing_slowdown": ("high", 1.5, "fill slowdown of routing and top-k"),
    "fill.MODE.allreduce_slowdown": ("high", 1.5, "fill slowdown of a running all-reduce"),
    "ops.hot_us": ("high", 0.25, "op hot (L2-resident) times"),
    "bandwidth.gemm_l2_gbps": ("low", 0.9, "GEMM rate from L2"),
    "l2.evict_last_protected_bytes": ("low", 0.8, "evict_last bytes surviving a stream"),
    "l2.evict_normal_survival": ("low", 0.8, "evict_normal survival"),
    "l2.effective_bytes": ("low", 0.9, "effective L2 capacity"),
    "allreduce.latency_us": ("low", 0.8, "all-reduce time (idle time for fills)"),
}
#: A fill kernel without a measured slowdown (0) still gets this much in the
#: pessimistic variants (an ASSUMPTION: the H200 kernels measured 0.51-0.70).
MIN_PESSIMISTIC_SLOWDOWN = 0.1
#: Numbers whose effect on the gain has no known sign (they change the
#: no-prefetch step as well); moved only by a measured spread, to p10 in the
#: ``low`` variant and p90 in ``high``. ``[measured]`` key -> attribute.
AMBIGUOUS: dict[str, str] = {
    "bandwidth.dram_read_gbps": "dram_read_gbps",
    "bandwidth.gemm_dram_gbps": "gemm_dram_gbps",
    "bandwidth.gemm_fixed_us": "gemm_fixed_us",
    "latency.kernel_gap_us": "kernel_gap_us",
    "latency.small_kernel_us": "small_kernel_us",
    "latency.attention_core_us": "attention_core_us",
}


@dataclass(frozen=True)
class Variant:
    """One device profile the fit simulates: ``name`` (``median``, ``low``,
    ``high``) and the ``device_profile`` (``DeviceProfile``)."""

    name: str
    device_profile: DeviceProfile


@dataclass
class BoundInfo:
    """How the bound was made: ``measured`` lists ``key: p10|p90`` of the
    numbers moved by a measured spread, ``fixed`` the numbers moved by a
    fixed factor (``key x factor``); ``from_measurements`` is False when the
    profile is an estimate (no ``[provenance]``) or no spread was used."""

    measured: list = field(default_factory=list)
    fixed: list = field(default_factory=list)
    profile_measured: bool = False

    @property
    def from_measurements(self) -> bool:
        """True when the profile was measured and some spread came from it."""
        return self.profile_measured and bool(self.measured)


def _ends(device_profile: DeviceProfile, key: str) -> tuple[float, float, str] | None:
    """``(low, high, what)`` of the run-to-run spread recorded for field
    ``key``: its ``[measured]`` p10/p90 and its ``[origin]`` entry's
    p10/p90 and ``repeats`` together (``what``: ``p10/p90``, ``repeats``
    or both); None without one."""
    vals, what = [], []
    m = (device_profile.measured or {}).get(key) or {}
    if all(isinstance(m.get(k), (int, float)) for k in ("p10", "p90")):
        vals += [m["p10"], m["p90"]]
        what.append("p10/p90")
    o = field_origins(device_profile).get(key)
    if o is not None and o.spread() is not None:
        vals += list(o.spread())
        what.append("repeats" if o.repeats else "p10/p90")
    if len(vals) < 2:
        return None
    return min(vals), max(vals), " and ".join(dict.fromkeys(what))


def _factor(device_profile: DeviceProfile, key: str, info: BoundInfo, value: float,
            shown: str | None = None) -> float:
    """The pessimistic factor (corner / ``value``) of a ``DIRECTIONAL``
    number (``key`` may name one fill kernel: ``fill.copy.effect``): the
    fixed factor of ``DIRECTIONAL`` applied to the pessimistic end of the
    recorded run-to-run spread (``_ends``: the low end for a number whose
    smaller value is pessimistic, the high end otherwise, or the value
    itself when it lies beyond), else to the value. So two profiles of one
    box whose values differ within their recorded spread get the same
    corner."""
    direction, fixed, _what = DIRECTIONAL[generic_key(key)]
    ends = _ends(device_profile, key)
    label = shown or key
    info.fixed.append(f"{label} x{fixed:g}")
    if ends is None or not value:
        return fixed
    lo, hi, what = ends
    end = min(lo, value) if direction == "low" else max(hi, value)
    info.measured.append(f"{label}: {'low' if direction == 'low' else 'high'} end of "
                         f"{what}")
    return fixed * end / value


def _pessimistic_fill(device_profile: DeviceProfile, mode: str, fm, info: BoundInfo):
    """The ``FillMode`` ``fm`` of kernel ``mode`` at its pessimistic end."""
    eff = _factor(device_profile, f"fill.{mode}.effect", info, fm.effect)
    slow = max(fm.slowdown * _factor(device_profile, f"fill.{mode}.slowdown", info,
                                     fm.slowdown),
               MIN_PESSIMISTIC_SLOWDOWN)
    return dataclasses.replace(
        fm, effect=min(1.0, fm.effect * eff),
        landed=tuple((mb, min(1.0, y * eff)) for mb, y in fm.landed),
        gbps=fm.gbps * _factor(device_profile, f"fill.{mode}.gbps", info, fm.gbps),
        launch_us=fm.launch_us * _factor(device_profile, f"fill.{mode}.launch_us", info,
                                         fm.launch_us),
        slowdown=slow,
        gemm_slowdown=None if fm.gemm_slowdown is None else max(
            fm.gemm_slowdown * _factor(device_profile, f"fill.{mode}.gemm_slowdown", info,
                                       fm.gemm_slowdown),
            MIN_PESSIMISTIC_SLOWDOWN),
        **{k: _pessimistic_class(device_profile, mode, fm, k, info)
           for k in ("attention_slowdown", "routing_slowdown")},
        allreduce_slowdown=fm.allreduce_slowdown * _factor(
            device_profile, f"fill.{mode}.allreduce_slowdown", info, fm.allreduce_slowdown))


def _pessimistic_class(device_profile: DeviceProfile, mode: str, fm, key: str, info: BoundInfo):
    """The pessimistic value of fill kernel ``mode``'s class slowdown
    ``key`` (``attention_slowdown``, ``routing_slowdown``): None where the
    profile writes none (the class takes the pessimistic ``slowdown``),
    else as ``slowdown``'s (its fixed factor, at least
    ``MIN_PESSIMISTIC_SLOWDOWN``)."""
    v = getattr(fm, key)
    if v is None:
        return None
    return max(v * _factor(device_profile, f"fill.{mode}.{key}", info, v),
               MIN_PESSIMISTIC_SLOWDOWN)


def _pessimistic_ops(device_profile: DeviceProfile, info: BoundInfo) -> dict:
    """Measured op times (per model, as ``DeviceProfile.ops``) with each hot
    time moved toward its cold time by the ``ops.hot_us`` factor of the
    cold - hot gap (and each step gap shrunk by it)."""
    if not device_profile.ops:
        return {}
    frac = DIRECTIONAL["ops.hot_us"][1]
    info.fixed.append(f"op hot times + {frac:g} x (cold - hot)")
    out: dict = {}
    for model, table in device_profile.ops.items():
        for key, t in table.items():
            hot = tuple(h + frac * max(0.0, c - h) for c, h in zip(t.cold_us, t.hot_us))
            gaps = tuple((1 - frac) * g for g in t.step_gap_us)  # the step's gap likewise
            out.setdefault(model, {})[key] = dataclasses.replace(t, hot_us=hot,
                                                                 step_gap_us=gaps)
    return out


def pessimistic_profile(device_profile: DeviceProfile,
                        corner: str = "low") -> tuple[DeviceProfile, BoundInfo]:
    """``device_profile`` (a ``DeviceProfile``) with every number of
    ``DIRECTIONAL`` at its pessimistic end and the ``AMBIGUOUS`` ones at
    their p10 (``corner="low"``) or p90 (``"high"``) where measured; and
    the ``BoundInfo`` saying which numbers moved how."""
    info = BoundInfo(profile_measured=device_profile.is_measured)
    fills = {mode: _pessimistic_fill(device_profile, mode, fm, info)
             for mode, fm in sorted(device_profile.fill_modes.items())}
    changes: dict = {"fill_modes": fills, "ops": _pessimistic_ops(device_profile, info)}
    for key, attr in (("bandwidth.gemm_l2_gbps", "gemm_l2_gbps"),
                      ("l2.evict_normal_survival", "evict_normal_survival")):
        v = getattr(device_profile, attr)
        changes[attr] = v * _factor(device_profile, key, info, v)
    changes["evict_last_protected_bytes"] = int(
        device_profile.evict_last_protected_bytes
        * _factor(device_profile, "l2.evict_last_protected_bytes", info,
                  device_profile.evict_last_protected_bytes))
    if device_profile.effective_l2_bytes:
        changes["effective_l2_bytes"] = int(
            device_profile.effective_l2_bytes * _factor(device_profile, "l2.effective_bytes", info,
                                                device_profile.effective_l2_bytes))
    ar = _factor(device_profile, "allreduce.latency_us", info, 0.0, "allreduce.tpN.latency_us")
    changes["allreduce"] = {tp: dataclasses.replace(m, latency_us=m.latency_us * ar)
                            for tp, m in device_profile.allreduce.items()}
    for key, attr in AMBIGUOUS.items():
        ends = _ends(device_profile, key)
        if ends is not None:
            v = getattr(device_profile, attr)
            info.measured.append(f"{key}: {'low' if corner == 'low' else 'high'} end of "
                                 f"{ends[2]}")
            changes[attr] = min(ends[0], v) if corner == "low" else max(ends[1], v)
    return dataclasses.replace(device_profile, **changes), info


def profile_variants(device_profile: DeviceProfile) -> tuple[list[Variant], BoundInfo]:
    """The profiles the bound is the minimum over: ``median`` (``device_profile``),
    ``low``, and ``high`` when the profile has a measured spread for an
    ``AMBIGUOUS`` number; with the ``BoundInfo`` of ``low``."""
    low_device_profile, info = pessimistic_profile(device_profile, "low")
    out = [Variant("median", device_profile), Variant("low", low_device_profile)]
    if any(_ends(device_profile, k) is not None for k in AMBIGUOUS):
        out.append(Variant("high", pessimistic_profile(device_profile, "high")[0]))
    return out, info
