"""The side stream and the fork/join between it and the model's stream.

Fork: the side stream waits for the current stream's work so far. Join: the
current stream waits for the side stream's work so far. Both are enqueued
without a host sync, so they are captured into CUDA graphs like any other
stream work. Nothing here imports torch at module import.
"""

from __future__ import annotations

import threading

_side_lock = threading.Lock()
_side_streams: dict[int, object] = {}

#: How fork and join are enqueued (``ForkJoin``).
SYNCS = ("auto", "driver", "torch")


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


class ForkJoin:
    """Fork and join between the current stream of ``device`` and the
    ``side`` stream (a ``torch.cuda.Stream``), with everything a hook firing
    touches resolved once: the raw current-stream query
    (``torch._C._cuda_getCurrentRawStream``), the capture query, two
    pre-created events (fork, done) and the ``sync`` backend's record/wait
    functions. ``sync``: ``driver`` (``cuda.bindings`` ``cuEventRecord``/
    ``cuStreamWaitEvent`` on raw handles), ``torch`` (``torch.cuda.Event``/
    ``Stream`` objects) or ``auto`` (``driver`` when ``cuda.bindings``
    imports, else ``torch``); same ordering either way. ``is_capturing()``
    asks whether the current stream is being captured. Raises
    ``RuntimeError`` when the driver refuses an event; ``ValueError`` for an
    unknown ``sync``."""

    def __init__(self, torch, device: int, side, sync: str = "auto"):
        if sync not in SYNCS:
            raise ValueError(f"unknown sync {sync!r} ({', '.join(SYNCS)})")
        self.device = device
        self.side = side
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._raw = raw if raw is not None else \
            (lambda d: torch.cuda.current_stream(d).cuda_stream)
        cap = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        self.is_capturing = cap if cap is not None else \
            torch.cuda.is_current_stream_capturing
        if sync == "auto":
            try:
                from cuda.bindings import driver  # noqa: F401
                sync = "driver"
            except Exception:
                sync = "torch"
        self.sync = sync
        if sync == "driver":
            self._setup_driver()
        else:
            self._fork_event = torch.cuda.Event()  # timing off by default
            self._done = torch.cuda.Event()
            # the C methods: torch.cuda.Event.record/wait add a Python frame
            base = torch._C._CudaEventBase
            self._record, self._wait = base.record, base.wait
            self._current_stream = torch.cuda.current_stream
            self.fork, self.join = self._fork_torch, self._join_torch

    def _setup_driver(self) -> None:
        from cuda.bindings import driver as drv
        flags = drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
        err, self._fork_event = drv.cuEventCreate(flags)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuEventCreate: {err}")
        err, self._done = drv.cuEventCreate(flags)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuEventCreate: {err}")
        self._record, self._wait = drv.cuEventRecord, drv.cuStreamWaitEvent
        self._cu_stream = drv.CUstream
        self._side_cu = drv.CUstream(self.side.cuda_stream)
        self._cu_streams: dict[int, object] = {}
        self.fork, self.join = self._fork_driver, self._join_driver

    def current_handle(self) -> int:
        """The raw handle of ``device``'s current stream."""
        return self._raw(self.device)

    def _cur(self):
        """The current stream as a ``CUstream`` (cached per raw handle)."""
        h = self._raw(self.device)
        s = self._cu_streams.get(h)
        if s is None:
            s = self._cu_streams[h] = self._cu_stream(h)
        return s

    # The done event is recorded at the join, not after every launch: one
    # driver call per fill less, and the side stream's last fill is still
    # covered.

    def _fork_driver(self) -> None:
        self._record(self._fork_event, self._cur())
        self._wait(self._side_cu, self._fork_event, 0)

    def _join_driver(self) -> None:
        self._record(self._done, self._side_cu)
        self._wait(self._cur(), self._done, 0)

    def _fork_torch(self) -> None:
        self._record(self._fork_event, self._current_stream(self.device))
        self._wait(self._fork_event, self.side)

    def _join_torch(self) -> None:
        self._record(self._done, self.side)
        self._wait(self._done, self._current_stream(self.device))
