"""The step of ``l2sched bench tp`` with real all-reduces: ``TPStepRunner`` (a
``StepRunner`` whose ``collective`` ops are ``torch.distributed.all_reduce``),
its timing events (external CUDA events inside a capture) and the
``CudaRuntime`` that records an event per fill (``timed_runtime``). Units: us,
bytes. torch is imported inside functions only.
"""

from __future__ import annotations

from l2sched.bench.step import FakeEvent, StepRunner
from l2sched.device import DeviceProfile
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.streams import side_stream

#: ``torch.cuda.graph`` capture mode: ``thread_local``, so the NCCL
#: watchdog thread's event queries cannot invalidate a capture.
CAPTURE_MODE = "thread_local"


class TPStepRunner(StepRunner):
    """``StepRunner`` whose ``collective`` ops are
    ``torch.distributed.all_reduce`` (sum) of an ``(M, hidden)`` bf16 buffer
    (``M * hidden * 2`` bytes, on the model's GPU, or on the CPU for a
    meta-device tree) across the default process group.

    ``collective``: ``"dist"`` (default) or ``"spin"`` (the base class's idle
    interval). ``check``: after every all-reduce, compare the whole buffer with
    ``sum(r + 1 for r in ranks)`` (every rank fills it with ``rank + 1``),
    append the verdict to ``ar_checks`` and refill (eager forwards only: it
    synchronizes). ``ar_calls`` counts all-reduces. With ``timing`` on a GPU,
    events are ``external`` while capturing (timing inside a CUDA graph), and
    side-stream events of the base class are not recorded (fill exits come
    from ``TimedCudaRuntime``). ``external_events``: whether this torch has
    external CUDA events (``has_external_events``; False off the GPU)."""

    def __init__(self, model, device_profile: DeviceProfile, *, rank: int, world_size: int,
                 tokens: int = 1, seed: int = 0):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world_size = rank, world_size
        self.collective = "dist"
        self.check = False
        self.ar_calls = 0
        self.ar_checks: list[bool] = []
        self.runtime = None
        super().__init__(model, device_profile, tokens=tokens, seed=seed)
        self.external_events = has_external_events(self.torch) if self.cuda else False
        self._side = None
        if self.cuda:
            self._side = side_stream(self.device.index or 0)

    def set_tokens(self, tokens: int) -> None:
        """Set M (see ``StepRunner.set_tokens``) and the all-reduce buffer."""
        super().set_tokens(tokens)
        torch = self.torch
        dev = self.device if self.cuda else "cpu"
        self.ar_buf = torch.full((tokens, self.hidden), float(self.rank + 1),
                                 dtype=torch.bfloat16, device=dev)

    def _body(self, lay, op) -> None:
        if op.cls != "collective" or self.collective == "spin":
            return super()._body(lay, op)
        self.dist.all_reduce(self.ar_buf)
        self.ar_calls += 1
        if self.check:
            want = self.world_size * (self.world_size + 1) / 2
            self.ar_checks.append(bool((self.ar_buf.float() == want).all()))
            self.ar_buf.fill_(float(self.rank + 1))

    def event(self, stream=None):
        """A timing event on ``stream``; ``external`` during a capture."""
        if not self.cuda:
            return super().event(stream)
        if stream is not None and stream is self._side:
            return FakeEvent(0.0)   # not recorded: see TimedCudaRuntime
        return record_event(self.torch, stream, self.external_events)

    def _mark_fills(self, layer, op) -> None:
        """No side-stream events from the base class (fill exits come from
        ``timed_runtime``; an event on a side stream that was not forked in
        a capture cannot be recorded there)."""

    def step(self, lead_us: float = 0.0) -> None:
        """One decode step; in a timed GPU step the current stream finally
        waits for the side stream (fill-exit events follow the runtime's
        join point, and a capture must not end forked)."""
        rt = self.runtime
        n0 = rt.stats.issued if rt is not None else 0
        super().step(lead_us)
        if (self.timing and self.cuda and rt is not None
                and rt.stats.issued > n0):
            self.torch.cuda.current_stream().wait_stream(self._side)


def has_external_events(torch) -> bool:
    """Whether ``torch.cuda.Event(enable_timing=True, external=True)`` exists
    (timing events inside CUDA graphs; torch >= 2.7)."""
    try:
        torch.cuda.Event(enable_timing=True, external=True)
    except TypeError:
        return False
    return True


def record_event(torch, stream=None, external: bool = False):
    """Record a timing event on ``stream`` (default: current); ``external``
    when capturing and supported, so it can be timed after replays."""
    ext = external and torch.cuda.is_current_stream_capturing()
    e = (torch.cuda.Event(enable_timing=True, external=True) if ext
         else torch.cuda.Event(enable_timing=True))
    e.record(stream) if stream is not None else e.record()
    return e


def timed_runtime(plan, device_index: int, external: bool,
                  device_profile: DeviceProfile | None = None, **shape):
    """A ``CudaRuntime`` for ``plan`` on CUDA device ``device_index`` that, while ``timing`` is
    set, records an event on the current stream before each fork and one on
    the side stream after each fill launch: ``fills`` =
    ``[(issue index, fork event, exit event)]`` (a merged launch,
    ``issue_launch``: one entry, its first issue's index). The exit event's time is
    the fill kernel's exit, not the landing of its lines (bulk mode).
    ``device_profile`` (a ``DeviceProfile``) gives each issue its fill kernel and
    launch shape, as ``runtime.make_runtime`` does for ``bench run`` and the
    lint assumes (without one: bulk, the kernel module's shape); ``shape``
    (``mode``, ``grid``, ...) overrides every issue's (kernel-mode arms)."""

    class TimedCudaRuntime(CudaRuntime):
        timing = False
        fills: list = []

        def issue(self, index):
            if not self.timing:
                return super().issue(index)
            import torch
            fork = record_event(torch, None, external)
            ok = super().issue(index)
            if ok:
                i = index if isinstance(index, int) else self.index_of(index)
                side = side_stream(self.device)
                self.fills.append((i, fork, record_event(torch, side, external)))
            return ok

        def issue_launch(self, indices):
            if not self.timing or len(indices) == 1:  # one issue: ``issue``
                return super().issue_launch(indices)
            import torch
            fork = record_event(torch, None, external)
            ok = super().issue_launch(indices)
            if ok:  # one fill: its first issue's index
                side = side_stream(self.device)
                self.fills.append((indices[0], fork, record_event(torch, side, external)))
            return ok

    fill = ({"fill": device_profile.fill_modes, "fill_default": device_profile.fill_default}
            if device_profile is not None else {})
    rt = TimedCudaRuntime(plan, device=device_index, **fill, **shape)
    rt.fills = []
    return rt
