"""Quantities every stage shares: size units, alignments, graph modes, cache
policies, and how sizes, layer lists and tables are written in reports.

Units: bytes (B); ``MB`` = 10^6 B, ``MiB`` = 2^20 B; times in microseconds
(us). Nothing here imports another l2sched module.
"""

from __future__ import annotations

from typing import Sequence

#: Size units a schedule may write: decimal (10^3 powers) and binary
#: (2^10 powers) multiples of a byte.
UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
}
MiB = UNITS["MiB"]

#: Alignment of a fill row's start address and granularity of its length,
#: bytes: the PTX ISA requires 16-byte aligned addresses and sizes that are
#: multiples of 16 for ``cp.async.bulk`` (PTX ISA 8.x, "cp.async.bulk").
ALIGN = 16

#: Granularity of a head/tail split when a tensor straddles a window's
#: budget, bytes: the head is rounded down to 4 KiB, as the hand-written
#: SM120 prefetcher did (docs/sources.md#sm120-prefetcher). A multiple of
#: ``ALIGN``, so every split point is a valid fill-row boundary.
SPLIT_GRANULARITY = 4096
assert SPLIT_GRANULARITY % ALIGN == 0

#: CUDA-graph modes a decode step runs in (vLLM's CUDAGraphMode, lower-cased,
#: with NONE called ``eager``): ``eager`` (Python runs every step), ``full``
#: (one FULL graph: Python runs once at capture, its kernels replay) and
#: ``piecewise`` (a breakable graph: Python runs at capture into the current
#: segment; docs/sources.md#vllm-graph-modes).
GRAPH_MODES = ("eager", "full", "piecewise")

#: L2 cache policies a fill may use (PTX ``createpolicy.fractional.L2::*``).
CACHE_POLICIES = ("evict_last", "evict_normal", "evict_first")

#: Fill kernels a schedule or device profile may name: ``bulk``
#: (``cp.async.bulk.prefetch.L2``), ``copy`` (TMA bulk copies into shared
#: memory), ``load`` (ordinary loads); see ``runtime.kernel``.
FILL_MODES = ("bulk", "copy", "load")


def format_size(nbytes: int) -> str:
    """Human text for a byte count, decimal units as in every report:
    ``52.56 MB`` (>= 10^6 B), ``8.2 KB`` (>= 10^3 B), else ``512 B``. Exact
    for any int >= 0 (integer arithmetic, halves rounded to even as
    ``format(float)`` does)."""
    if nbytes >= 10**6:
        return _fixed(nbytes, 10**6, 2) + " MB"
    if nbytes >= 10**3:
        return _fixed(nbytes, 10**3, 1) + " KB"
    return f"{nbytes} B"


def _fixed(value: int, unit: int, places: int) -> str:
    """``value / unit`` (``value`` >= 0) with ``places`` decimals, halves
    rounded to even."""
    scale = 10**places
    q, r = divmod(value * scale, unit)
    if 2 * r > unit or (2 * r == unit and q % 2):
        q += 1
    whole, frac = divmod(q, scale)
    return f"{whole}.{frac:0{places}d}"


def format_layers(layers: Sequence[int]) -> str:
    """Decoder-layer indices in the selector spelling: ``[0, 1, 2, 5]`` ->
    ``0..2, 5`` (sorted, runs of consecutive indices as ``lo..hi``)."""
    out, run = [], []
    for i in sorted(layers):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 window``, ``2 windows``, ``20,000 windows``: ``count`` (with
    thousands separators) and ``word`` in the number the count asks for
    (``many``: an irregular plural, e.g. ``plural(n, "info", "info")``)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def format_signed(value: float, spec: str = "+.1f") -> str:
    """``value`` formatted with ``spec`` (which should carry ``+``), never as
    a negative zero: a value that rounds to zero prints ``+0.0`` (or
    ``+0.0%``), not ``-0.0``."""
    text = format(value, spec)
    if text.startswith("-") and not any(c in "123456789" for c in text):
        text = "+" + text[1:]
    return text


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned text table, two spaces between columns, trailing blanks
    stripped; the first row is the header. Every row has the header's
    number of cells."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
                     for r in rows)
