"""Collective interference in ``python -m lab bench tp-report``: the table of the
all-reduce timed alone and with a concurrent fill of each fill kernel
(``tp_allreduce.measure_allreduce_fill``), the per-mode slowdown the lint
reads (``allreduce_slowdowns``) and its write into a device profile
(``write_allreduce_slowdown``: ``allreduce_slowdown`` in each
``[fill.MODE]`` table, a small text edit; every other byte of the file is
kept).

``allreduce_slowdown`` of a mode: the lint (``lint.simulate``) runs a
collective at ``1 / (1 + s)`` of its rate while a fill of that kernel reads
device memory, so a fill costs a collective in proportion to their overlap
(a 5 MB fill beside an all-reduce costs it less than a 30 MB one). ``s`` is
the value for which the lint's own picture of the measurement (the fill's
launch, then its ``bytes / gbps`` read, beside the all-reduce of the
measured alone time) reproduces the measured extra
(``device.overlap.slowdown_for_extra``), per message of at most ``max_bytes`` (the
decode sizes, ``--tokens``; each figure the median over ranks of the rank's
median), then the median over those messages. Units: us, bytes. torch-free.
"""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

try:  # Python >= 3.11
    import tomllib as toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as toml  # type: ignore[no-redef]

from l2sched.errors import L2sInputError, source_lines
from l2sched.files import write_text_atomically
from l2sched.device import (parse_device, profile_path, profile_table_header,
                                   read_profile_text)
from l2sched.device import slowdown_for_extra

_KEY = re.compile(r"^\s*allreduce_slowdown\s*=")


def median_present(xs):
    """The median of the entries of ``xs`` that are not None; None when
    there are none (a rank that could not measure a figure)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None



def fill_rows(d: dict) -> dict:
    """``{bytes: {tokens, alone, modes: {mode: {with, extra, p10, p90}}}}``:
    each figure the median over ranks of the rank's per-message stat (us);
    messages a rank could not measure are left out."""
    per: dict = {}
    for r in d["ranks"]:
        for row in (r.get("allreduce_fill") or {}).get("rows", []):
            if "error" in row:
                continue
            p = per.setdefault(row["bytes"], {"tokens": row["tokens"], "alone": [],
                                              "modes": {}})
            p["alone"].append(row["alone_us"]["median"])
            for m, x in row["modes"].items():
                q = p["modes"].setdefault(m, {"with": [], "extra": [], "p10": [], "p90": []})
                q["with"].append(x["with_fill_us"]["median"])
                for k in ("extra", "p10", "p90"):
                    q[k].append(x["extra_us"]["median" if k == "extra" else k])
    return {b: {"tokens": p["tokens"], "alone": median_present(p["alone"]),
                "modes": {m: {k: median_present(v) for k, v in q.items()}
                          for m, q in sorted(p["modes"].items())}}
            for b, p in sorted(per.items())}


def allreduce_slowdowns(d: dict, max_bytes: int | None, fill_modes: dict) -> dict:
    """``mode -> {slowdown, messages, unexplained}`` (see the module
    docstring) over the messages of at most ``max_bytes`` bytes (``None``:
    all), for the modes of ``fill_modes`` (mode -> ``FillMode``: its
    ``launch_us`` and ``gbps`` give the fill's launch and read time).
    ``unexplained``: messages ``slowdown_for_extra`` could not explain (left
    out; a mode with none explained is left out)."""
    fill_bytes = next((r["allreduce_fill"]["fill_bytes"] for r in d["ranks"]
                       if r.get("allreduce_fill")), 0)
    per: dict[str, list] = {}
    lost: dict[str, int] = {}
    for b, row in fill_rows(d).items():
        if max_bytes is not None and b > max_bytes:
            continue
        for m, x in row["modes"].items():
            fm = fill_modes.get(m)
            if fm is None or x["extra"] is None or row["alone"] is None:
                continue
            s = slowdown_for_extra(x["extra"], row["alone"], fm.launch_us,
                                   fill_bytes / (fm.gbps * 1e3))
            if s is None:
                lost[m] = lost.get(m, 0) + 1
            else:
                per.setdefault(m, []).append(s)
    return {m: {"slowdown": statistics.median(xs), "messages": len(xs),
                "unexplained": lost.get(m, 0)} for m, xs in sorted(per.items())}


def fill_lines(d: dict) -> list[str]:
    """The markdown table of the interference measurement (none when the
    result has none)."""
    rows = fill_rows(d)
    info = next((r.get("allreduce_fill") for r in d["ranks"] if r.get("allreduce_fill")),
                None)
    if not info:
        return []
    modes = sorted({m for row in rows.values() for m in row["modes"]})
    out = ["## All-reduce with a concurrent fill (collective interference), us", "",
           f"The (M, hidden) bf16 all-reduce inside a CUDA graph, alone and with a "
           f"{info['fill_bytes'] / 1e6:g} MB fill of each fill kernel (the profile's "
           f"launch shapes, policy {info['policy']}) forked onto the side stream right "
           f"before it, on every rank; each replay behind an L2 flush, variants "
           f"interleaved, {info['iters']} rounds. Extra = with fill - alone, per round: "
           "median (p10-p90); every figure the median over ranks."
           + (f" {info['dry_note']}." if info.get("dry_note") else ""), ""]
    errs = {m: x["error"] for m, x in info["modes"].items() if x.get("error")}
    if info.get("error"):
        return out + [f"Not measured: {info['error']}.", ""]
    if errs:
        out += ["Not measured: " + "; ".join(f"{m}: {e}" for m, e in errs.items()) + ".",
                ""]
    out += ["| M | bytes | alone | " + " | ".join(f"{m}: with fill | {m}: extra"
                                                  for m in modes) + " |",
            "|---|---|---|" + "---|---|" * len(modes)]
    for b, row in rows.items():
        cells = []
        for m in modes:
            x = row["modes"].get(m)
            cells += (["-", "-"] if not x else
                      [_n(x["with"]), f"{_n(x['extra'], '+.1f')} ({_n(x['p10'], '+.1f')}"
                                      f"..{_n(x['p90'], '+.1f')})"])
        out.append(f"| {row['tokens']} | {b} | {_n(row['alone'])} | " + " | ".join(cells)
                   + " |")
    out.append("")
    return out


def _n(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def write_allreduce_slowdown(name_or_path: str | os.PathLike, slowdowns: dict,
                             comment: str = "") -> tuple[Path, dict, dict]:
    """Set ``allreduce_slowdown`` (fraction, rounded to 0.001, clamped to the
    profile's 0..100) in the ``[fill.MODE]`` table of each mode of
    ``slowdowns`` (mode -> fraction): an existing ``allreduce_slowdown``
    line is replaced, else a line is added
    after the table's last key line; ``comment`` goes after it as ``#``
    text. Every other byte of the file is kept. A mode without a
    ``[fill.MODE]`` table is skipped. The new text is validated as a profile
    (and every written value read back) before it is written. Returns
    ``(path, written {mode: fraction}, skipped {mode: why})``. Raises
    ``L2sInputError`` when the file cannot be read or the result does not
    load."""
    path = profile_path(name_or_path)
    text = read_profile_text(path)
    note = " ".join(comment.split())
    written, skipped = {}, {}
    for mode, frac in sorted(slowdowns.items()):
        value = round(min(100.0, max(0.0, float(frac))), 3)
        lines = source_lines(text, keepends=True)
        heads = [(i, name) for i, ln in enumerate(lines)
                 if (name := profile_table_header(ln)) is not None]
        h = next((i for i, name in heads if name == f"fill.{mode}"), None)
        if h is None:
            skipped[mode] = f"no [fill.{mode}] table"
            continue
        end = next((i for i, _ in heads if i > h), len(lines))
        body = range(h + 1, end)
        at = next((i for i in body if _KEY.match(lines[i])), None)
        if at is None:
            last = max((i for i in body if lines[i].strip()
                        and not lines[i].lstrip().startswith("#")), default=h)
            if not lines[last].endswith(("\n", "\r")):
                lines[last] += "\n"
            eol = lines[last][len(lines[last].rstrip("\r\n")):]
            at = last + 1
            lines.insert(at, eol)
        eol = lines[at][len(lines[at].rstrip("\r\n")):] or "\n"
        lines[at] = (f"allreduce_slowdown = {value:.3f}" + (f"  # {note}" if note else "")
                     + eol)
        text = "".join(lines)
        written[mode] = value
    try:
        device_profile = parse_device(toml.loads(text), str(path), text)
    except toml.TOMLDecodeError as e:  # pragma: no cover - we wrote valid TOML
        raise L2sInputError(f"{path}: the updated profile is not valid TOML: {e}") from None
    bad = [m for m, v in written.items() if device_profile.fill_modes[m].allreduce_slowdown != v]
    if bad:  # pragma: no cover - the key landed outside its table
        raise L2sInputError(f"{path}: allreduce_slowdown of {', '.join(bad)} did not read "
                            f"back")
    if written:
        write_text_atomically(path, text, in_place=True)  # the profile read above
    return path, written, skipped
