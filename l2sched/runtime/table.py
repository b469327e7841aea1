"""The fill table: the rows ``(address, nbytes)`` of every issue of a plan in
one device tensor the fill kernel reads, with a host mirror.

Issue ``i`` owns rows ``[offsets[i], offsets[i+1])`` (one per byte range of
the issue; unbound rows are ``(0, 0)`` and fill nothing). CUDA graphs bake
the table's address in, so rows are updated in place: a later replay fills
the new addresses (weight reload).
"""

from __future__ import annotations

from typing import Sequence

from l2sched.compiler.plan import Plan


class FillTable:
    """Row layout and contents of ``plan``'s fill table. ``offsets``: row
    offset per issue (``len(plan.issues) + 1`` entries); ``rows``: the bound
    ``(address, nbytes)`` rows per issue; ``nbytes``: their byte total per
    issue; ``spans``: ``(begin, end)`` rows per issue, ``None`` for an issue
    without ranges. ``allocate`` creates the device tensor; until then only
    the host-side bookkeeping exists (so a plan can be bound on a CPU)."""

    def __init__(self, plan: Plan):
        self.offsets = [0]
        for wi in plan.issues:
            self.offsets.append(self.offsets[-1] + len(wi.ranges))
        self.spans = [(b, e) if e > b else None
                      for b, e in zip(self.offsets, self.offsets[1:])]
        self.rows: list[list[tuple[int, int]]] = [[] for _ in plan.issues]
        self.nbytes = [0] * len(plan.issues)
        self.dirty: set[int] = set()
        self.device_ptr = 0
        self._torch = None

    def clear(self) -> None:
        """Unbind every issue (all rows ``(0, 0)`` at the next ``flush``);
        the layout and the device tensor stay."""
        self.rows = [[] for _ in self.rows]
        self.nbytes = [0] * len(self.rows)
        self.dirty.update(range(len(self.rows)))

    def set(self, index: int, rows: Sequence[tuple[int, int]]) -> None:
        """Bind issue ``index`` to ``rows``; marks it dirty. Raises
        ``ValueError`` for more rows than the issue has ranges."""
        rows = [(int(a), int(n)) for a, n in rows]
        cap = self.offsets[index + 1] - self.offsets[index]
        if len(rows) > cap:
            raise ValueError(f"issue {index} has {cap} ranges, got {len(rows)} rows")
        self.rows[index] = rows
        self.nbytes[index] = sum(n for _, n in rows)
        self.dirty.add(index)

    def allocate(self, torch, device: int) -> int:
        """Create the int64 ``[rows, 2]`` device table (and its host mirror)
        on ``device``; returns its device address. Every bound issue is
        dirty afterwards (flushed by the next ``flush``)."""
        self._torch = torch
        n = max(self.offsets[-1], 1)
        # pageable, not pinned: the table changes only at bind/reload, and
        # pinned blocks returned to torch's host cache made a later capture
        # fail in its host-cache free (2-H200 bench, 4th M)
        self._host = torch.zeros((n, 2), dtype=torch.int64)
        self._table = torch.zeros((n, 2), dtype=torch.int64, device=device)
        self.device_ptr = self._table.data_ptr()
        self.dirty.update(i for i, rows in enumerate(self.rows) if rows)
        return self.device_ptr

    def flush(self, side) -> bool:
        """Copy the dirty issues' rows to the device table, ordered on the
        ``side`` stream after earlier fills (which may still read it).
        Returns False, changing nothing, while the current stream captures
        (a copy in a capture would replay every step)."""
        if not self.dirty:
            return True
        torch = self._torch
        if torch.cuda.is_current_stream_capturing():
            return False
        # Earlier fills may still read the table; the host mirror may still
        # be copied from: wait for the side stream (rare: bind and reload).
        side.synchronize()
        for i in sorted(self.dirty):
            b, e = self.offsets[i], self.offsets[i + 1]
            rows = self.rows[i] + [(0, 0)] * (e - b - len(self.rows[i]))
            if e > b:
                self._host[b:e] = torch.tensor(rows, dtype=torch.int64)
        with torch.cuda.stream(side):
            self._table.copy_(self._host)  # synchronous from pageable memory
        self.dirty.clear()
        return True
