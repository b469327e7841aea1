"""What every runtime backend shares: the plan, the step state, the bound
rows of every issue and the gate (``runtime.gate``).

A runtime serves one ``Plan`` on one device. The installer
(``runtime.install``) binds every ``WindowIssue`` of the plan to rows
``(address, nbytes)`` and calls

* ``set_rows(index, rows)`` when an issue's rows are first known or change
  (weight reload: CUDA graphs bake raw addresses in, so the device table is
  updated in place and later replays follow it);
* ``issue(index)`` at the issue's hook point: the gate decides; if it
  passes, the fill of that issue's rows is enqueued on the side stream;
  ``issue_launch(indices)`` does the same for the issues of one launch
  group (``launch_groups``: consecutive issues of one hook point with one
  fill kernel) with one fork and one fill launch over all their rows;
* ``join()`` once per model forward: the current stream waits on the side
  stream's last fill (before any pipeline-parallel early return, and before
  a capture ends, else the capture ends forked).

``switch(on)`` is the run-time switch (``runtime.switch``): switched off,
an eager forward issues nothing (gate reason ``switched-off``) while a
capture still records every fill, whose kernels then exit at once on each
replay until the switch is turned on again; no recapture either way.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from l2sched.compiler.plan import Plan, WindowIssue
from l2sched.runtime.gate import GateDecision, StepInfo, gate

log = logging.getLogger("l2sched.runtime")


def same_layout(a: Plan, b: Plan) -> bool:
    """Whether plans ``a`` and ``b`` have the same fill-table layout (the
    number of byte ranges of every issue, in order) and cache policy, so one
    runtime's table and kernel serve both."""
    return (a.policy == b.policy and len(a.issues) == len(b.issues)
            and all(len(x.ranges) == len(y.ranges) for x, y in zip(a.issues, b.issues)))


def group_issues(issues: Sequence[WindowIssue], kernel_of: Callable[[WindowIssue], Hashable],
                 merge: bool = True) -> list[tuple[int, ...]]:
    """The launch groups of ``issues`` (a plan's, in plan order): runs of
    consecutive issues with the same layer, hook point and fill kernel
    (``kernel_of(issue)``: anything comparable that names the kernel and its
    launch shape, e.g. the resolved fill mode), as tuples of issue indices,
    in order; every index is in exactly one group. Consecutive issues own
    consecutive rows of the fill table (``runtime.table``), so a group's
    rows are one span. ``merge`` False: one group per issue. Issues of one
    hook point that are not consecutive (a plan not in (layer, hook order)
    order) stay separate groups."""
    groups: list[list[int]] = []
    last = None
    for i, wi in enumerate(issues):
        key = (wi.layer, wi.hook, kernel_of(wi))
        if merge and groups and key == last:
            groups[-1].append(i)
        else:
            groups.append([i])
        last = key
    return [tuple(g) for g in groups]


@dataclass
class RuntimeStats:
    """Counters since creation: ``issued``/``joined`` calls that did work
    (``issued`` counts issues: a merged launch of three issues adds 3),
    ``launches`` the fill launches that did (a merged launch adds 1; one per
    issued issue without merging), ``skipped`` per gate reason (per issue),
    ``bytes_issued`` (bytes, from bound rows), ``programmatic_late``: issues (of the plan) whose hook a FULL capture
    showed followed by a kernel launched with programmatic stream
    serialization, so their fill starts when that kernel starts, and
    ``memset_nodes``: the MEMSET nodes of the largest FULL capture with a fill
    hook in it, each a cost beside forked fills (``runtime.pdl_watch``; CUDA
    backend only)."""

    issued: int = 0
    joined: int = 0
    bytes_issued: int = 0
    skipped: dict = field(default_factory=dict)
    programmatic_late: int = 0
    launches: int = 0
    memset_nodes: int = 0


class RuntimeBase:
    """Shared bookkeeping of the backends: the plan, the step state, the bound
    rows of every issue (index into ``plan.issues``) and the gate.

    ``step`` is the current ``StepInfo``; set it with ``set_step`` before each
    forward, or give ``step_provider`` (a callable returning a ``StepInfo``,
    called once per ``issue``). ``merge_fills`` (default True): the issues
    of one hook point with one fill kernel are one launch group
    (``launch_groups``), which the installer fires with one
    ``issue_launch``; False: one group per issue (every issue its own fork
    and launch, as before issue 48)."""

    def __init__(self, plan: Plan, *,
                 step_provider: Callable[[], StepInfo] | None = None,
                 merge_fills: bool = True):
        self.plan = plan
        self.merge_fills = bool(merge_fills)
        self.step = StepInfo()
        self.step_provider = step_provider
        self.stats = RuntimeStats()
        self.rows: list[list[tuple[int, int]]] = [[] for _ in plan.issues]
        self._index = {id(wi): i for i, wi in enumerate(plan.issues)}
        self.enabled = True
        #: the run-time switch (``switch``): fills move bytes when True
        self.fills_on = True
        # the thread that issued first: the only one that issues and joins
        # (``other_thread``)
        self._thread: int | None = None
        self._warned_thread = False

    def fill_kernel_of(self, window_issue: WindowIssue) -> Hashable:
        """What names ``window_issue``'s fill kernel for grouping
        (``group_issues``): here the schedule's ``kernel`` (``""``: the
        default); backends that resolve kernels override it."""
        return window_issue.kernel

    def groups_of(self, plan: Plan) -> list[tuple[int, ...]]:
        """``group_issues`` of ``plan``'s issues with this runtime's kernels
        and ``merge_fills`` (for ``plan`` itself or one of its subsets, e.g.
        the issues that can fire)."""
        return group_issues(plan.issues, self.fill_kernel_of, self.merge_fills)

    @property
    def launch_groups(self) -> list[tuple[int, ...]]:
        """The launch groups of this runtime's plan (``groups_of``), as
        tuples of issue indices: the installer places one hook action per
        group and fires a group of several issues with ``issue_launch``."""
        groups = self._groups
        if groups is None or groups[0] is not self.plan:
            groups = self._groups = (self.plan, self.groups_of(self.plan))
        return groups[1]

    _groups: tuple | None = None

    def issue_launch(self, indices: Sequence[int]) -> bool:
        """Fire the issues ``indices`` (one launch group of
        ``launch_groups``) at their hook point. Here: ``issue`` of each, in
        order (a backend that cannot merge); the backends launch them as
        one fill. Returns whether any fill was enqueued."""
        done = False
        for i in indices:
            done = self.issue(i) or done
        return done

    def index_of(self, window_issue: WindowIssue) -> int:
        """Index of ``window_issue`` in ``plan.issues`` (by identity, then by
        value). Raises ``KeyError`` when it is not one of the plan's."""
        i = self._index.get(id(window_issue))
        if i is None:
            i = self.plan.issues.index(window_issue)  # ValueError -> KeyError
        return i

    def other_thread(self) -> bool:
        """Whether the caller is not the runtime's thread (the first thread
        that issued). A runtime's fork/join events and pending join serve
        one stream of forwards; a forward in another thread (vLLM's DBO
        micro-batch threads) is skipped (``other-thread``), with one warning
        per runtime."""
        t = threading.get_ident()
        if self._thread is None:
            self._thread = t
        if t == self._thread:
            return False
        if not self._warned_thread:
            self._warned_thread = True
            log.warning("l2sched: plan %r: fills from a second thread skipped "
                        "(one runtime serves the forwards of one thread)",
                        self.plan.schedule)
        return True

    def switch(self, on: bool) -> bool:
        """Turn this plan's fills on or off at run time (``runtime.switch``).
        Returns False, changing nothing, when the switch cannot be written
        now (the CUDA backend during a capture)."""
        self.fills_on = bool(on)
        return True

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

    def _skip(self, reason: str, n: int = 1) -> None:
        self.stats.skipped[reason] = self.stats.skipped.get(reason, 0) + n

    def set_rows(self, index: int, rows: Sequence[tuple[int, int]]) -> bool:
        """Bind issue ``index`` to ``rows`` of ``(address, bytes)`` (16-byte
        aligned, multiples of 16; a ``(0, 0)`` row is an unresolved range).
        Returns False when the rows cannot be applied now (they are kept and
        applied later)."""
        self.rows[index] = [(int(a), int(n)) for a, n in rows]
        return True

    def close(self) -> None:
        """The plan is no longer served: give back device-wide state (the
        CUDA backend's persisting-L2 request). Idempotent."""

    def flush(self) -> bool:
        """Make bound rows current where the fills read them (the CUDA
        backend's device table); whether they are."""
        return True

    def retire(self) -> None:
        """Stop for good: ``close()``, and make whatever may still launch
        this runtime's fills (a CUDA graph captured earlier) fill nothing.
        Idempotent."""
        self.enabled = False
        self.close()

    def adopt(self, plan: Plan) -> bool:
        """Serve ``plan`` (a recompiled plan after a weight reload) in place
        of the current one, keeping everything a captured CUDA graph refers
        to, when ``same_layout``; every issue is unbound afterwards (the
        installer binds the new rows). Returns False, changing nothing,
        when the layout differs."""
        if not same_layout(self.plan, plan):
            return False
        self.plan = plan
        self.rows = [[] for _ in plan.issues]
        self._index = {id(wi): i for i, wi in enumerate(plan.issues)}
        return True

    def issue(self, index: int | WindowIssue) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def join(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
