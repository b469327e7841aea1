"""Issuing fills at hook points: side stream, gates, persisting-L2 set-aside.

A runtime serves one ``Plan`` on one device. The installer (``l2sched.install``)
binds every ``WindowIssue`` of the plan to rows ``(address, bytes)`` and calls

* ``set_rows(index, rows)`` when an issue's rows are first known or change
  (weight reload: CUDA graphs bake raw addresses in, so the device table is
  updated in place and later replays follow it);
* ``issue(index)`` at the issue's hook point: the gate (``gate``) decides; if it
  passes, an event is recorded on the current stream, the device's side stream
  waits on it and the fill kernel is launched there over that issue's rows;
* ``join()`` once per model forward: the current stream waits on the side
  stream's last fill (before any pipeline-parallel early return, and before a
  capture ends, else the capture ends forked).

Two backends share this interface: ``CudaRuntime`` (the real one) and
``DryRunRuntime``, which records what would be issued (window, layer, hook,
bytes, order, join) on machines without a GPU; ``explain_step`` uses it to print
one decode step's issue order for ``l2sched explain``.

Gating rules come from prefetch-background.md ("Runtime rules learned the hard
way") and vllm-glm5next-map.md section 3: decode steps of at most
``plan.max_tokens`` tokens only, never prefill; eager serving and FULL CUDA-graph
capture prefetch; a breakable (PIECEWISE) capture and the uncaptured warm-up
forwards right before a capture do not (side-stream work crossing a capture
boundary gives unjoined-capture errors or illegal memory accesses).

Nothing here imports torch at module import.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .plan import Plan, WindowIssue

log = logging.getLogger("l2sched.runtime")

#: CUDA-graph modes a step may run or be captured in (vLLM's CUDAGraphMode
#: names, lower-cased): ``none`` (eager), ``full``, ``piecewise`` (breakable).
GRAPH_MODES = ("none", "full", "piecewise")


@dataclass(frozen=True)
class StepInfo:
    """What the serving engine knows about the forward in progress.

    ``num_tokens``: tokens in this step (``None`` = unknown, not gated on);
    ``is_prefill``: the step contains prefill; ``graph_mode``: the CUDA-graph
    mode this forward runs or is captured in (``GRAPH_MODES``); ``warmup``: an
    uncaptured warm-up forward right before a capture; ``capturing``: override
    of ``torch.cuda.is_current_stream_capturing()`` (``None`` = ask torch; the
    dry-run backend treats ``None`` as not capturing). vLLM V2 reports mode
    NONE during a FULL capture, so capture itself is detected through torch."""

    num_tokens: int | None = None
    is_prefill: bool = False
    graph_mode: str = "none"
    warmup: bool = False
    capturing: bool | None = None


@dataclass(frozen=True)
class GateDecision:
    """``issue``: whether to fill now; ``reason``: a short stable word for
    stats and logs (``eager``, ``full-capture``, ``prefill``, ``too-many-tokens``,
    ``piecewise-capture``, ``warmup``, ``disabled``)."""

    issue: bool
    reason: str


_D = {r: GateDecision(ok, r) for ok, r in (
    (False, "disabled"), (False, "prefill"), (False, "too-many-tokens"),
    (False, "piecewise-capture"), (True, "full-capture"), (False, "warmup"),
    (True, "eager"))}


def gate(step: StepInfo, *, capturing: bool, max_tokens: int,
         enabled: bool = True) -> GateDecision:
    """The pure gate decision for one hook firing.

    ``capturing`` is whether the current stream is being captured into a CUDA
    graph; ``max_tokens`` is ``Plan.max_tokens`` (tokens). Order of the rules:
    disabled; prefill; ``num_tokens > max_tokens``; capturing a PIECEWISE graph;
    an uncaptured warm-up forward; capturing (FULL, or any non-PIECEWISE mode)
    -> issue; otherwise eager -> issue."""
    if not enabled:
        return _D["disabled"]
    if step.is_prefill:
        return _D["prefill"]
    if step.num_tokens is not None and step.num_tokens > max_tokens:
        return _D["too-many-tokens"]
    if capturing:
        if step.graph_mode == "piecewise":
            return _D["piecewise-capture"]
        return _D["full-capture"]
    if step.warmup:
        return _D["warmup"]
    return _D["eager"]


def gate_pair(step: StepInfo, max_tokens: int) -> tuple[GateDecision, GateDecision]:
    """``gate`` for one step when not capturing and when capturing (prefetch
    enabled), as one pair; the two are the same object when the capture state
    cannot change the decision (then nobody needs to ask the driver). When
    ``step.capturing`` is set, both are the decision for that value. The
    runtime computes this once per ``StepInfo`` object, not per hook firing."""
    if step.capturing is not None:
        d = gate(step, capturing=step.capturing, max_tokens=max_tokens)
        return d, d
    return (gate(step, capturing=False, max_tokens=max_tokens),
            gate(step, capturing=True, max_tokens=max_tokens))


@dataclass
class RuntimeStats:
    """Counters since creation: ``issued``/``joined`` calls that did work,
    ``skipped`` per gate reason, ``bytes_issued`` (bytes, from bound rows)."""

    issued: int = 0
    joined: int = 0
    bytes_issued: int = 0
    skipped: dict = field(default_factory=dict)


class RuntimeBase:
    """Shared bookkeeping of the backends: the plan, the step state, the bound
    rows of every issue (index into ``plan.issues``) and the gate.

    ``step`` is the current ``StepInfo``; set it with ``set_step`` before each
    forward, or give ``step_provider`` (a callable returning a ``StepInfo``,
    called once per ``issue``)."""

    def __init__(self, plan: Plan, *,
                 step_provider: Callable[[], StepInfo] | None = None):
        self.plan = plan
        self.step = StepInfo()
        self.step_provider = step_provider
        self.stats = RuntimeStats()
        self.rows: list[list[tuple[int, int]]] = [[] for _ in plan.issues]
        self._index = {id(wi): i for i, wi in enumerate(plan.issues)}
        self.enabled = True

    def index_of(self, window_issue: WindowIssue) -> int:
        """Index of ``window_issue`` in ``plan.issues`` (by identity, then by
        value). Raises ``KeyError`` when it is not one of the plan's."""
        i = self._index.get(id(window_issue))
        if i is None:
            i = self.plan.issues.index(window_issue)  # ValueError -> KeyError
        return i

    def set_step(self, step: StepInfo) -> None:
        """Set the step state the gate reads until the next call."""
        self.step = step

    def _capturing(self, step: StepInfo) -> bool:
        return bool(step.capturing)

    def decide(self) -> GateDecision:
        """The gate decision for a hook firing now."""
        step = self.step_provider() if self.step_provider is not None else self.step
        return gate(step, capturing=self._capturing(step),
                    max_tokens=self.plan.max_tokens, enabled=self.enabled)

    def _skip(self, reason: str) -> None:
        self.stats.skipped[reason] = self.stats.skipped.get(reason, 0) + 1

    def set_rows(self, index: int, rows: Sequence[tuple[int, int]]) -> bool:
        """Bind issue ``index`` to ``rows`` of ``(address, bytes)`` (16-byte
        aligned, multiples of 16; a ``(0, 0)`` row is an unresolved range).
        Returns False when the rows cannot be applied now (they are kept and
        applied later)."""
        self.rows[index] = [(int(a), int(n)) for a, n in rows]
        return True

    def issue(self, index: int | WindowIssue) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def join(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


# ---------------------------------------------------------------------------
# Dry run


@dataclass(frozen=True)
class DryRunEvent:
    """One recorded action. ``op`` is ``fork`` (current stream -> side stream),
    ``launch`` (a fill of ``bytes`` bytes over ``rows`` table rows), ``skip``
    (gate said no; ``reason``) or ``join`` (current stream waits on the side
    stream). ``order`` counts events from 0."""

    order: int
    op: str
    window: str = ""
    layer: int = -1
    hook: str = ""
    bytes: int = 0
    rows: int = 0
    reason: str = ""


class DryRunRuntime(RuntimeBase):
    """Records what would be issued instead of touching a GPU.

    Bytes of a launch come from the bound rows when the installer bound them,
    else from the plan (``WindowIssue.bytes``; lazy whole-tensor ranges count
    0). ``events`` is the ordered record; ``clear()`` empties it."""

    def __init__(self, plan: Plan, **kw):
        super().__init__(plan, **kw)
        self.events: list[DryRunEvent] = []
        self._pending = False

    def _rec(self, op: str, wi: WindowIssue | None = None, **kw) -> None:
        if wi is not None:
            kw.update(window=wi.window, layer=wi.layer, hook=wi.hook)
        self.events.append(DryRunEvent(len(self.events), op, **kw))

    def clear(self) -> None:
        """Forget recorded events."""
        self.events.clear()

    def issue(self, index: int | WindowIssue) -> bool:
        """Gate, then record ``fork`` and ``launch`` (or one ``skip``)."""
        i = index if isinstance(index, int) else self.index_of(index)
        wi = self.plan.issues[i]
        d = self.decide()
        if not d.issue:
            self._skip(d.reason)
            self._rec("skip", wi, reason=d.reason)
            return False
        rows = self.rows[i]
        nbytes = sum(n for _, n in rows) if rows else wi.bytes
        nrows = len(rows) if rows else len(wi.ranges)
        self._rec("fork", wi)
        self._rec("launch", wi, bytes=nbytes, rows=nrows, reason=d.reason)
        self.stats.issued += 1
        self.stats.bytes_issued += nbytes
        self._pending = True
        return True

    def join(self) -> None:
        """Record ``join`` when a fill is pending since the last join."""
        if self._pending:
            self._rec("join")
            self.stats.joined += 1
            self._pending = False


def explain_step(plan: Plan, step: StepInfo | None = None) -> list[DryRunEvent]:
    """The events of one decode step of ``plan`` in issue order, as the
    runtime would produce them: every issue fired in ``plan.issues`` order
    (layer, hook order), then one join. ``step`` defaults to a 1-token eager
    decode step."""
    rt = DryRunRuntime(plan)
    rt.set_step(step or StepInfo(num_tokens=1))
    for i in range(len(plan.issues)):
        rt.issue(i)
    rt.join()
    return rt.events


def format_events(events: Sequence[DryRunEvent]) -> str:
    """A fixed-width table of ``events`` (one line each), bytes in MB (10^6)
    and exact bytes, for ``l2sched explain``."""
    lines = [f"{'#':>4}  {'op':<6}  {'layer':>5}  {'hook':<22}  {'window':<10}  "
             f"{'bytes':>12}  {'MB':>8}  {'rows':>4}  reason"]
    for e in events:
        layer = "" if e.layer < 0 else str(e.layer)
        mb = f"{e.bytes / 1e6:.2f}" if e.op == "launch" else ""
        by = str(e.bytes) if e.op == "launch" else ""
        rows = str(e.rows) if e.op == "launch" else ""
        lines.append(f"{e.order:>4}  {e.op:<6}  {layer:>5}  {e.hook:<22}  "
                     f"{e.window:<10}  {by:>12}  {mb:>8}  {rows:>4}  {e.reason}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Persisting-L2 set-aside

_set_aside_lock = threading.Lock()
_set_aside_done: dict[int, int] = {}


def apply_set_aside(device_index: int, nbytes: int) -> int | None:
    """Set the persisting-L2 set-aside of device ``device_index`` to ``nbytes``
    bytes (``-1`` = the device maximum, 0 = leave the driver limit alone),
    once per device and process, through ``cuda.bindings``'
    ``cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)`` on the device's primary
    context (the context torch uses). The request is clamped to
    ``CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`` (39,321,600 B on the
    lent H200, prefetch-background.md); the limit is read back and logged.

    Must run before any CUDA-graph capture (the caller's duty; it refuses while
    the current stream captures). Returns the limit read back in bytes, or
    ``None`` when nothing was done or it failed (logged once, never raises)."""
    if nbytes == 0:
        return None
    with _set_aside_lock:
        if device_index in _set_aside_done:
            return _set_aside_done[device_index]
        try:
            import torch
            if torch.cuda.is_current_stream_capturing():
                log.warning("l2sched: persisting-L2 set-aside not applied: "
                            "requested during a CUDA-graph capture")
                return None
            from cuda.bindings import driver as drv

            def ok(res):
                err = res[0]
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"driver error {err}")
                return res[1] if len(res) == 2 else res[1:]

            ok(drv.cuInit(0))
            dev = ok(drv.cuDeviceGet(device_index))
            dmax = ok(drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
                dev))
            want = dmax if nbytes < 0 else min(int(nbytes), int(dmax))
            ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
            err, = drv.cuCtxPushCurrent(ctx)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuCtxPushCurrent: {err}")
            try:
                limit = drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE
                err, = drv.cuCtxSetLimit(limit, want)
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"cuCtxSetLimit: {err}")
                got = int(ok(drv.cuCtxGetLimit(limit)))
            finally:
                drv.cuCtxPopCurrent()
                drv.cuDevicePrimaryCtxRelease(dev)
        except Exception as e:
            log.warning("l2sched: persisting-L2 set-aside not applied on device "
                        "%d: %s: %s", device_index, type(e).__name__, e)
            _set_aside_done[device_index] = None
            return None
        log.info("l2sched: persisting-L2 set-aside on device %d: requested %d B, "
                 "device max %d B, set %d B, read back %d B",
                 device_index, nbytes, dmax, want, got)
        _set_aside_done[device_index] = got
        return got


# ---------------------------------------------------------------------------
# CUDA

_side_lock = threading.Lock()
_side_streams: dict[int, object] = {}


def side_stream(device_index: int):
    """The process-wide side stream of ``device_index`` (a
    ``torch.cuda.Stream``), created on first use."""
    with _side_lock:
        s = _side_streams.get(device_index)
        if s is None:
            import torch
            s = torch.cuda.Stream(device=device_index)
            _side_streams[device_index] = s
        return s


class CudaRuntime(RuntimeBase):
    """Issues fills on the device's side stream with the CuTe DSL kernel.

    ``device``: CUDA device index (default: the current device at first use).
    ``grid``/``threads``/``chunk``: kernel shape (CTAs, threads per CTA, bytes
    per request; defaults in ``l2sched.kernel``); ``mode``: the kernel's fill
    instruction (``bulk`` default, ``load``; see ``kernel.get_kernel``).
    ``sync``: how fork and join are enqueued: ``driver`` (``cuda.bindings``
    ``cuEventRecord``/``cuStreamWaitEvent`` on raw handles), ``torch``
    (``torch.cuda.Event``/``Stream`` objects) or ``auto`` (``driver`` when
    ``cuda.bindings`` imports, else ``torch``); same ordering either way.
    Rows of all issues live in
    one device table, int64 ``[sum of rows, 2]``, with a host mirror; issue
    ``i`` owns rows ``[offsets[i], offsets[i+1])``. The kernel, side stream,
    table and set-aside are prepared at the first ``prepare``/``set_rows``/
    ``issue``; any failure there disables prefetch with one log line."""

    SYNCS = ("auto", "driver", "torch")

    def __init__(self, plan: Plan, *, device: int | None = None,
                 grid: int | None = None, threads: int | None = None,
                 chunk: int | None = None, mode: str = "bulk",
                 sync: str = "auto", **kw):
        super().__init__(plan, **kw)
        if sync not in self.SYNCS:
            raise ValueError(f"unknown sync {sync!r} ({', '.join(self.SYNCS)})")
        self.device = device
        self.grid, self.threads, self.chunk = grid, threads, chunk
        self.mode = mode
        self.sync = sync
        self._ready = False
        self._kernel = None
        self._pending = False
        self._dirty: set[int] = set()
        self._warned_dirty = False
        self.offsets = [0]
        for wi in plan.issues:
            self.offsets.append(self.offsets[-1] + len(wi.ranges))
        # Per issue, precomputed for issue(): row span (None = no ranges) and
        # bytes of the bound rows (stats).
        self._spans = [(b, e) if e > b else None
                       for b, e in zip(self.offsets, self.offsets[1:])]
        self._nbytes = [0] * len(plan.issues)
        # gate_pair of the last StepInfo object seen (identity-cached), and
        # the decision when the capture state cannot change it (else None).
        self._gate_step: StepInfo | None = None
        self._gate_nocap = self._gate_cap = self._gate_fixed = _D["eager"]

    def _capturing(self, step: StepInfo) -> bool:
        if step.capturing is not None:
            return step.capturing
        return self._is_capturing()

    def _disable(self, why: str) -> None:
        if self.enabled:
            self.enabled = False
            log.warning("l2sched: L2 prefetch disabled: %s", why)

    def prepare(self) -> bool:
        """Compile the kernel, create the side stream, events and table, apply
        the set-aside. Idempotent; returns whether prefetch is enabled. Call it
        before any capture when possible (the first forward does otherwise)."""
        if self._ready:
            return self.enabled
        self._ready = True
        from . import kernel as K
        try:
            import torch
        except Exception as e:  # pragma: no cover
            self._disable(f"torch unavailable ({e})")
            return False
        self._torch = torch
        ok, why = K.device_supported(self.device or 0)
        if not ok:
            K._disable(why)  # the one log line
            self.enabled = False
            return False
        try:
            dev = torch.cuda.current_device() if self.device is None else self.device
            self.device = dev
            kern = K.get_kernel(dev, grid=self.grid or K.DEFAULT_GRID,
                                threads=self.threads or K.DEFAULT_THREADS,
                                chunk=self.chunk or K.DEFAULT_CHUNK,
                                policy=self.plan.policy, mode=self.mode)
            if kern is None:
                self.enabled = False  # kernel module logged the reason once
                return False
            self._kernel = kern
            self._side = side_stream(dev)
            self._side_handle = self._side.cuda_stream
            self._setup_streams(torch)
            n = max(self.offsets[-1], 1)
            # pageable, not pinned: the table changes only at bind/reload, and
            # pinned blocks returned to torch's host cache made a later
            # capture fail in its host-cache free (2-H200 bench, 4th M)
            self._host = torch.zeros((n, 2), dtype=torch.int64)
            self._table = torch.zeros((n, 2), dtype=torch.int64, device=dev)
            self._table_ptr = self._table.data_ptr()
            self._launch = kern.bind(self._table_ptr, self._side_handle)
            if self.plan.set_aside != 0:
                apply_set_aside(dev, self.plan.set_aside)
            if not torch.cuda.is_current_stream_capturing():
                self._warm_launch()
        except Exception as e:
            self._disable(f"runtime setup failed: {type(e).__name__}: {e}")
            return False
        for i in range(len(self.plan.issues)):
            if self.rows[i]:
                self._dirty.add(i)
        return True

    def _setup_streams(self, torch) -> None:
        """Pre-resolve everything fork and join touch, so a hook firing makes
        no lookups or allocations beyond the calls themselves: the raw
        current-stream query (``torch._C._cuda_getCurrentRawStream``), the
        capture query, two pre-created events (fork, done) and the
        ``sync`` backend's record/wait functions."""
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._raw = raw if raw is not None else \
            (lambda d: torch.cuda.current_stream(d).cuda_stream)
        cap = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        self._is_capturing = cap if cap is not None else \
            torch.cuda.is_current_stream_capturing
        sync = self.sync
        if sync == "auto":
            try:
                from cuda.bindings import driver  # noqa: F401
                sync = "driver"
            except Exception:
                sync = "torch"
        self.sync = sync
        if sync == "driver":
            from cuda.bindings import driver as drv
            flags = drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
            err, self._fork = drv.cuEventCreate(flags)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuEventCreate: {err}")
            err, self._done = drv.cuEventCreate(flags)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuEventCreate: {err}")
            self._drv = drv
            self._record, self._wait = drv.cuEventRecord, drv.cuStreamWaitEvent
            self._cu_stream = drv.CUstream
            self._side_cu = drv.CUstream(self._side_handle)
            self._cu_streams: dict[int, object] = {}
            self._fork_side, self._join_side = self._fork_driver, self._join_driver
        else:
            self._fork = torch.cuda.Event()  # timing off by default
            self._done = torch.cuda.Event()
            # the C methods: torch.cuda.Event.record/wait add a Python frame
            base = torch._C._CudaEventBase
            self._record, self._wait = base.record, base.wait
            self._current_stream = torch.cuda.current_stream
            self._fork_side, self._join_side = self._fork_torch, self._join_torch

    def _cur(self):
        """The current stream as a ``CUstream`` (cached per raw handle)."""
        h = self._raw(self.device)
        s = self._cu_streams.get(h)
        if s is None:
            s = self._cu_streams[h] = self._cu_stream(h)
        return s

    # Fork: the side stream waits for the current stream's work so far.
    # Join: the current stream waits for the side stream's work so far. The
    # done event is recorded at the join, not after every launch: one driver
    # call per fill less, and the side stream's last fill is still covered.

    def _fork_driver(self) -> None:
        self._record(self._fork, self._cur())
        self._wait(self._side_cu, self._fork, 0)

    def _join_driver(self) -> None:
        self._record(self._done, self._side_cu)
        self._wait(self._cur(), self._done, 0)

    def _fork_torch(self) -> None:
        self._record(self._fork, self._current_stream(self.device))
        self._wait(self._fork, self._side)

    def _join_torch(self) -> None:
        self._record(self._done, self._side)
        self._wait(self._done, self._current_stream(self.device))

    def _warm_launch(self) -> None:
        """An empty launch (no rows) on the side stream, outside any capture:
        loads the module and checks the launch path, so the first launch inside
        a capture makes no module-loading driver call."""
        try:
            self._launch(0, 0)
        except Exception:
            if not self._fallback():
                raise
            self._launch(0, 0)

    def _fallback(self) -> bool:
        """Switch to the generic launch path after a TVM-FFI call raised;
        whether there is one."""
        from . import kernel as K
        new = K.fallback_to_generic(self._kernel) if self._kernel.ffi else None
        if new is None:
            return False
        self._kernel = new
        self._launch = new.bind(self._table_ptr, self._side_handle)
        return True

    def set_rows(self, index: int, rows: Sequence[tuple[int, int]]) -> bool:
        """Bind issue ``index`` to ``rows`` (``(address, bytes)``; more rows than
        the issue's ranges is an error). Outside a capture the device table is
        updated at once (on the side stream, after earlier fills); during a
        capture it is deferred and the issue is skipped until then."""
        rows = [(int(a), int(n)) for a, n in rows]
        cap = self.offsets[index + 1] - self.offsets[index]
        if len(rows) > cap:
            raise ValueError(f"issue {index} has {cap} ranges, got {len(rows)} rows")
        self.rows[index] = rows
        self._nbytes[index] = sum(n for _, n in rows)
        self._dirty.add(index)
        if not self.prepare():
            return False
        return self._flush()

    def _flush(self) -> bool:
        if not self._dirty or not self.enabled:
            return True
        torch = self._torch
        if torch.cuda.is_current_stream_capturing():
            return False
        # Earlier fills may still read the table; the host mirror may still
        # be copied from: wait for the side stream (rare: bind and reload).
        self._side.synchronize()
        for i in sorted(self._dirty):
            b, e = self.offsets[i], self.offsets[i + 1]
            rows = self.rows[i] + [(0, 0)] * (e - b - len(self.rows[i]))
            if e > b:
                self._host[b:e] = torch.tensor(rows, dtype=torch.int64)
        with torch.cuda.stream(self._side):
            self._table.copy_(self._host)  # synchronous from pageable memory
        self._dirty.clear()
        return True

    def issue(self, index: int | WindowIssue) -> bool:
        """Gate, then fork the side stream from the current stream and launch
        the fill of issue ``index`` there. Returns whether a fill was enqueued
        (or captured). Never raises on CUDA/kernel trouble: it disables.

        Host cost (benchmarks/host_cost.py): the gate is evaluated once per
        ``StepInfo`` object and the capture state is asked only when it can
        change the decision (warm-up and PIECEWISE steps); then two driver
        calls (fork) and the launch, with no allocation."""
        i = index if isinstance(index, int) else self.index_of(index)
        if not self._ready:
            self.prepare()
        if not self.enabled:
            self._skip("disabled")
            return False
        step = self.step_provider() if self.step_provider is not None else self.step
        if step is not self._gate_step:
            nocap, cap = gate_pair(step, self.plan.max_tokens)
            # both issue (eager vs full-capture differ only in the reason,
            # which nothing records for an issued fill) or the same skip
            same = (nocap.issue and cap.issue) or nocap is cap
            self._gate_nocap, self._gate_cap = nocap, cap
            self._gate_fixed = nocap if same else None
            self._gate_step = step
        d = self._gate_fixed
        if d is None:
            d = self._gate_cap if self._is_capturing() else self._gate_nocap
        if not d.issue:
            self._skip(d.reason)
            return False
        if self._dirty and not self._flush():
            if not self._warned_dirty:
                self._warned_dirty = True
                log.warning("l2sched: table rows changed during a capture; "
                            "issue skipped until the next eager forward")
            self._skip("unbound-in-capture")
            return False
        span = self._spans[i]
        if span is None:
            return False
        self._fork_side()
        # From here the side stream waited on the fork: the join must run
        # even when the launch fails.
        self._pending = True
        b, e = span
        try:
            self._launch(b, e)
        except Exception as ex:
            if not self._fallback():
                self._disable(f"kernel launch failed: {type(ex).__name__}: {ex}")
                return False
            self._launch(b, e)
        stats = self.stats
        stats.issued += 1
        stats.bytes_issued += self._nbytes[i]
        return True

    def join(self) -> None:
        """Make the current stream wait for the side stream's work so far, so
        for the last fill (no-op when nothing was issued since the last join).
        """
        if self._pending:
            self._join_side()
            self._pending = False
            self.stats.joined += 1


def make_runtime(plan: Plan, backend: str = "auto", **kw) -> RuntimeBase:
    """A runtime for ``plan``: ``backend`` is ``cuda``, ``dry-run`` or ``auto``
    (``cuda`` when torch sees a CUDA device, else ``dry-run``). ``kw`` goes to
    the backend's constructor."""
    if backend == "auto":
        try:
            import torch
            backend = "cuda" if torch.cuda.is_available() else "dry-run"
        except Exception:
            backend = "dry-run"
    if backend == "cuda":
        return CudaRuntime(plan, **kw)
    if backend == "dry-run":
        return DryRunRuntime(plan, **kw)
    raise ValueError(f"unknown backend {backend!r} (cuda, dry-run, auto)")
