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

    def get(self, handle: int) -> tuple[list, list]:
        """The capture dependencies (nodes, edge data) of the stream with raw
        handle ``handle``; ``RuntimeError`` when the call fails or the
        stream is not capturing."""
        out = self._get(self._cu(handle))
        err, status = out[0], out[1]
        if err != self._ok or status != self._active:
            raise RuntimeError(f"cuStreamGetCaptureInfo: {err}, {status}")
        nodes, edges, n = out[4], out[5], out[6]
        return list(nodes[:n]), list(edges[:n]) if edges is not None else [None] * n

    def set(self, handle: int, nodes: list, edges: list) -> None:
        """Replace the capture dependencies of the stream ``handle`` by
        ``nodes`` with ``edges`` (edge data per node; ``None`` entries are
        full-completion edges); ``RuntimeError`` on a driver error."""
        data = [e if e is not None else self._drv.CUgraphEdgeData() for e in edges]
        err, = self._upd(self._cu(handle), nodes, data, len(nodes), self._set_flag)
        if err != self._ok:
            raise RuntimeError(f"cuStreamUpdateCaptureDependencies: {err}")
