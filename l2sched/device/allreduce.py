"""The all-reduce model of a device profile (``[allreduce.tpN]``:
``latency_us + bytes / bandwidth`` per TP degree) and its fit to
measurements (``l2sched profile --collectives N``, or the lab's ``python
-m lab bench tp-report --update-profile``; ``edit`` writes the fitted table
into the profile file). Units: bytes, us, GB/s =
10^9 B/s."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AllReduceModel:
    """All-reduce time at one TP degree: ``latency_us + bytes / bandwidth``,
    with ``busbw_gbps`` in GB/s (10^9 B/s): an effective per-message rate
    (message bytes / time), not NCCL's ``2(n-1)/n``-scaled bus bandwidth.
    ``measured``: ISO date (``YYYY-MM-DD``) of the measurement the numbers
    were fitted to, ``""`` for an ASSUMPTION; ``source``: where they come
    from (a result file)."""

    latency_us: float
    busbw_gbps: float
    measured: str = ""
    source: str = ""

    def time_us(self, nbytes: int) -> float:
        """Predicted all-reduce time (us) of a ``nbytes``-byte message."""
        return self.latency_us + nbytes / (self.busbw_gbps * 1e3)



def fit_allreduce(points, *, measured: str = "", source: str = "") -> AllReduceModel:
    """Fit ``time_us = latency_us + bytes / (busbw_gbps * 1e3)`` to measured
    all-reduce times.

    ``points``: ``(bytes, us)`` pairs (message bytes, measured time in us;
    at least two distinct sizes). The fit is least squares on the relative
    error (each point weighted by ``1 / us^2``), so 8 KB and 2 MB messages
    count alike. A negative intercept is refitted through the origin
    (latency 0). ``measured``/``source`` are copied into the result.
    Raises ``ValueError`` for fewer than two distinct sizes, a non-positive
    time or a fit without a positive bandwidth (time not growing with
    bytes)."""
    pts = [(float(b), float(t)) for b, t in points]
    if len({b for b, _ in pts}) < 2:
        raise ValueError("fit_allreduce needs measurements at two or more "
                         "message sizes")
    if any(t <= 0 or b < 0 for b, t in pts):
        raise ValueError("fit_allreduce: times must be > 0 us and bytes >= 0")
    w = [1.0 / (t * t) for _, t in pts]
    sw = sum(w)
    sx = sum(wi * b for wi, (b, _) in zip(w, pts))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts))
    sxx = sum(wi * b * b for wi, (b, _) in zip(w, pts))
    sxy = sum(wi * b * t for wi, (b, t) in zip(w, pts))
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det
    lat = (sy - slope * sx) / sw
    if lat < 0:
        lat, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError("fit_allreduce: the measured time does not grow with "
                         "the message size; no bandwidth can be fitted")
    return AllReduceModel(lat, 1.0 / (slope * 1e3), measured, source)


def allreduce_table(degree: int, model: AllReduceModel,
                    comments: tuple[str, ...] = ()) -> str:
    """The TOML text of ``[allreduce.tpDEGREE]`` for ``model`` (numbers
    rounded to 0.01 us / 0.1 GB/s), ``comments`` as ``#`` lines under the
    header."""
    lines = [f"[allreduce.tp{degree}]"] + [f"# {c}" for c in comments]
    lines += [f"latency_us = {model.latency_us:.2f}",
              f"busbw_gbps = {model.busbw_gbps:.1f}"]
    if model.measured:
        lines.append(f'measured = "{model.measured}"')
    if model.source:
        lines.append(f"source = {_toml_str(model.source)}")
    return "\n".join(lines) + "\n"


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
