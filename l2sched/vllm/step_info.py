"""What the runtime's gate needs to know about vLLM's forward in progress
(``vllm_step_info``): tokens, prefill, the CUDA-graph mode, and whether the
forward is an uncaptured warm-up inside vLLM's ``graph_capture``
(``track_graph_capture``). The vLLM names read here are in
``drift.NAMES``: resolved before anything is installed, a missing one is a
drift line and prefetch stays off."""

from __future__ import annotations

import contextlib
import logging
import threading

from l2sched.runtime.gate import StepInfo

#: vLLM's ``CUDAGraphMode`` name (lower-cased) at runtime -> ``StepInfo``
#: graph mode (``units.GRAPH_MODES``).
_GRAPH_MODE = {"none": "eager", "full": "full", "piecewise": "piecewise"}

_capture_lock = threading.Lock()
_capture_depth = 0
#: Called (no arguments) each time vLLM's ``graph_capture`` is left
#: (``after_capture``).
_after_capture: list = []


def after_capture(callback) -> None:
    """Call ``callback()`` each time vLLM's ``graph_capture`` is left (once
    ``track_graph_capture`` wrapped it); registered once per callable. An
    exception in it is logged at DEBUG, never raised into vLLM."""
    if callback not in _after_capture:
        _after_capture.append(callback)


def _run_after_capture() -> None:
    for cb in list(_after_capture):
        try:
            cb()
        except Exception as e:  # never raise into vLLM
            logging.getLogger("l2sched.vllm").debug(
                "l2sched: after-capture callback failed: %s: %s", type(e).__name__, e)


def in_capture_phase() -> bool:
    """Whether vLLM's ``graph_capture`` is entered anywhere in the process.
    Process-wide, not per thread: vLLM 0.33.0's ubatch (DBO) wrapper runs
    forwards in worker threads while the main thread holds the capture."""
    return _capture_depth > 0


@contextlib.contextmanager
def capture_phase():
    """Mark the process as inside vLLM's capture phase for the ``with``
    body (nests; balanced on error)."""
    global _capture_depth
    with _capture_lock:
        _capture_depth += 1
    try:
        yield
    finally:
        with _capture_lock:
            _capture_depth -= 1


def track_graph_capture() -> None:
    """Wrap ``GroupCoordinator.graph_capture`` (entered by vLLM around all
    CUDA-graph warm-ups and captures) to know when a forward is an uncaptured
    warm-up right before a capture. Idempotent."""
    from vllm.distributed import parallel_state as ps

    cls = ps.GroupCoordinator
    orig = cls.graph_capture
    if getattr(orig, "__l2sched__", False):
        return

    @contextlib.contextmanager
    def graph_capture(self, *args, **kwargs):
        with capture_phase(), orig(self, *args, **kwargs) as ctx:
            yield ctx
        _run_after_capture()

    graph_capture.__l2sched__ = True
    graph_capture.__wrapped__ = orig
    cls.graph_capture = graph_capture


def _has_prefill(md) -> bool:
    if md is None:
        return False
    if isinstance(md, list):
        return any(_has_prefill(m) for m in md)
    if isinstance(md, dict):
        return any(_has_prefill(m) for m in md.values())
    return bool(getattr(md, "num_prefills", 0) or 0)


def _tokens(ctx) -> int | None:
    bd = getattr(ctx, "batch_descriptor", None)
    if bd is not None:
        return int(bd.num_tokens)
    md = ctx.attn_metadata
    if isinstance(md, list):
        md = md[0] if md else None
    if isinstance(md, dict):
        md = next(iter(md.values()), None)
    n = getattr(md, "num_actual_tokens", None)
    return int(n) if n is not None else None


def vllm_step_info():
    """``StepInfo`` of the forward in progress, from vLLM's forward context:
    tokens (batch descriptor, else attention metadata), prefill (any
    attention metadata with ``num_prefills``), graph mode
    (``cudagraph_runtime_mode``), and warm-up (inside vLLM's
    ``graph_capture`` but not capturing). Capture itself is detected by the
    runtime through torch (vLLM V2 reports mode NONE during a FULL capture)."""
    try:
        from vllm.forward_context import (
            get_forward_context,
            is_forward_context_available,
        )
        if not is_forward_context_available():
            return StepInfo(warmup=in_capture_phase())
        ctx = get_forward_context()
    except Exception:
        return StepInfo(warmup=in_capture_phase())
    mode = getattr(ctx.cudagraph_runtime_mode, "name", "NONE").lower()
    return StepInfo(num_tokens=_tokens(ctx), is_prefill=_has_prefill(ctx.attn_metadata),
                    graph_mode=_GRAPH_MODE.get(mode, "eager"),
                    warmup=in_capture_phase())
