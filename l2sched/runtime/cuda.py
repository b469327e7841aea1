"""The CUDA backend: issues fills on the device's side stream with the CuTe
DSL fill kernel (``runtime.kernel``).

At an issue's hook point the gate (``runtime.gate``) decides; if it passes,
the side stream forks from the current stream (``runtime.streams``) and the
kernel is launched there over that issue's rows of the fill table
(``runtime.table``). ``join()`` once per forward makes the current stream
wait for the side stream. The kernel, side stream, table and persisting-L2
set-aside are prepared at the first ``prepare``/``set_rows``/``issue``; any
failure there disables prefetch with one log line and never raises into the
host program. Nothing here imports torch at module import.
"""

from __future__ import annotations

import logging
from threading import get_ident
from typing import Mapping, Sequence

from l2sched.compiler.plan import Plan, WindowIssue
from l2sched.runtime import kernel as K
from l2sched.runtime.base import RuntimeBase, same_layout
from l2sched.runtime.capture_nodes import (CAPTURE_LAUNCHES, DEFAULT_CAPTURE_LAUNCH,
                                           NODE_LAUNCHES, CaptureDeps, CaptureLaunches,
                                           check_capture_launch)
from l2sched.runtime.gate import GATE_DECISIONS, StepInfo, gate_pair
from l2sched.runtime.pdl_watch import ProgrammaticWatch
from l2sched.runtime.set_aside import apply_set_aside, release_set_aside
from l2sched.runtime.streams import SYNCS, ForkJoin, side_stream
from l2sched.runtime.switch import SwitchWord
from l2sched.runtime.table import FillTable

log = logging.getLogger("l2sched.runtime")

#: Retired runtimes whose device table and events a CUDA graph captured
#: earlier may still use: kept alive for the process, their tables zeroed.
RETIRED: list = []


def issue_specs(plan: Plan, fill: Mapping | None = None, fill_default: str = "bulk",
                **shape) -> list[K.KernelSpec]:
    """The fill kernel of every issue of ``plan``: the issue's ``kernel``
    (the schedule's choice), else ``fill_default`` (the device profile's);
    its launch shape from ``fill`` (mode -> an object with ``grid``,
    ``threads``, ``chunk``, ``stages``: the profile's ``FillMode``s), else
    the kernel module's defaults; the plan's cache policy. ``shape``
    (``mode``, ``grid``, ``threads``, ``chunk``, ``stages``; ``None`` =
    unset) overrides every issue (benchmarks). Raises ``ValueError`` for a
    spec that cannot be built."""
    fill = fill or {}
    shape = {k: v for k, v in shape.items() if v is not None}
    out = []
    for wi in plan.issues:
        mode = shape.get("mode") or wi.kernel or fill_default
        fm = fill.get(mode)
        base = ({"grid": fm.grid, "threads": fm.threads, "chunk": fm.chunk,
                 "stages": fm.stages} if fm is not None else {})
        out.append(K.KernelSpec(**{**base, **shape, "mode": mode,
                                   "policy": plan.policy}).check())
    return out


class CudaRuntime(CaptureLaunches, RuntimeBase):
    """Issues fills on the device's side stream with the CuTe DSL kernels.

    ``device``: CUDA device index (default: the current device at first use).
    ``fill``/``fill_default``: the device profile's fill kernels (mode ->
    ``FillMode``; ``DeviceProfile.fill_modes``) and default mode, which give
    each issue its kernel and launch shape (``issue_specs``).
    ``capture_launch``: how a fill enters a FULL capture, one of
    ``CAPTURE_LAUNCHES`` (``runtime.capture_nodes``; docs/runtime.md,
    "Hardware queues"): ``fork`` (side stream, at once), ``deferred`` (side
    stream, at the next ``issue`` or ``join``), ``leaf``/``leaf-deferred``
    (a node of the model stream's capture that nothing depends on) or
    ``launch-order``. Eager forwards fork the side stream and launch at once
    whatever the choice.
    ``mode``/``grid``/``threads``/``chunk``/``stages``: override every
    issue's kernel and shape (benchmarks). ``merge_fills`` (default True;
    ``RuntimeBase``): the issues of one hook point with one kernel are one
    fill launch (``issue_launch``; docs/runtime.md, "Merged launches").
    ``sync``: how fork and join are
    enqueued (``runtime.streams.ForkJoin``). ``specs`` is the
    ``KernelSpec`` per issue; after ``prepare``: ``kernels`` (mode ->
    compiled ``PrefetchKernel``), ``side`` (the side stream), ``table`` (the
    ``FillTable``) and ``fork_join``. Raises ``ValueError`` for an unknown
    ``sync``, an unknown ``capture_launch`` or a kernel spec that cannot be
    built."""

    SYNCS = SYNCS
    CAPTURE_LAUNCHES = CAPTURE_LAUNCHES

    def __init__(self, plan: Plan, *, device: int | None = None,
                 fill: Mapping | None = None, fill_default: str = "bulk",
                 mode: str | None = None, grid: int | None = None,
                 threads: int | None = None, chunk: int | None = None,
                 stages: int | None = None, sync: str = "auto",
                 set_aside_owner: str | None = None,
                 capture_launch: str = DEFAULT_CAPTURE_LAUNCH, **kw):
        super().__init__(plan, **kw)
        if sync not in SYNCS:
            raise ValueError(f"unknown sync {sync!r} ({', '.join(SYNCS)})")
        self.device = device
        self._mode, self._fill_default = mode, fill_default
        #: launch group (``issue_launch``'s tuple) -> ``_group_span``
        self._group_spans: dict[tuple, object] = {}
        self.specs = issue_specs(plan, fill, fill_default, mode=mode, grid=grid,
                                 threads=threads, chunk=chunk, stages=stages)
        self.sync = sync
        #: who the persisting-L2 request belongs to (``runtime.set_aside``)
        self.set_aside_owner = set_aside_owner or f"plan {plan.schedule} #{id(self):x}"
        self._set_aside_device: int | None = None
        self.table = FillTable(plan)
        self.rows = self.table.rows
        self.kernels: dict[K.KernelSpec, K.PrefetchKernel] = {}
        self.side = None
        self.fork_join = None
        self.switch_word: SwitchWord | None = None
        self._ready = False
        self._pending = False
        self.capture_launch = check_capture_launch(capture_launch)
        # fills held back in a capture: (issue, row begin, row end, the
        # model stream's capture dependencies at the hook or None)
        self._deferred: list[tuple[int, int, int, tuple | None]] = []
        self._capture_deps: CaptureDeps | None = None
        self._node_launch: dict[tuple[int, int], object] = {}  # (issue, stream) -> launch
        self._warned_dirty = False
        #: fills whose hook is followed by a programmatic launch, found in
        #: FULL captures (``runtime.pdl_watch``; ``stats.programmatic_late``)
        self.pdl_watch = ProgrammaticWatch()
        # gate_pair of the last StepInfo object seen (identity-cached), and
        # the decision when the capture state cannot change it (else None).
        self._gate_step: StepInfo | None = None
        self._gate_nocap = self._gate_cap = self._gate_fixed = GATE_DECISIONS["eager"]

    def _capturing(self, step: StepInfo) -> bool:
        if step.capturing is not None:
            return step.capturing
        return self.fork_join is not None and bool(self.fork_join.is_capturing())

    def disable(self, why: str) -> None:
        """Turn prefetch off for this runtime, logging ``why`` once."""
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
        try:
            import torch
        except Exception as e:  # pragma: no cover
            self.disable(f"torch unavailable ({e})")
            return False
        self._torch = torch
        ok, why = K.device_supported(self.device or 0)
        if not ok:
            K.disable(why)  # the one log line
            self.enabled = False
            return False
        try:
            dev = torch.cuda.current_device() if self.device is None else self.device
            self.device = dev
            for spec in dict.fromkeys(self.specs):  # each distinct kernel once
                kern = K.get_kernel(dev, spec)
                if kern is None:
                    self.enabled = False  # the kernel module logged why, once
                    return False
                self.kernels[spec] = kern
            if self.capture_launch in NODE_LAUNCHES:
                self._capture_deps = CaptureDeps()
            self.side = side_stream(dev)
            self.fork_join = ForkJoin(torch, dev, self.side, self.sync)
            self.sync = self.fork_join.sync
            self.table.allocate(torch, dev)
            self.switch_word = SwitchWord(torch, dev, on=self.fills_on)
            self._launches = {}
            for spec, kern in self.kernels.items():
                self._launches[spec] = kern.bind(self.table.device_ptr,
                                                 self.side.cuda_stream,
                                                 self.switch_word.ptr)
            self._launch_of = [self._launches[s] for s in self.specs]
            if self.plan.set_aside != 0:
                capturing = bool(torch.cuda.is_current_stream_capturing())
                if apply_set_aside(dev, self.plan.set_aside, self.set_aside_owner,
                                   capturing=capturing) is not None:
                    self._set_aside_device = dev
            if not torch.cuda.is_current_stream_capturing():
                self._warm_launch()
        except Exception as e:
            self.disable(f"runtime setup failed: {type(e).__name__}: {e}")
            return False
        return True

    @property
    def kernel(self):
        """The compiled kernel of the first issue (``None`` before
        ``prepare``); ``kernels`` has every one."""
        return self.kernels.get(self.specs[0]) if self.specs else None

    def _warm_launch(self) -> None:
        """An empty launch (no rows) of every kernel on the side stream,
        outside any capture: loads the modules and checks the launch paths,
        so the first launch inside a capture makes no module-loading driver
        call."""
        for spec in list(self._launches):
            try:
                self._launches[spec](0, 0)
            except Exception:
                if not self._fallback(spec):
                    raise
                self._launches[spec](0, 0)

    def _fallback(self, spec) -> bool:
        """Switch kernel ``spec`` to the generic launch path after a TVM-FFI
        call raised; whether there is one."""
        kern = self.kernels[spec]
        new = K.fallback_to_generic(kern) if kern.ffi else None
        if new is None:
            return False
        self.kernels[spec] = new
        self._launches[spec] = new.bind(self.table.device_ptr, self.side.cuda_stream,
                                        self.switch_word.ptr)
        self._launch_of = [self._launches[s] for s in self.specs]
        self._node_launch.clear()
        return True

    def set_rows(self, index: int, rows: Sequence[tuple[int, int]]) -> bool:
        """Bind issue ``index`` to ``rows`` (``(address, nbytes)``; more rows
        than the issue's ranges is an error). Outside a capture the device
        table is updated at once (on the side stream, after earlier fills);
        during a capture it is deferred and the issue is skipped until then."""
        self.table.set(index, rows)
        if not self.prepare():
            return False
        return self._flush()

    def switch(self, on: bool) -> bool:
        """``RuntimeBase.switch``: writes the device switch word every fill
        kernel reads (``runtime.switch.SwitchWord.set``), so CUDA graphs
        captured earlier fill or not from their next replay. Before
        ``prepare`` only the state is kept (the word is made with it).
        Returns False, changing nothing, during a capture."""
        word = self.switch_word
        if word is not None and not word.set(on):
            return False
        self.fills_on = bool(on)
        return True

    def _flush(self) -> bool:
        if not self.table.dirty or not self.enabled:
            return True
        return self.table.flush(self.side)

    def _decision(self):
        """The gate decision for a hook firing now: evaluated once per
        ``StepInfo`` object; the capture state is asked only when it can
        change the decision (warm-up and PIECEWISE steps)."""
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
            d = self._gate_cap if self.fork_join.is_capturing() else self._gate_nocap
        return d

    def fill_kernel_of(self, window_issue: WindowIssue) -> str:
        """``RuntimeBase.fill_kernel_of``: the issue's resolved fill mode
        (the ``mode`` override, else the schedule's ``kernel``, else
        ``fill_default``). Within one runtime the mode names the whole
        ``KernelSpec`` (the launch shape comes from the mode, the overrides
        and the plan's policy), so issues grouped by it share one kernel."""
        return self._mode or window_issue.kernel or self._fill_default

    def issue(self, index: int | WindowIssue) -> bool:
        """Gate, then fork the side stream from the current stream and launch
        the fill of issue ``index`` there. Returns whether a fill was enqueued
        (or captured). Never raises on CUDA/kernel trouble: it disables.

        Host cost (benchmarks/host_cost.py): the gate as in ``_decision``,
        then two driver calls (fork) and the launch, with no allocation."""
        i = index if isinstance(index, int) else self.index_of(index)
        return self._issue((i,), i, self.table.spans[i], 1)

    def issue_launch(self, indices: Sequence[int]) -> bool:
        """Gate once, then one fork and ONE fill launch over the table rows
        of the issues ``indices`` (a tuple: one group of ``launch_groups``,
        consecutive issues of one hook point with one kernel, so their rows
        are one span ``[offsets[first], offsets[last + 1])``). ``stats``
        count per issue (``issued``: the issues with rows; ``bytes_issued``:
        their bound bytes; ``skipped``: every issue of the group), plus one
        in ``stats.launches``. One index is ``issue``; indices that are not
        such a group are issued one by one. Returns whether a fill was
        enqueued (or captured); never raises on CUDA/kernel trouble (it
        disables)."""
        if len(indices) == 1:
            return self.issue(indices[0])
        if not isinstance(indices, tuple):
            indices = tuple(indices)
        g = self._group_spans.get(indices)
        if g is None:
            g = self._group_spans[indices] = self._group_span(indices)
        if g is False:
            return super().issue_launch(indices)
        return self._issue(indices, *g)

    def _group_span(self, indices: tuple[int, ...]):
        """``(first issue, span, issues with rows)`` of a launch group, or
        False when ``indices`` are not consecutive issues of one kernel."""
        if not indices or list(indices) != list(range(indices[0], indices[0] + len(indices))):
            return False
        if len({self.specs[j] for j in indices}) != 1:
            return False
        b, e = self.table.offsets[indices[0]], self.table.offsets[indices[-1] + 1]
        counted = sum(1 for j in indices if self.table.spans[j] is not None)
        return (indices[0], (b, e) if e > b else None, counted)

    def _issue(self, members: Sequence[int], i: int, span, counted: int) -> bool:
        """``issue``/``issue_launch``: the issues ``members`` at one hook
        point, launched as one fill of kernel ``specs[i]`` over table rows
        ``span`` (``(begin, end)``; ``None``: no rows) that ``counted`` of
        them own."""
        n = len(members)
        if self._thread != get_ident() and self.other_thread():
            self._skip("other-thread", n)
            return False
        if not self._ready:
            self.prepare()
        if not self.enabled:
            self._skip("disabled", n)
            return False
        d = self._decision()
        if not d.issue:
            self._skip(d.reason, n)
            return False
        if not self.fills_on and not self.fork_join.is_capturing():
            self._skip("switched-off", n)  # eager: the host knows; launch nothing
            return False
        if self.table.dirty and not self._flush():
            if not self._warned_dirty:
                self._warned_dirty = True
                log.warning("l2sched: table rows changed during a capture; "
                            "issue skipped until the next eager forward")
            self._skip("unbound-in-capture", n)
            return False
        if span is None:
            return False
        # a deferred fill goes first, while the side stream still waits on
        # its own fork only
        if self._deferred and not self._launch_deferred():
            return False
        b, e = span
        step = self._gate_step
        if (self.pdl_watch.on and (step.warmup or step.capturing)
                and self.fork_join.is_capturing()):
            # only in vLLM's capture phase (or a caller's capture): eager
            # forwards pay one attribute test
            self.pdl_watch.at_hook(i, self.fork_join.current_handle())
        mode = self.capture_launch
        if mode != "fork" and self.fork_join.is_capturing():
            if not self._capture_issue(mode, i, b, e):
                return False
        else:
            self.fork_join.fork()
            # From here the side stream waited on the fork: the join must
            # run even when the launch fails.
            self._pending = True
            if not self._launch(i, b, e):
                return False
        stats = self.stats
        stats.issued += counted
        stats.launches += 1
        nbytes = self.table.nbytes
        stats.bytes_issued += nbytes[i] if n == 1 else sum(nbytes[j] for j in members)
        return True

    def _launch(self, i: int, b: int, e: int) -> bool:
        """Launch issue ``i`` over table rows ``[b, e)`` on the side stream
        (after a fork); on failure, the fallback kernel, else disable.
        Returns whether it was launched."""
        try:
            self._launch_of[i](b, e)
        except Exception as ex:
            if not self._fallback(self.specs[i]):
                self.disable(f"kernel launch failed: {type(ex).__name__}: {ex}")
                return False
            self._launch_of[i](b, e)
        return True

    def adopt(self, plan: Plan) -> bool:
        """``RuntimeBase.adopt`` for the CUDA backend: the kernel, side
        stream, events and the device table (whose address CUDA graphs
        captured earlier hold) stay; the table is cleared in place and
        rewritten as the installer binds the new plan's rows (outside a
        capture, before any replay); the persisting-L2 request follows the
        new plan's ``set_aside``."""
        if not same_layout(self.plan, plan):
            return False
        old_aside = self.plan.set_aside
        self.plan = plan
        self._index = {id(wi): i for i, wi in enumerate(plan.issues)}
        # the kernels stay ``specs`` (compiled for the first plan); a group
        # of the new plan whose issues had other kernels fires one by one
        self._group_spans.clear()
        self.table.clear()
        self.rows = self.table.rows
        self._gate_step = None
        if self._ready and self.enabled and plan.set_aside != old_aside:
            self.close()
            if plan.set_aside != 0 and apply_set_aside(
                    self.device, plan.set_aside, self.set_aside_owner,
                    capturing=bool(self.fork_join.is_capturing())) is not None:
                self._set_aside_device = self.device
        return True

    def flush(self) -> bool:
        """Write pending table rows to the device now (outside a capture);
        whether the table is current."""
        return self._flush() if self._ready else True

    def retire(self) -> None:
        """``RuntimeBase.retire``: the set-aside request is withdrawn, and the
        device table is zeroed and kept alive (``RETIRED``) with the events,
        so a CUDA graph captured with this runtime replays fills of nothing
        instead of reading freed memory. Never raises."""
        if getattr(self, "_retired", False):
            return
        self._retired = True
        self.enabled = False
        self.close()
        word = self.switch_word
        if word is not None:
            try:  # graphs captured earlier: their kernels exit at once
                word.set(False)
            except Exception as e:  # never raise into the host program
                log.warning("l2sched: retired plan %r: switch not written: %s: %s",
                            self.plan.schedule, type(e).__name__, e)
        if self._ready and self.table.device_ptr:
            self.table.clear()
            try:
                self.table.flush(self.side)
            except Exception as e:  # never raise into the host program
                log.warning("l2sched: retired plan %r: table not zeroed: %s: %s",
                            self.plan.schedule, type(e).__name__, e)
            RETIRED.append(self)

    def close(self) -> None:
        """The plan is no longer served: withdraw its persisting-L2 request
        (the device's limit goes back to the largest other request, or to
        what it was before the first one; ``runtime.set_aside``). Idempotent;
        never raises."""
        dev, self._set_aside_device = self._set_aside_device, None
        if dev is not None:
            release_set_aside(dev, self.set_aside_owner)

    def join(self) -> None:
        """Make the current stream wait for the side stream's work so far, so
        for the last fill (no-op when nothing was issued since the last join).
        Fills held back in a capture are launched first; fills captured as
        leaves need no join (the graph's end waits for them)."""
        if self._thread != get_ident():
            return
        if self._deferred:
            self._launch_deferred()
        if self.pdl_watch._pending:
            self.pdl_watch.resolve()
            self.stats.programmatic_late = len(self.pdl_watch.late)
            self.stats.memset_nodes = self.pdl_watch.memset_nodes
        if self._pending:
            self.fork_join.join()
            self._pending = False
            self.stats.joined += 1
