"""Deterministic timing and L2-residency simulation of a step graph.

Each node runs in phases, in order:

- ``fixed`` (us): small kernels (``small_kernel_us``), attention cores
  (``attention_core_us``), all-reduces (the profile's collective model on a
  ``tokens x hidden x 2``-byte message), a GEMM's fixed cost, a fill's launch;
- ``l2`` (bytes): weight bytes a fill made resident, read at ``gemm_l2_gbps``
  (not shared);
- ``dram`` (bytes): bytes read from device memory. All nodes in this phase at
  the same time share ``dram_read_gbps`` by water-filling, each capped at its
  own rate (``gemm_dram_gbps`` for GEMMs and the expert stream, ``fill_gbps``
  for fills).

A node starts when all predecessors finished plus the edge ``delay``; a
same-stream edge between two kernels that both run adds the device's
``kernel_gap_us``. Its L2 hits are computed when it starts, from the fills'
progress at that instant, so a late fill turns into device-memory reads.

Residency: fills of policy ``evict_last`` are protected up to
``DeviceProfile.protected_bytes`` (the set-aside, or the measured
no-set-aside figure). Whenever a non-fill node finishes having read ``D``
bytes from device memory, the landed-but-unconsumed fill bytes above that
protection lose ``min(1, D / (L2 - protected))`` of themselves (a stream as
large as the unprotected L2 flushes them). Other policies are unprotected and
lose ``min(1, D / L2) * (1 - evict_normal_survival)``.

``simulate`` returns a ``SimResult``; times are us from the step start.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .graph import GEMM_CLASSES, StepGraph

_EPS = 1e-9


@dataclass
class NodeTiming:
    """Simulated timing of one node: ``start``/``finish`` (us);
    ``dram_start``/``dram_end`` the device-memory phase (None without one);
    ``read_bytes`` weight bytes it reads, ``hit_bytes`` of them from L2,
    ``late_bytes`` of them still in flight in a fill when it started;
    ``alone_dram_us`` the memory phase's time without contention;
    ``late`` lists ``(fill id, bytes)`` in flight at start;
    ``hits_by_fill`` maps a fill id to ``(bytes hit in L2, bytes of it that
    had landed)``."""

    start: float = 0.0
    finish: float = 0.0
    dram_start: float | None = None
    dram_end: float | None = None
    dram_bytes: float = 0.0
    read_bytes: int = 0
    hit_bytes: float = 0.0
    late_bytes: float = 0.0
    alone_dram_us: float = 0.0
    late: list = field(default_factory=list)
    hits_by_fill: dict = field(default_factory=dict)

    @property
    def contention_us(self) -> float:
        """Extra time (us) of the memory phase over running alone."""
        if self.dram_start is None:
            return 0.0
        return max(0.0, (self.dram_end - self.dram_start) - self.alone_dram_us)


@dataclass
class SimResult:
    """Per-node ``timing``; per-fill ``fill_bytes``; ``end`` = when the
    forward's join finished (us)."""

    timing: dict[str, NodeTiming]
    fill_bytes: dict[str, int]
    end: float


class _FillState:
    __slots__ = ("total", "landed", "consumed", "survive", "policy")

    def __init__(self, total: int, policy: str):
        self.total = total
        self.landed = 0.0
        self.consumed = 0.0
        self.survive = 1.0
        self.policy = policy

    def pending(self) -> float:
        return max(0.0, self.landed - self.consumed) * self.survive


def _share(caps: list[float], total: float) -> list[float]:
    """Water-filling: split ``total`` over consumers capped at ``caps``."""
    order = sorted(range(len(caps)), key=lambda i: caps[i])
    out = [0.0] * len(caps)
    left, k = total, len(caps)
    for i in order:
        give = min(caps[i], left / k)
        out[i] = give
        left -= give
        k -= 1
    return out


def simulate(sg: StepGraph, device, *, tp: int, tokens: int, hidden: int,
             policy: str = "evict_last", set_aside: int = 0,
             measured: dict | None = None) -> SimResult:
    """Simulate ``sg`` on ``device`` (``DeviceProfile``).

    ``tp``: TP degree (all-reduce model); ``tokens``: decode tokens;
    ``hidden``: hidden size (all-reduce message = ``tokens * hidden * 2``
    bytes); ``policy``/``set_aside``: the schedule's cache policy and
    set-aside bytes (-1 = device maximum); ``measured``: ``(layer kind, op)
    -> us`` durations from a profiler trace (``calibrate``), which replace
    the modeled time of those ops (memory phases scaled to match)."""
    g = sg.graph
    measured = measured or {}
    bw_dram = device.dram_read_gbps * 1e3  # bytes per us
    gemm_dram = device.gemm_dram_gbps * 1e3
    gemm_l2 = device.gemm_l2_gbps * 1e3
    fill_bw = device.fill_gbps * 1e3
    protected = device.protected_bytes(set_aside, policy)
    l2 = device.l2_bytes
    ar_us = device.allreduce_us(tp, tokens * hidden * 2)

    order = {v: i for i, v in enumerate(g.nodes)}
    waiting = {v: g.in_degree(v) for v in g.nodes}
    ready_at = {v: 0.0 for v in g.nodes}
    timing = {v: NodeTiming() for v in g.nodes}
    fills: dict[str, _FillState] = {}
    fill_bytes: dict[str, int] = {}
    consumed_chunk: dict[tuple[str, int], float] = {}
    heap = [(0.0, order[v], v) for v in g.nodes if waiting[v] == 0]
    heapq.heapify(heap)
    active: dict[str, list] = {}  # node -> [phases [(kind, amount, cap)], idx, left]
    now = 0.0

    def phases_for(v: str) -> list[tuple[str, float, float]]:
        d = g.nodes[v]
        t = timing[v]
        cls = d["cls"]
        if cls == "fill":
            issue = d["fill"]
            nbytes = issue.bytes
            fills[v] = _FillState(nbytes, policy)
            fill_bytes[v] = nbytes
            return [("fixed", device.fill_launch_us, 0.0), ("dram", nbytes, fill_bw)]
        if cls == "join" or not d["active"]:
            return []
        if cls == "collective":
            out = [("fixed", ar_us, 0.0)]
        elif cls == "attention_core":
            out = [("fixed", device.attention_core_us, 0.0)]
        elif cls == "expert_stream":
            nbytes = sum(r.hi - r.lo for r in d["reads"])
            t.read_bytes = nbytes
            out = [("fixed", device.gemm_fixed_us, 0.0), ("dram", nbytes, gemm_dram)]
        elif cls in GEMM_CLASSES and d["reads"]:
            total, hit = _consume(v, d)
            out = [("fixed", device.gemm_fixed_us, 0.0), ("l2", hit, gemm_l2),
                   ("dram", total - hit, gemm_dram)]
        else:  # latency-bound small kernel (its reads still count as hits)
            _consume(v, d)
            out = [("fixed", device.small_kernel_us, 0.0)]
        want = measured.get((d["kind"], d["op"]))
        if want is not None:
            model = sum(a if k == "fixed" else a / c for k, a, c in out if a > 0)
            scale = want / model if model > 0 else 1.0
            if model <= 0:
                out = [("fixed", want, 0.0)]
            else:
                out = [(k, a * scale, c) if k == "fixed" else (k, a, c / scale)
                       for k, a, c in out]
        return out

    def _consume(v: str, d) -> tuple[int, float]:
        t = timing[v]
        total = 0
        hit = 0.0
        for r in d["reads"]:
            total += r.hi - r.lo
            for c in sg.chunks.get((d["pos"], r.storage), ()):
                fs = fills.get(c.fill)
                a, b = max(r.lo, c.lo), min(r.hi, c.lo + c.length)
                if b <= a:
                    continue
                if fs is None:  # fill not started yet: all of it is late
                    t.late.append((c.fill, b - a))
                    t.late_bytes += b - a
                    continue
                landed_end = c.lo + max(0.0, min(c.length, fs.landed - c.offset))
                got = max(0.0, min(b, landed_end) - a)
                missing = (b - a) - got
                if missing > 0:
                    t.late.append((c.fill, missing))
                    t.late_bytes += missing
                key = (c.fill, c.offset)
                already = consumed_chunk.get(key, 0.0)
                fresh = max(0.0, got - already)
                consumed_chunk[key] = max(already, got)
                fs.consumed += fresh
                h = got * fs.survive
                hit += h
                old = t.hits_by_fill.get(c.fill, (0.0, 0.0))
                t.hits_by_fill[c.fill] = (old[0] + h, old[1] + got)
        t.read_bytes = total
        t.hit_bytes = hit
        return total, min(hit, float(total))

    def evict(dram_bytes: float) -> None:
        if dram_bytes <= 0 or not fills:
            return
        pend = {f: s.pending() for f, s in fills.items() if s.pending() > 0}
        if not pend:
            return
        last = [f for f in pend if fills[f].policy == "evict_last"]
        total_last = sum(pend[f] for f in last)
        if total_last > protected:
            frac = min(1.0, dram_bytes / max(1.0, l2 - protected))
            lost = (total_last - protected) * frac
            keep = 1.0 - lost / total_last
            for f in last:
                fills[f].survive *= keep
        other = [f for f in pend if fills[f].policy != "evict_last"]
        if other:
            keep = 1.0 - min(1.0, dram_bytes / l2) * (1.0 - device.evict_normal_survival)
            for f in other:
                fills[f].survive *= keep

    def finish(v: str) -> None:
        t = timing[v]
        t.finish = now
        active.pop(v, None)
        if g.nodes[v]["cls"] != "fill":
            evict(t.dram_bytes)
        for s in g.successors(v):
            delay = g.edges[v, s]["delay"]
            if g.edges[v, s]["kind"] == "stream" and g.nodes[s]["active"] \
                    and g.nodes[s]["cls"] != "join" and timing[v].finish > timing[v].start:
                delay += device.kernel_gap_us
            ready_at[s] = max(ready_at[s], now + delay)
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(heap, (ready_at[s], order[s], s))

    def advance_phase(v: str) -> None:
        st = active[v]
        phases = st[0]
        while st[1] < len(phases) and phases[st[1]][1] <= _EPS:
            st[1] += 1
        if st[1] >= len(phases):
            t = timing[v]
            if t.dram_start is not None and t.dram_end is None:
                t.dram_end = now
            finish(v)
            return
        kind, amount, cap = phases[st[1]]
        st[2] = amount
        t = timing[v]
        if kind == "dram":
            t.dram_start = now
            t.dram_bytes = amount
            t.alone_dram_us = amount / min(cap, bw_dram)
        elif t.dram_start is not None and t.dram_end is None:
            t.dram_end = now

    while heap or active:
        while heap and heap[0][0] <= now + _EPS:
            _, _, v = heapq.heappop(heap)
            timing[v].start = now
            active[v] = [phases_for(v), 0, 0.0]
            advance_phase(v)  # may finish zero-work nodes and release more
        if not active:
            if heap:
                now = heap[0][0]
            continue
        dram = [v for v, st in active.items() if st[0][st[1]][0] == "dram"]
        rates: dict[str, float] = {}
        if dram:
            caps = [active[v][0][active[v][1]][2] for v in dram]
            for v, r in zip(dram, _share(caps, bw_dram)):
                rates[v] = r
        for v, st in active.items():
            kind, _, cap = st[0][st[1]]
            if kind == "fixed":
                rates[v] = 1.0
            elif kind == "l2":
                rates[v] = cap
        step = min(st[2] / rates[v] for v, st in active.items())
        if heap:
            step = min(step, max(0.0, heap[0][0] - now))
        now += step
        done = []
        for v, st in active.items():
            st[2] -= rates[v] * step
            if v in fills and st[0][st[1]][0] == "dram":
                fills[v].landed = fills[v].total - max(0.0, st[2])
            if st[2] <= _EPS * max(1.0, st[0][st[1]][1]):
                done.append(v)
        for v in sorted(done, key=order.get):
            st = active[v]
            if v in fills and st[0][st[1]][0] == "dram":
                fills[v].landed = float(fills[v].total)
            st[1] += 1
            advance_phase(v)
    return SimResult(timing, fill_bytes, timing["join"].finish)
