"""The dry-run backend: records what would be issued (window, layer, hook
point, bytes, order, join) instead of touching a GPU, for CPU checks, the
vLLM plugin's ``dry-run`` backend and ``l2sched explain`` (``explain_step``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from l2sched.compiler.plan import Plan, WindowIssue
from l2sched.runtime.base import RuntimeBase
from l2sched.runtime.gate import StepInfo


@dataclass(frozen=True)
class DryRunEvent:
    """One recorded action. ``op`` is ``fork`` (current stream -> side stream),
    ``launch`` (a fill of ``nbytes`` bytes over ``rows`` table rows; reason
    ``switched-off``: captured while the run-time switch is off, so it moves
    0 bytes until switched on), ``skip`` (gate said no; ``reason``) or ``join`` (current stream waits on the side
    stream). ``order`` counts events from 0. A merged launch (several issues
    of one hook point as one fill, ``issue_launch``) is one ``fork`` and one
    ``launch`` whose ``window`` joins the windows' names with ``+``, in
    issue order (window names are identifiers: ``+`` is no part of one);
    its ``nbytes`` and ``rows`` are the issues' totals."""

    order: int
    op: str
    window: str = ""
    layer: int = -1
    hook: str = ""
    nbytes: int = 0
    rows: int = 0
    reason: str = ""


class DryRunRuntime(RuntimeBase):
    """Records what would be issued instead of touching a GPU.

    Bytes of a launch come from the bound rows when the installer bound them,
    else from the plan (``WindowIssue.nbytes``; lazy whole-tensor ranges count
    0). ``events`` is the ordered record; ``clear()`` empties it.
    ``fill_default``/``mode``: the device profile's default fill mode and a
    mode for every issue, as ``CudaRuntime`` takes them, so the launch
    groups (``launch_groups``; ``merge_fills``) are the CUDA backend's."""

    def __init__(self, plan: Plan, *, fill_default: str = "bulk",
                 mode: str | None = None, **kw):
        super().__init__(plan, **kw)
        self.events: list[DryRunEvent] = []
        self._pending = False
        self._fill_default, self._mode = fill_default, mode

    def fill_kernel_of(self, window_issue: WindowIssue) -> str:
        """The resolved fill mode, as ``CudaRuntime.fill_kernel_of``."""
        return self._mode or window_issue.kernel or self._fill_default

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
        if self._thread != threading.get_ident() and self.other_thread():
            self._skip("other-thread")
            return False
        d = self.decide()
        if not d.issue:
            self._skip(d.reason)
            self._rec("skip", wi, reason=d.reason)
            return False
        rows = self.rows[i]
        nbytes = sum(n for _, n in rows) if rows else wi.nbytes
        nrows = len(rows) if rows else len(wi.ranges)
        reason = d.reason
        if not self.fills_on:
            if d.reason != "full-capture":  # eager: nothing to launch
                self._skip("switched-off")
                self._rec("skip", wi, reason="switched-off")
                return False
            nbytes, reason = 0, "switched-off"  # captured; exits at once
        self._rec("fork", wi)
        self._rec("launch", wi, nbytes=nbytes, rows=nrows, reason=reason)
        self.stats.issued += 1
        self.stats.launches += 1
        self.stats.bytes_issued += nbytes
        self._pending = True
        return True

    def issue_launch(self, indices) -> bool:
        """Gate once, then record one ``fork`` and one ``launch`` for the
        issues ``indices`` (a launch group, ``launch_groups``), as the CUDA
        backend merges them; one ``skip`` per issue when the gate says no.
        A group of one issue is ``issue``."""
        if len(indices) == 1:
            return self.issue(indices[0])
        wis = [self.plan.issues[i] for i in indices]
        n = len(wis)
        if self._thread != threading.get_ident() and self.other_thread():
            self._skip("other-thread", n)
            return False
        d = self.decide()
        reason = d.reason
        if d.issue and not self.fills_on and d.reason != "full-capture":
            d, reason = None, "switched-off"  # eager: nothing to launch
        if d is None or not d.issue:
            for wi in wis:
                self._skip(reason)
                self._rec("skip", wi, reason=reason)
            return False
        nbytes = nrows = 0
        for i, wi in zip(indices, wis):
            rows = self.rows[i]
            nbytes += sum(n for _, n in rows) if rows else wi.nbytes
            nrows += len(rows) if rows else len(wi.ranges)
        if not self.fills_on:
            nbytes, reason = 0, "switched-off"  # captured; exits at once
        merged = dict(window="+".join(wi.window for wi in wis), layer=wis[0].layer,
                      hook=wis[0].hook)
        self.events.append(DryRunEvent(len(self.events), "fork", **merged))
        self.events.append(DryRunEvent(len(self.events), "launch", nbytes=nbytes,
                                       rows=nrows, reason=reason, **merged))
        self.stats.issued += n
        self.stats.launches += 1
        self.stats.bytes_issued += nbytes
        self._pending = True
        return True

    def join(self) -> None:
        """Record ``join`` when a fill is pending since the last join (of
        this runtime's thread)."""
        if self._pending and self._thread == threading.get_ident():
            self._rec("join")
            self.stats.joined += 1
            self._pending = False


def explain_step(plan: Plan, step: StepInfo | None = None, *,
                 fill_default: str = "bulk", merge_fills: bool = True) -> list[DryRunEvent]:
    """The events of one decode step of ``plan`` in issue order, as the
    runtime would produce them: every launch group (``launch_groups``: the
    issues of one hook point with one fill kernel, ``fill_default`` for an
    issue that names none; one per issue with ``merge_fills`` False) fired
    in ``plan.issues`` order (layer, hook order), then one join. ``step``
    defaults to a 1-token eager decode step."""
    rt = DryRunRuntime(plan, fill_default=fill_default, merge_fills=merge_fills)
    rt.set_step(step or StepInfo(num_tokens=1))
    for group in rt.launch_groups:
        rt.issue_launch(group)
    rt.join()
    return rt.events
