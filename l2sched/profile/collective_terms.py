"""Writing the collective terms a ``bench tp`` result measured into a device
profile: ``[allreduce.tpW]`` (``fit`` of the standalone all-reduces,
``update_profile``) and each ``fill.MODE.allreduce_slowdown``
(``update_profile_extras``), both applied to a copy of the profile text
first (``collective_terms_text``) so that ``bench tp-report
--update-profile`` and ``l2sched profile --collectives`` write a profile
once or not at all. Units: us, bytes. torch-free.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from l2sched.bench.options import FIT_MAX_BYTES
from l2sched.profile.tp_interference import allreduce_slowdowns
from l2sched.profile.tp_interference import median_present as _med
from l2sched.profile.tp_interference import write_allreduce_slowdown
from l2sched.device import fit_allreduce, write_allreduce_model
from l2sched.device import load_device, profile_path


def allreduce_points(d: dict, *, max_bytes: int | None = FIT_MAX_BYTES,
                     source: str = "graph") -> list[tuple[int, float]]:
    """``(bytes, us)`` per standalone all-reduce message of result ``d``: the
    median over ranks of each rank's per-call median (``source`` =
    ``graph``: inside a CUDA graph, falling back to eager when a rank has no
    graph timing; ``eager``), for messages of at most ``max_bytes`` bytes
    (``None``: all)."""
    per: dict[int, list[float]] = {}
    for r in d["ranks"]:
        for row in r["allreduce"]:
            if max_bytes is not None and row["bytes"] > max_bytes:
                continue
            s = row.get("graph_us") if source == "graph" else None
            s = s or row["eager_us"]
            per.setdefault(row["bytes"], []).append(s["median"])
    return sorted((b, _med(v)) for b, v in per.items())


def fit(d: dict, result_path: str, *, max_bytes: int | None = FIT_MAX_BYTES,
        source: str = "graph"):
    """The fitted ``AllReduceModel`` of result ``d`` (``allreduce_points``),
    dated with the result's date, ``source`` naming ``result_path``, the
    world size and the backend; and the maximum relative error of the fit
    over the points. Raises ``ValueError`` when it cannot be fitted (see
    ``devices.fit_allreduce``)."""
    pts = allreduce_points(d, max_bytes=max_bytes, source=source)
    m = fit_allreduce(pts, measured=d["date"], source=result_path)
    err = max(abs(m.time_us(b) - t) / t for b, t in pts)
    return m, pts, err


def update_profile(d: dict, result_path: str, profile: str, *,
                   max_bytes: int | None = FIT_MAX_BYTES, source: str = "graph"):
    """Fit result ``d`` and write ``[allreduce.tpW]`` (W = ``d["world_size"]``)
    into ``profile`` (device name or ``.toml`` path). Returns ``(model,
    path)``. Raises ``ValueError`` for a dry (CPU) result or an impossible
    fit, ``L2sInputError`` for an unreadable profile."""
    if d.get("dry") or d.get("backend") != "nccl":
        raise ValueError("refusing to write a CPU (dry, gloo) measurement into a "
                         "device profile")
    m, pts, err = fit(d, result_path, max_bytes=max_bytes, source=source)
    g = d["ranks"][0]["machine"]
    comments = (
        f"measured {d['date']} by `l2sched bench tp` on {d['world_size']} x "
        f"{g.get('gpu', '?')}, NCCL {g.get('nccl', '?')}, NVLink multicast off",
        f"({source} timing); weighted least-squares fit over {len(pts)} messages "
        f"of {pts[0][0]}..{pts[-1][0]} B, max error {err:.1%}",
    )
    path = write_allreduce_model(profile, d["world_size"], m, comments)
    return m, path


def update_profile_extras(d: dict, result_path: str, profile: str, *,
                          max_bytes: int | None = FIT_MAX_BYTES):
    """Write the measured collective interference of result ``d`` as
    ``allreduce_slowdown`` into the ``[fill.MODE]`` tables of ``profile``
    (``tp_interference.allreduce_slowdowns`` with that profile's fill
    kernels). Returns ``(path, written, skipped, notes)``
    (``tp_interference.write_allreduce_slowdown``; nothing written when the
    result has no interference measurement; a mode whose messages no
    slowdown explains is skipped with the reason; ``notes``: written modes
    with some messages left out). Raises ``ValueError``
    for a dry (CPU) result, ``L2sInputError`` for an unreadable profile."""
    if d.get("dry") or d.get("backend") != "nccl":
        raise ValueError("refusing to write a CPU (dry, gloo) measurement into a "
                         "device profile")
    device_profile = load_device(str(profile_path(profile)))
    sl = allreduce_slowdowns(d, max_bytes, device_profile.fill_modes)
    g = d["ranks"][0]["machine"]
    note = (f"l2sched bench tp {d['date']}, {result_path}: {d['world_size']} x "
            f"{g.get('gpu', '?')}, NCCL {g.get('nccl', '?')}, p2p {d.get('p2p', 'on')}; "
            f"all-reduce with a concurrent {d.get('ar_fill_bytes', 0) / 1e6:g} MB fill, "
            f"median over messages")
    path, written, skipped = write_allreduce_slowdown(
        profile, {m: x["slowdown"] for m, x in sl.items()}, note)
    notes = {m: f"{x['unexplained']} of {x['unexplained'] + x['messages']} messages left "
                f"out (no slowdown explains their extra)"
             for m, x in sl.items() if x["unexplained"] and m in written}
    measured = {m for r in d["ranks"] for row in (r.get("allreduce_fill") or {}).get("rows", [])
                for m in row.get("modes", {})}
    for m in sorted(measured - set(sl) - set(skipped)):
        skipped[m] = "no message's extra is explained by a slowdown"
    return path, written, skipped, notes


#: A line of the additive collective term that ``allreduce_slowdown`` replaced.
_OLD_EXTRA = re.compile(r"^[ \t]*allreduce_extra_us[ \t]*=.*(?:\r?\n|\Z)", re.M)


def collective_terms_text(d: dict, text: str, source_path: str, *,
                          max_bytes: int | None = FIT_MAX_BYTES, source: str = "graph"
                          ) -> tuple[str, list[str]]:
    """``(new profile text, lines saying what was written)``: profile ``text``
    with ``[allreduce.tpW]`` (``update_profile``) and each
    ``fill.MODE.allreduce_slowdown`` (``update_profile_extras``) from result
    ``d``, ``source_path`` naming the result. Both are applied to a copy, so
    the caller writes the profile once or not at all. Lines of the old
    additive key ``allreduce_extra_us`` are removed (a profile that has them
    does not load). Every other byte is kept. Raises ``ValueError`` for a CPU
    (dry) result or an impossible fit, ``L2sInputError`` when ``text`` is
    not a valid profile."""
    text, old = _OLD_EXTRA.subn("", text)
    lines = [f"removed {old} allreduce_extra_us line(s) (replaced by allreduce_slowdown)"
             ] if old else []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(text, encoding="utf-8")
        m, _ = update_profile(d, source_path, str(path), max_bytes=max_bytes, source=source)
        lines.append(f"[allreduce.tp{d['world_size']}] latency_us = {m.latency_us:.2f}, "
                     f"busbw_gbps = {m.busbw_gbps:.1f} (measured {m.measured})")
        _, written, skipped, notes = update_profile_extras(d, source_path, str(path),
                                                           max_bytes=max_bytes)
        lines += [f"[fill.{mode}] allreduce_slowdown = {s:.3f}"
                  + (f" ({notes[mode]})" if mode in notes else "")
                  for mode, s in written.items()]
        lines += [f"[fill.{mode}] allreduce_slowdown not written: {why}"
                  for mode, why in skipped.items()]
        if not written and not skipped:
            lines.append("allreduce_slowdown not written: the result has no all-reduce "
                         "with a fill (bench tp --ar-fill-mb 0, or it failed)")
        return path.read_text(encoding="utf-8"), lines
