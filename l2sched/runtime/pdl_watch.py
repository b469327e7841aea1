"""Live detection of programmatic-launch chains in a FULL capture
(docs/runtime.md, "Programmatic-launch chains").

When the model's kernel that follows a hook point is launched with
programmatic stream serialization (programmatic dependent launch, PDL), a
fill forked at the hook starts when that next kernel starts, not at the
hook: 8-25 us late on the H200 in ``../shared/probes/dispatch.cu``
(``../shared/probes/README.md``). ``ProgrammaticWatch`` finds such hooks
in a capture: at the hook it saves the capture's dependencies of the model's
stream (the hooked node(s), ``CaptureDeps.get``); at the end of the forward
(``resolve``, from the runtime's ``join``) it reads the nodes captured after
each of them (``cuGraphNodeGetDependentNodes`` with edge data) and counts the
fill as late when an edge out of a hooked node is programmatic
(``CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC``) or the kernel node it leads to
carries ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``.

It also counts the capture's MEMSET nodes at the same join
(``memset_nodes``, the most of any capture with a hook in it): with a fill
forked in the graph each costs the model's stream about 1.5-2 us per step,
whatever the fill moves (issue 48's bisection,
benchmarks/results/h100-2026-12-07-tax-memset/).

It costs nothing on eager forwards (the runtime asks only during a
capture) and never raises: a driver error logs one line and turns the
detection off; the fills are not affected. Needs ``cuda.bindings`` 12.3 or
newer (imported at first use). Under ``capture_launch launch-order`` the
model's next kernel hangs off the fill, not the hooked node, so this sees
no programmatic edge there.
"""

from __future__ import annotations

import logging

from l2sched.runtime.capture_nodes import CaptureDeps

log = logging.getLogger("l2sched.runtime")


class ProgrammaticWatch:
    """Counts the fills whose hook is followed by a programmatic launch.

    ``at_hook(issue, stream)`` during a capture saves the model stream's
    capture dependencies for issue ``issue`` (index into the plan's issues);
    ``resolve()`` inspects what was captured after them. ``late`` is the set
    of issue indices found late (over every capture so far), ``checked`` the
    set of issue indices inspected; ``memset_nodes`` the MEMSET nodes of the
    largest capture inspected (counted while the join is still inside the
    capture; ``count_memsets`` False after a driver error there, one log
    line, the rest unaffected). ``on`` is False after a driver error or
    without ``cuda.bindings``. ``deps``: a ``CaptureDeps`` (made at first
    use when ``None``)."""

    def __init__(self, deps=None):
        self.on = True
        self.late: set[int] = set()
        self.checked: set[int] = set()
        self._deps = deps
        self._drv = self._invalid = None
        self._pending: list[tuple[int, list]] = []
        self._stream: int | None = None
        self.memset_nodes = 0
        self.count_memsets = True

    def _off(self, why: str) -> None:
        if self.on:
            self.on = False
            self._pending = []
            log.warning("l2sched: programmatic-launch detection off (prefetch "
                        "unaffected): %s", why)

    def _driver(self):
        if self._drv is None:
            from cuda.bindings import driver as drv
            if self._deps is None:
                self._deps = CaptureDeps()
            self._drv, self._invalid = drv, drv.CUresult.CUDA_ERROR_INVALID_VALUE
            self._dependents = (getattr(drv, "cuGraphNodeGetDependentNodes_v2", None)
                                or drv.cuGraphNodeGetDependentNodes)
            self._ok = drv.CUresult.CUDA_SUCCESS
            self._prog = int(drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
            self._kernel = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
            ids = getattr(drv, "CUkernelNodeAttrID", None) or drv.CUlaunchAttributeID
            self._pss = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            self._memset = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET
        return self._drv

    def at_hook(self, issue: int, stream: int) -> None:
        """Save the capture dependencies of the stream with raw handle
        ``stream`` (the model's, being captured) for issue ``issue``. Call it
        at the hook, before the fill is added. Never raises."""
        if not self.on:
            return
        try:
            self._driver()
            nodes, _ = self._deps.get(stream)
        except Exception as e:
            self._off(f"{type(e).__name__}: {e}")
            return
        self._pending.append((issue, nodes))
        self._stream = stream

    def resolve(self) -> None:
        """Inspect the nodes captured after each saved hook (call it once
        the model's next kernels are captured: at the join) and add the
        late ones to ``late``. Never raises."""
        pending, self._pending = self._pending, []
        if not self.on:
            return
        stream, self._stream = self._stream, None
        try:
            for issue, nodes in pending:
                self.checked.add(issue)
                if any(self._programmatic_after(n) for n in nodes):
                    self.late.add(issue)
        except Exception as e:
            self._off(f"{type(e).__name__}: {e}")
            return
        if stream is None or not self.count_memsets:
            return
        try:
            graph = self._deps.graph(stream)
        except Exception:  # the join ran after the capture ended (PIECEWISE): nothing to count
            return
        try:
            self.memset_nodes = max(self.memset_nodes, self._count_memsets(graph))
        except Exception as e:
            self.count_memsets = False
            log.warning("l2sched: MEMSET-node count off (prefetch unaffected): %s: %s",
                        type(e).__name__, e)

    def _count_memsets(self, graph) -> int:
        """MEMSET nodes of ``graph`` (the capture in progress). Raises
        ``RuntimeError`` on a driver error."""
        drv = self._drv
        err, _, n = drv.cuGraphGetNodes(graph, 0)
        if err != self._ok:
            raise RuntimeError(f"cuGraphGetNodes: {err}")
        err, nodes, n = drv.cuGraphGetNodes(graph, n)
        if err != self._ok:
            raise RuntimeError(f"cuGraphGetNodes: {err}")
        count = 0
        for node in list(nodes[:n]):
            err, kind = drv.cuGraphNodeGetType(node)
            if err != self._ok:
                raise RuntimeError(f"cuGraphNodeGetType: {err}")
            count += kind == self._memset
        return count

    def _programmatic_after(self, node) -> bool:
        """Whether an edge out of ``node`` is programmatic or leads to a
        kernel node launched with programmatic stream serialization.
        Raises ``RuntimeError`` on a driver error."""
        drv = self._drv
        out = self._dependents(node, 0)
        if out[0] != self._ok:
            raise RuntimeError(f"cuGraphNodeGetDependentNodes: {out[0]}")
        n = out[-1]
        if not n:
            return False
        out = self._dependents(node, n)
        if out[0] != self._ok:
            raise RuntimeError(f"cuGraphNodeGetDependentNodes: {out[0]}")
        nodes = list(out[1][:out[-1]])
        edges = list(out[2][:out[-1]]) if len(out) == 4 and out[2] is not None else []
        if any(e is not None and int(e.type) == self._prog for e in edges):
            return True
        for dep in nodes:
            err, kind = drv.cuGraphNodeGetType(dep)
            if err != self._ok:
                raise RuntimeError(f"cuGraphNodeGetType: {err}")
            if kind != self._kernel:
                continue
            err, value = drv.cuGraphKernelNodeGetAttribute(dep, self._pss)
            if err == self._invalid:
                # a captured kernel node launched without the attribute (seen
                # on an H100, driver 580.159.04): not programmatic; a PDL
                # launch shows as a programmatic edge above
                continue
            if err != self._ok:
                raise RuntimeError(f"cuGraphKernelNodeGetAttribute: {err}")
            if int(value.programmaticStreamSerializationAllowed):
                return True
        return False
