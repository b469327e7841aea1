"""Fitting the all-reduce model of a device profile to measurements, and
writing it into the profile file (``l2sched bench tp-report
--update-profile``)."""

from __future__ import annotations

import os
from pathlib import Path

try:  # Python >= 3.11
    import tomllib as toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as toml  # type: ignore[no-redef]

from l2sched.errors import L2sInputError, source_lines
from l2sched.files import write_text_atomically
from l2sched.model.devices import (
    AllReduceModel,
    parse_device,
    profile_path,
    profile_table_header,
    read_profile_text,
)


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


def write_allreduce_model(name_or_path: str | os.PathLike, degree: int,
                          model: AllReduceModel,
                          comments: tuple[str, ...] = ()) -> Path:
    """Put ``model`` into the profile file as ``[allreduce.tpDEGREE]``:
    the existing table of that degree is replaced (its comment lines inside
    the table too; comments above the next table stay), or a new one is
    added after the last ``[allreduce.tpN]`` table. Other tables and
    comments are kept byte for byte. The new text is validated as a profile
    before it is written. Returns the path. Raises ``L2sInputError`` when
    the file cannot be read or the result does not load, ``ValueError`` for
    ``degree < 2``."""
    if degree < 2:
        raise ValueError(f"an all-reduce model needs a TP degree >= 2, got {degree}")
    path = profile_path(name_or_path)
    text = read_profile_text(path)
    lines = source_lines(text, keepends=True)
    headers = [i for i, ln in enumerate(lines) if profile_table_header(ln) is not None]
    block = source_lines(allreduce_table(degree, model, comments), keepends=True)

    def table_end(h: int) -> int:
        """End of the table at line ``h``: the next header, less the blank
        and comment lines right above it (they belong to the next table)."""
        nxt = next((i for i in headers if i > h), len(lines))
        while nxt > h + 1 and (not lines[nxt - 1].strip()
                               or lines[nxt - 1].lstrip().startswith("#")):
            nxt -= 1
        return nxt

    want = f"allreduce.tp{degree}"
    here = next((i for i in headers if profile_table_header(lines[i]) == want), None)
    if here is not None:
        lines[here:table_end(here)] = block
    else:
        ars = [i for i in headers if profile_table_header(lines[i]).startswith("allreduce.tp")]
        at = table_end(ars[-1]) if ars else len(lines)
        if at and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        lines[at:at] = block
    new = "".join(lines)
    try:
        parse_device(toml.loads(new), str(path), new)
    except toml.TOMLDecodeError as e:  # pragma: no cover - we wrote valid TOML
        raise L2sInputError(f"{path}: the updated profile is not valid TOML: {e}") from None
    write_text_atomically(path, new)
    return path
