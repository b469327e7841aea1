"""Fills captured as nodes of the model stream's own capture, with explicit
edges (CUDA's capture-dependency API), instead of a branch forked onto the
side stream and joined back.

How a fill enters a FULL capture (``CAPTURE_LAUNCHES``):

- ``fork``: the side stream waits on an event recorded on the model's
  stream, the fill is launched there at once, and one join at the end of
  the forward makes the model's stream wait for the side stream. The fills
  form one chain, a branch of the graph from the first fork to the join.
- ``deferred``: as ``fork``, but the fill is launched at the next hook or at
  the join, so the capture records the model's next kernel as the hooked
  op's first child.
- ``leaf``: the fill is launched on the model's stream, then the stream's
  capture dependencies are set back to what they were before it
  (``cuStreamUpdateCaptureDependencies``). The fill depends on the hooked op
  only; nothing depends on the fill, and the graph's end waits for it like
  for any node. No side stream, no fork/join, no chain between fills.
- ``leaf-deferred``: as ``leaf``, recorded after the model's next kernel (at
  the next hook or the join) with the dependencies saved at its hook.
- ``launch-order``: the fill is launched on the model's stream and the next
  captured node depends on the fill's launch-order port
  (``CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER``: all its blocks have begun),
  not its completion, so the graph stays one chain. CUDA calls this best
  effort: the next node may wait for the fill's completion.

Why: on the lent H200 a side-stream fill of almost nothing cost the
captured step 2-6 us per fill when the shared experts ran on their own aux
stream, and the cost followed how the capture records the branches
(``benchmarks/results/h200-2026-12-01-diag-*.md``, ``-deferred.md``). Measured on it
(``benchmarks/results/h200-2026-12-03-capture-launches/``): no choice removes that cost
(``leaf`` and ``launch-order`` add to it); ``deferred`` removes most of it at M=16 but not at
M=4, and is no better than ``fork`` for the fitted schedule, so ``fork`` stays the default.
Sources for the API: CUDA Driver API, "Stream Management"
(``cuStreamGetCaptureInfo``, ``cuStreamUpdateCaptureDependencies``) and
``CUgraphEdgeData``. Needs ``cuda.bindings`` (12.3 or newer); nothing here
imports it at module import.
"""

from __future__ import annotations

#: How a fill enters a FULL capture (module docstring). Eager forwards use
#: the side stream's fork/join whatever the choice.
CAPTURE_LAUNCHES = ("fork", "deferred", "leaf", "leaf-deferred", "launch-order")
#: The runtime's choice unless told otherwise (``CudaRuntime``, the vLLM plugin's
#: ``capture_launch``): no other choice met issue 36's rule on the lent H200
#: (``benchmarks/results/h200-2026-12-03-capture-launches/``).
DEFAULT_CAPTURE_LAUNCH = "fork"
#: The choices that launch the fill on the model's own stream in a capture.
NODE_LAUNCHES = ("leaf", "leaf-deferred", "launch-order")
#: The choices that record the fill after the model's next kernel.
DEFERRED_LAUNCHES = ("deferred", "leaf-deferred")


def check_capture_launch(value: str) -> str:
    """``value`` if it is one of ``CAPTURE_LAUNCHES``; else ``ValueError``
    naming the choices."""
    if value not in CAPTURE_LAUNCHES:
        raise ValueError(f"unknown capture launch {value!r} "
                         f"({', '.join(CAPTURE_LAUNCHES)})")
    return value


class CaptureDeps:
    """The capture-dependency calls on raw stream handles, for the
    ``cuda.bindings`` of CUDA 12.3+ (``cuStreamGetCaptureInfo_v3``,
    ``cuStreamUpdateCaptureDependencies_v2``) and 13.x (the same calls
    without the suffix). ``get(stream)`` -> ``(nodes, edges)``: the nodes the
    stream's next captured node will depend on and the edge data of each;
    ``set(stream, nodes, edges)`` replaces that set. Raises ``ImportError``
    without ``cuda.bindings``; the calls raise ``RuntimeError`` with the
    driver's error."""

    def __init__(self):
        from cuda.bindings import driver as drv
        self._drv = drv
        self._get = getattr(drv, "cuStreamGetCaptureInfo_v3", None) or drv.cuStreamGetCaptureInfo
        self._upd = (getattr(drv, "cuStreamUpdateCaptureDependencies_v2", None)
                     or drv.cuStreamUpdateCaptureDependencies)
        self._set_flag = int(drv.CUstreamUpdateCaptureDependencies_flags
                             .CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        self._active = drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
        self._ok = drv.CUresult.CUDA_SUCCESS
        self._streams: dict[int, object] = {}
        edge = drv.CUgraphEdgeData()
        edge.from_port = int(drv.CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
        edge.type = int(drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
        #: the edge from a fill's launch-order port (``launch-order``)
        self.launch_order_edge = edge

    def _cu(self, handle: int):
        s = self._streams.get(handle)
        if s is None:
            s = self._streams[handle] = self._drv.CUstream(handle)
        return s

    def _info(self, handle: int) -> tuple:
        """``cuStreamGetCaptureInfo`` of the stream with raw handle
        ``handle``: ``(err, status, id, graph, nodes, edges, n)``;
        ``RuntimeError`` when the call fails or the stream is not capturing."""
        out = self._get(self._cu(handle))
        if out[0] != self._ok or out[1] != self._active:
            raise RuntimeError(f"cuStreamGetCaptureInfo: {out[0]}, {out[1]}")
        return out

    def get(self, handle: int) -> tuple[list, list]:
        """The capture dependencies (nodes, edge data) of the stream with raw
        handle ``handle``; ``RuntimeError`` when the call fails or the
        stream is not capturing."""
        nodes, edges, n = self._info(handle)[4:7]
        return list(nodes[:n]), list(edges[:n]) if edges is not None else [None] * n

    def graph(self, handle: int):
        """The graph the stream with raw handle ``handle`` is being captured
        into; ``RuntimeError`` when the call fails or the stream is not
        capturing."""
        return self._info(handle)[3]

    def set(self, handle: int, nodes: list, edges: list) -> None:
        """Replace the capture dependencies of the stream ``handle`` by
        ``nodes`` with ``edges`` (edge data per node; ``None`` entries are
        full-completion edges); ``RuntimeError`` on a driver error."""
        data = [e if e is not None else self._drv.CUgraphEdgeData() for e in edges]
        err, = self._upd(self._cu(handle), nodes, data, len(nodes), self._set_flag)
        if err != self._ok:
            raise RuntimeError(f"cuStreamUpdateCaptureDependencies: {err}")


class CaptureLaunches:
    """The ``capture_launch`` choices other than ``fork`` (module docstring),
    as methods of ``runtime.cuda.CudaRuntime``, which provides what they use:
    ``fork_join``, ``_capture_deps`` (a ``CaptureDeps``), ``_deferred`` (the
    fills held back: ``(issue, begin row, end row, saved dependencies or
    None)``), ``_node_launch`` (bound launches per (issue, stream)),
    ``kernels``, ``specs``, ``table``, ``switch_word``, ``_launch``,
    ``_fallback`` and ``disable``. A mixin, so that the capture API's use
    sits beside its description."""

    def _capture_issue(self, mode: str, i: int, b: int, e: int) -> bool:
        """Issue ``i`` in a FULL capture by ``capture_launch`` ``mode``
        (not ``fork``): hold it back (``deferred``, ``leaf-deferred``) or add
        it to the model stream's capture now (``leaf``, ``launch-order``).
        A driver error disables prefetch (one log line)."""
        if mode == "deferred":
            self.fork_join.fork()
            self._pending = True
            self._deferred.append((i, b, e, None))
            return True
        stream = self.fork_join.current_handle()
        try:
            if mode == "leaf-deferred":
                self._deferred.append((i, b, e, self._capture_deps.get(stream)))
                return True
            deps = self._capture_deps.get(stream)
            if not self._node_launch_of(i, stream, b, e):
                return False
            if mode == "leaf":
                self._capture_deps.set(stream, *deps)
            else:  # launch-order: the next node waits for the fill's blocks to start
                fill, _ = self._capture_deps.get(stream)
                cd = self._capture_deps
                cd.set(stream, fill, [cd.launch_order_edge] * len(fill))
        except RuntimeError as ex:
            self.disable(f"capture launch {mode}: {ex}")
            return False
        return True

    def _node_launch_of(self, i: int, stream: int, b: int, e: int) -> bool:
        """Launch issue ``i`` over rows ``[b, e)`` on the stream with raw
        handle ``stream`` (the model's stream, in a capture); on failure,
        the fallback kernel, else disable. Whether it was launched."""
        key = (i, stream)
        f = self._node_launch.get(key)
        if f is None:
            f = self._node_launch[key] = self.kernels[self.specs[i]].bind(
                self.table.device_ptr, stream, self.switch_word.ptr)
        try:
            f(b, e)
        except Exception as ex:
            if not self._fallback(self.specs[i]):
                self.disable(f"kernel launch failed: {type(ex).__name__}: {ex}")
                return False
            return self._node_launch_of(i, stream, b, e)
        return True

    def _launch_deferred(self) -> bool:
        """Launch the fills held back in a capture (``capture_nodes.DEFERRED_LAUNCHES``), in
        issue order: on the side stream (``deferred``: it still waits on its
        own fork only), or on the model's stream with the capture
        dependencies saved at the fill's hook, which are then set back
        (``leaf-deferred``). Whether all were launched."""
        held, self._deferred = self._deferred, []
        for i, b, e, deps in held:
            if deps is None:
                if not self._launch(i, b, e):
                    return False
                continue
            stream = self.fork_join.current_handle()
            try:
                now = self._capture_deps.get(stream)
                self._capture_deps.set(stream, *deps)
                launched = self._node_launch_of(i, stream, b, e)
                self._capture_deps.set(stream, *now)
            except RuntimeError as ex:
                self.disable(f"capture launch leaf-deferred: {ex}")
                return False
            if not launched:
                return False
        return True
