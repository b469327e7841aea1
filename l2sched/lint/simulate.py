"""Deterministic timing and L2-residency simulation of a step graph.

Each node runs in phases, in order:

- ``fixed`` (us): small kernels (``small_kernel_us``), attention cores
  (``attention_core_us``), all-reduces (the profile's collective model on a
  ``tokens x hidden x 2``-byte message), a GEMM's fixed cost, a fill's launch;
- ``l2`` (bytes): weight bytes a fill made resident, read at ``gemm_l2_gbps``
  (not shared), times the ``effect`` of the fill kernel that made them
  resident (``DeviceProfile.fill_mode``: the measured share of the cold ->
  hot gain a fill delivers; the rest of the hit bytes are read like misses);
- ``dram`` (bytes): bytes read from device memory. All nodes in this phase at
  the same time share ``dram_read_gbps`` by water-filling, each capped at its
  own rate (``gemm_dram_gbps`` for GEMMs and the expert stream, the fill
  kernel's ``gbps`` for fills).

A fill kernel slows the main-stream kernels that run while it reads device
memory (every one but collectives and the routed-expert stream, which shares
``dram_read_gbps`` with it) by the slowdown of their interference class
(``interference_class``; issue 45): each of their phases advances at
``1 / (1 + fill_slowdown_scale x s)`` of its rate, ``s`` the kernel's
``FillMode.class_slowdown`` of the class: ``gemm_slowdown`` for GEMMs,
``attention_slowdown`` for attention cores, ``routing_slowdown`` for routing
and top-k, ``slowdown`` for other small kernels and for every class the
profile writes no term for (``DeviceProfile``; the scale was calibrated on
one H200 decode-step run, docs/lint.md#validation). A collective
advances at ``1 / (1 + allreduce_slowdown)`` of its rate while such a fill
reads device memory (measured on the all-reduce itself, so not scaled).

A persisting-L2 set-aside slows the routed-expert stream's device-memory
reads by ``DeviceProfile.set_aside_stream_factor``.

A node starts when all predecessors finished plus the edge ``delay``; a
same-stream edge between two kernels that both run adds the device's
``kernel_gap_us``. A main-stream op at whose hook fills with bytes are forked
(fork edges into fill nodes) delays its same-stream successors (the main
stream's next op, the forward's join) by ``DeviceProfile.fill_fork_at``
(us, per fill forked there, at the step's token count): what a fork costs
the main stream of a FULL-captured step besides the fill's own launch and
bytes (``latency.fill_fork_us``; absent = 0, docs/lint.md, "Fork cost"). Its L2 hits are computed when it starts, from the fills'
progress at that instant, so a late fill turns into device-memory reads.

Residency: fills of policy ``evict_last`` are protected up to
``DeviceProfile.protected_bytes`` (the set-aside, or the measured
no-set-aside figure). Whenever a non-fill node finishes having read ``D``
bytes from device memory (an attention core: its ``state_bytes``, the
state it streams through the L2), the landed-but-unconsumed fill bytes above that
protection lose ``min(1, D / (L2 - protected))`` of themselves (a stream as
large as the unprotected L2 flushes them). Other policies are unprotected and
lose ``min(1, D / L2) * (1 - evict_normal_survival)``.

``simulate`` returns a ``SimResult``; times are us from the step start.

Long module: one event-driven simulation (phases, water-filled bandwidth,
residency, fills' effect, collectives); its state is shared by every step
of the loop, and splitting it would pass that state across modules.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from l2sched.device.schema import INTERFERENCE_CLASSES
from l2sched.lint.graph import GEMM_CLASSES, StepGraph
from l2sched.device import DeviceProfile

_EPS = 1e-9


@dataclass
class NodeTiming:
    """Simulated timing of one node: ``start``/``finish`` (us);
    ``dram_start``/``dram_end`` the device-memory phase (None without one);
    ``read_bytes`` weight bytes it reads, ``hit_bytes`` of them from L2,
    ``fast_bytes`` the hit bytes times their fill kernels' effect (ops with
    measured times),
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
    fast_bytes: float = 0.0
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
    __slots__ = ("total", "landed", "consumed", "survive", "policy", "complete",
                 "effect", "slowdown", "allreduce_slowdown", "gemm_slowdown", "by_class")

    def __init__(self, total: int, policy: str, effect: float, slowdown: float,
                 allreduce_slowdown: float = 0.0, gemm_slowdown: float | None = None,
                 by_class: dict | None = None):
        self.total = total
        self.landed = 0.0
        self.consumed = 0.0
        self.survive = 1.0
        self.policy = policy
        self.complete = False  # all bytes landed
        self.effect = effect
        self.slowdown = slowdown
        self.allreduce_slowdown = allreduce_slowdown
        self.gemm_slowdown = slowdown if gemm_slowdown is None else gemm_slowdown
        # interference class -> slowdown (FillMode.class_slowdown)
        self.by_class = by_class or {"gemm": self.gemm_slowdown, "small": slowdown,
                                     "attention": slowdown, "routing": slowdown,
                                     "allreduce": allreduce_slowdown}

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


#: Op classes whose fixed phase a concurrent fill's ``slowdown`` stretches.
LATENCY_BOUND = ("small", "attention_core")
#: Op names (the adapters' shared names: glm5next, qwen3_moe, deepseek_v4)
#: of the routing and top-k kernels, interference class ``routing``; an op
#: whose name ends in ``.topk`` is one too (the MLA indexer's top-k).
ROUTING_OPS = ("moe.routing", "moe.align")


def interference_class(cls: str, op: str) -> str | None:
    """The class (``device.schema.INTERFERENCE_CLASSES``) a concurrent fill
    slows an op of step-graph class ``cls`` named ``op`` by: ``gemm``,
    ``attention`` (``attention_core``), ``routing`` (``ROUTING_OPS``, ``*.topk``),
    ``allreduce`` (a collective), ``small`` (any other main-stream kernel);
    None for the routed-expert stream, fills and joins (``NOT_SLOWED``: the
    expert stream shares the device-memory bandwidth with the fill instead)."""
    if cls == "collective":
        return "allreduce"
    if cls in NOT_SLOWED:
        return None
    if cls in GEMM_CLASSES:
        return "gemm"
    if cls == "attention_core":
        return "attention"
    if op in ROUTING_OPS or op.endswith(".topk"):
        return "routing"
    return "small"
#: Op classes a concurrent fill's ``slowdown`` does not stretch (see the
#: module docstring); fills themselves neither.
NOT_SLOWED = ("collective", "expert_stream", "join", "fill")


def simulate(sg: StepGraph, device_profile: DeviceProfile, *, tp: int, tokens: int, hidden: int,
             policy: str = "evict_last", set_aside: int = 0,
             measured: dict | None = None) -> SimResult:
    """Simulate ``sg`` on ``device_profile`` (a ``DeviceProfile``).

    ``tp``: TP degree (all-reduce model); ``tokens``: decode tokens;
    ``hidden``: hidden size (all-reduce message = ``tokens * hidden * 2``
    bytes); ``policy``/``set_aside``: the schedule's cache policy and
    set-aside bytes (-1 = device maximum); ``measured``: ``(layer kind, op)
    -> us`` durations from a profiler trace (``calibrate``) of a step
    without prefetch, which replace the modeled time of those ops: every
    phase is scaled by measured / modeled, where modeled is the op's cold
    time (no L2 hits) for weight-streaming ops, so hits keep their gain.
    A fill whose kernel the profile has no numbers for is simulated with the
    profile's default fill kernel (the lint reports it, L2S109)."""
    return _Simulation(sg, device_profile, tp=tp, tokens=tokens, hidden=hidden,
                       policy=policy, set_aside=set_aside,
                       measured=measured or {}).run()


class _Simulation:
    """One run of the event loop over ``sg``: plain lists derived from
    ``sg.nodes`` / ``sg.adj`` (node index = insertion order; per node its
    attributes, successor edges with their delay, in-degree), the fills'
    states and the active nodes' phases."""

    def __init__(self, sg: StepGraph, device_profile: DeviceProfile, *, tp: int, tokens: int,
                 hidden: int, policy: str, set_aside: int, measured: dict):
        self.device_profile = device_profile
        self.policy = policy
        self.measured = measured
        self.tokens = tokens
        self.op_times = device_profile.op_times(sg.model)
        # the measured effective L2 caps the landed, unconsumed fill bytes
        self.capacity = device_profile.effective_l2_bytes
        self.bw_dram = device_profile.dram_read_gbps * 1e3  # bytes per us
        self.gemm_dram = device_profile.gemm_dram_gbps * 1e3
        self.gemm_l2 = device_profile.gemm_l2_gbps * 1e3
        self.protected = device_profile.protected_bytes(set_aside, policy)
        self.l2 = device_profile.l2_bytes
        self.ar_us = device_profile.allreduce_us(tp, tokens * hidden * 2)
        self.chunks_of = sg.chunks
        self.ids: list[str] = list(sg.nodes)
        self.attrs: list[dict] = list(sg.nodes.values())
        index = {v: i for i, v in enumerate(self.ids)}
        n_nodes = len(self.ids)
        self.is_fill = [d["cls"] == "fill" for d in self.attrs]
        self.state_bytes = [d.get("state_bytes", 0) for d in self.attrs]
        # each node's interference class (None: not slowed by a fill)
        self.iclass = [interference_class(d["cls"], d.get("op", "")) for d in self.attrs]
        self.slow_scale = device_profile.fill_slowdown_scale
        self.expert_dram = self.gemm_dram / device_profile.set_aside_stream_factor(set_aside)
        # successors of each node: (index, delay without gap, delay with gap);
        # the kernel gap applies on a same-stream edge into an active kernel;
        # a hook op's same-stream edges carry the fork cost of its fills
        gap_us = device_profile.kernel_gap_us
        # (an issue without bytes has no rows: the runtime forks nothing for it)
        fork_us = device_profile.fill_fork_at(tokens) if any(self.is_fill) else 0.0
        forks = {i for i, d in enumerate(self.attrs)
                 if fork_us and self.is_fill[i] and d["fill"].nbytes > 0}
        self.succ: list[list[tuple[int, float, float]]] = []
        self.waiting = [0] * n_nodes
        for v in self.ids:
            out = []
            adj = sg.adj[v]
            forked = fork_us * sum(1 for s, e in adj.items()
                                   if e["kind"] == "fork" and index[s] in forks) \
                if forks else 0.0
            for s, e in adj.items():
                j = index[s]
                ds = self.attrs[j]
                delay = e["delay"]
                if e["kind"] == "stream":
                    delay += forked
                    if ds["active"] and ds["cls"] != "join":
                        out.append((j, delay, delay + gap_us))
                        self.waiting[j] += 1
                        continue
                out.append((j, delay, delay))
                self.waiting[j] += 1
            self.succ.append(out)
        self.ready_at = [0.0] * n_nodes
        self.tlist = [NodeTiming() for _ in range(n_nodes)]
        self.fill_of: list[_FillState | None] = [None] * n_nodes
        self.fills: dict[str, _FillState] = {}  # by fill id, in start order
        self.live: list[_FillState] = []  # started fills whose pending bytes may be > 0
        self.fill_bytes: dict[str, int] = {}
        self.consumed_chunk: dict[tuple[str, int], float] = {}
        self.heap = [(0.0, i) for i in range(n_nodes) if self.waiting[i] == 0]
        heapq.heapify(self.heap)
        # node index -> [phases [(kind, amount, cap)], phase idx, work left,
        # the phase's kind, amount and cap, its rate, the fill state or None]
        self.active: dict[int, list] = {}
        self.now = 0.0

    def _fill_mode(self, kernel: str):
        device_profile = self.device_profile
        try:
            return device_profile.fill_mode(kernel)
        except KeyError:
            return device_profile.fill_mode()

    def phases_for(self, i: int) -> list[tuple[str, float, float]]:
        """The phases of node ``i`` at its start (fills start their state)."""
        d = self.attrs[i]
        t = self.tlist[i]
        cls = d["cls"]
        device_profile = self.device_profile
        if cls == "fill":
            issue = d["fill"]
            nbytes = issue.nbytes
            fm = self._fill_mode(issue.kernel)
            fs = _FillState(nbytes, self.policy, fm.effect_at(nbytes), fm.slowdown,
                            fm.allreduce_slowdown, fm.gemm_slowdown,
                            {c: fm.class_slowdown(c) for c in INTERFERENCE_CLASSES})
            self.fills[self.ids[i]] = self.fill_of[i] = fs
            self.live.append(fs)
            self.fill_bytes[self.ids[i]] = nbytes
            return [("fixed", fm.launch_us, 0.0), ("dram", nbytes, fm.gbps * 1e3)]
        if cls == "join" or not d["active"]:
            return []
        cold = None  # modeled time (us) of a weight-streaming op without hits
        times = self.op_times.get((d["kind"], d["op"])) if self.op_times else None
        if cls == "collective":
            out = [("fixed", self.ar_us, 0.0)]
        elif times is not None and d["reads"]:
            out, cold = self._measured_phases(t, d, times)
        elif cls == "attention_core":
            out = [("fixed", device_profile.attention_core_us, 0.0)]
        elif cls == "expert_stream":
            nbytes = sum(r.hi - r.lo for r in d["reads"])
            t.read_bytes = nbytes
            out = [("fixed", device_profile.gemm_fixed_us, 0.0),
                   ("dram", nbytes, self.expert_dram)]
        elif cls in GEMM_CLASSES and d["reads"]:
            # resident bytes buy only their fill kernel's effect of the
            # cold -> hot gain
            total, fast = self._consume(t, d)
            out = [("fixed", device_profile.gemm_fixed_us, 0.0), ("l2", fast, self.gemm_l2),
                   ("dram", total - fast, self.gemm_dram)]
            cold = device_profile.gemm_fixed_us + total / self.gemm_dram
        else:  # latency-bound small kernel (its reads still count as hits)
            self._consume(t, d)
            out = [("fixed", device_profile.small_kernel_us, 0.0)]
        want = self.measured.get((d["kind"], d["op"])) if self.measured else None
        if want is not None:
            # measured durations come from a step without prefetch: scale
            # against the op's cold model, so its L2 hits keep their gain
            model = cold if cold is not None else sum(
                a if k == "fixed" else a / c for k, a, c in out if a > 0)
            if model <= 0:
                out = [("fixed", want, 0.0)]
            else:
                scale = want / model
                out = [(k, a * scale, c) if k == "fixed" else (k, a, c / scale)
                       for k, a, c in out]
        return out

    def _measured_phases(self, t: NodeTiming, d, times) -> tuple[list, float]:
        """The phases of an op the profile measured (``OpTimes``). Alone, an
        op that misses a share ``x`` of its weight bytes takes ``hot + x *
        (cold - hot)``: a fixed phase of ``(1 - x) * hot`` and the missed
        bytes read at the op's cold rate (weight bytes / cold time), a rate
        the measured cold run reached, so the shared device-memory bandwidth
        slows it only when other readers compete. (Reading the missed bytes
        at ``bytes / (cold - hot)`` instead asks for more than the device's
        bandwidth and charged a lone cold op many times its measured time.)
        Its L2 hits are the effective hit bytes of its reads. Returns the
        phases and the cold time (us); ``t.fast_bytes`` = the effective hit
        bytes (``bench.profile_share`` reads them)."""
        cold, hot = times.at(self.tokens)
        total, fast = self._consume(t, d)
        t.fast_bytes = fast
        if cold <= hot or total <= 0:
            return [("fixed", cold, 0.0)], cold
        miss = (total - fast) / total
        return [("fixed", (1 - miss) * hot, 0.0), ("dram", total - fast, total / cold)], cold

    def _cap(self) -> None:
        """Landed, unconsumed fill bytes above the measured effective L2
        evict each other, oldest fill first."""
        live = [(fs, fs.pending()) for fs in self.live]
        excess = sum(p for _, p in live) - self.capacity
        for fs, p in live:
            if excess <= 0:
                break
            if p <= 0:
                continue
            take = min(excess, p)
            fs.survive *= 1.0 - take / p
            excess -= take

    def _consume(self, t: NodeTiming, d) -> tuple[int, float]:
        """Consume the reads of node ``d`` from the fills' landed bytes:
        ``(bytes read, effective L2 bytes)``, the latter the hit bytes times
        their fill kernels' effect, at most the bytes read."""
        if self.capacity:
            self._cap()
        total = 0
        hit = 0.0
        effects: dict[float, float] = {}  # effect -> hit bytes of fills with it
        pos = d["pos"]
        fills, consumed_chunk = self.fills, self.consumed_chunk
        for r in d["reads"]:
            total += r.hi - r.lo
            for c in self.chunks_of.get((pos, r.storage), ()):
                a, b = max(r.lo, c.lo), min(r.hi, c.lo + c.nbytes)
                if b <= a:
                    continue
                fs = fills.get(c.fill)
                if fs is None:  # fill not started yet: all of it is late
                    t.late.append((c.fill, b - a))
                    t.late_bytes += b - a
                    continue
                landed_end = c.lo + max(0.0, min(c.nbytes, fs.landed - c.offset))
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
                effects[fs.effect] = effects.get(fs.effect, 0.0) + h
                old = t.hits_by_fill.get(c.fill, (0.0, 0.0))
                t.hits_by_fill[c.fill] = (old[0] + h, old[1] + got)
        t.read_bytes = total
        t.hit_bytes = hit
        capped = min(hit, float(total))
        if len(effects) <= 1:  # one fill kernel: its effect on the capped hits
            return total, capped * next(iter(effects), 0.0)
        fast = sum(h * e for e, h in sorted(effects.items()))
        return total, min(fast, capped)

    def evict(self, dram_bytes: float) -> None:
        """Device-memory reads of ``dram_bytes`` evict unconsumed fill bytes
        (see the module docstring)."""
        if dram_bytes <= 0 or not self.fills:
            return
        # a fill that has fully landed and has nothing pending never has
        # again (consumed only grows, survive only shrinks): drop it
        pend = []
        keep_live = []
        for fs in self.live:
            p = fs.pending()
            if p > 0:
                pend.append((fs, p))
                keep_live.append(fs)
            elif not fs.complete:
                keep_live.append(fs)
        self.live[:] = keep_live
        if not pend:
            return
        protected, l2 = self.protected, self.l2
        last = [(fs, p) for fs, p in pend if fs.policy == "evict_last"]
        total_last = sum(p for _, p in last)
        if total_last > protected:
            frac = min(1.0, dram_bytes / max(1.0, l2 - protected))
            lost = (total_last - protected) * frac
            keep = 1.0 - lost / total_last
            for fs, _ in last:
                fs.survive *= keep
        other = [fs for fs, _ in pend if fs.policy != "evict_last"]
        if other:
            survival = self.device_profile.evict_normal_survival
            keep = 1.0 - min(1.0, dram_bytes / l2) * (1.0 - survival)
            for fs in other:
                fs.survive *= keep

    def finish(self, i: int) -> None:
        """Node ``i`` finished now: evict, release its successors."""
        now = self.now
        t = self.tlist[i]
        t.finish = now
        self.active.pop(i, None)
        if not self.is_fill[i]:
            self.evict(t.dram_bytes + self.state_bytes[i])
        ran = now > t.start
        ready_at, waiting, heap = self.ready_at, self.waiting, self.heap
        for j, delay, gapped in self.succ[i]:
            at = now + (gapped if ran else delay)
            if at > ready_at[j]:
                ready_at[j] = at
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(heap, (ready_at[j], j))

    def advance_phase(self, i: int, st: list) -> None:
        """Move node ``i`` to its next phase with work (or finish it)."""
        # st: [phases, phase idx, work left, kind, amount, cap, rate, fill]
        phases = st[0]
        k = st[1]
        while k < len(phases) and phases[k][1] <= _EPS:
            k += 1
        st[1] = k
        t = self.tlist[i]
        now = self.now
        if k >= len(phases):
            if t.dram_start is not None and t.dram_end is None:
                t.dram_end = now
            self.finish(i)
            return
        kind, amount, cap = phases[k]
        st[2] = st[4] = amount
        st[3] = kind
        st[5] = cap
        if kind == "dram":
            t.dram_start = now
            t.dram_bytes = amount
            t.alone_dram_us = amount / min(cap, self.bw_dram)
        else:
            st[6] = 1.0 if kind == "fixed" else cap  # l2: not shared
            if t.dram_start is not None and t.dram_end is None:
                t.dram_end = now

    def _rates(self) -> None:
        """The rate of every active phase: device-memory phases share the
        bandwidth (water-filling); a phase of an op with an interference
        class (``interference_class``) runs at ``1 / (1 +
        fill_slowdown_scale x s)`` of that rate under concurrent fills, ``s``
        their largest slowdown of its class; a collective at ``1 / (1 +
        allreduce_slowdown)``."""
        active, bw_dram = self.active, self.bw_dram
        dram = [st for st in active.values() if st[3] == "dram"]
        if len(dram) == 1:
            dram[0][6] = min(dram[0][5], bw_dram)
        elif dram:
            for st, r in zip(dram, _share([st[5] for st in dram], bw_dram)):
                st[6] = r
        fills = [st[7] for st in dram if st[7] is not None]
        factors = {}
        if fills:
            scale = self.slow_scale
            for c in INTERFERENCE_CLASSES:
                worst = max(f.by_class[c] for f in fills)
                # the all-reduce's slowdown was measured on the all-reduce itself
                factors[c] = 1.0 / (1.0 + (worst if c == "allreduce" else scale * worst))
        iclass = self.iclass
        for i, st in active.items():
            if st[3] == "fixed":
                st[6] = 1.0
            elif st[3] == "l2":
                st[6] = st[5]
            if fills and iclass[i] is not None:
                st[6] *= factors[iclass[i]]

    def run(self) -> SimResult:
        """The event loop: start ready nodes, advance all active phases to the
        next completion or arrival, repeat."""
        heap, active, tlist = self.heap, self.active, self.tlist
        heappop = heapq.heappop
        while heap or active:
            while heap and heap[0][0] <= self.now + _EPS:
                _, i = heappop(heap)
                tlist[i].start = self.now
                st = active[i] = [self.phases_for(i), 0, 0.0, "", 0.0, 0.0, 0.0, None]
                st[7] = self.fill_of[i]
                self.advance_phase(i, st)  # may finish zero-work nodes and release more
            if not active:
                if heap:
                    self.now = heap[0][0]
                continue
            self._rates()
            step = min(st[2] / st[6] for st in active.values())
            if heap:
                step = min(step, max(0.0, heap[0][0] - self.now))
            self.now += step
            done = []
            for i, st in active.items():
                st[2] -= st[6] * step
                if st[7] is not None and st[3] == "dram":
                    st[7].landed = st[7].total - max(0.0, st[2])
                if st[2] <= _EPS * max(1.0, st[4]):
                    done.append(i)
            if len(done) > 1:
                done.sort()
            for i in done:
                st = active[i]
                fs = st[7]
                if fs is not None and st[3] == "dram":
                    fs.landed = float(fs.total)
                    fs.complete = True
                st[1] += 1
                self.advance_phase(i, st)
        timing = dict(zip(self.ids, tlist))
        return SimResult(timing, self.fill_bytes, timing["join"].finish)
