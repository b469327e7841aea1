"""The gate: whether a hook firing issues its fill, from what the serving
engine knows about the forward in progress.

Rules (docs/sources.md#runtime-rules and #vllm-graph-modes): decode steps of
at most ``plan.max_tokens`` tokens only, never prefill; eager serving and
FULL CUDA-graph capture prefetch; a breakable (PIECEWISE) capture and the
uncaptured warm-up forwards right before a capture do not (side-stream work
crossing a capture boundary gives unjoined-capture errors or illegal memory
accesses).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepInfo:
    """What the serving engine knows about the forward in progress.

    ``num_tokens``: tokens in this step (``None`` = unknown, not gated on);
    ``is_prefill``: the step contains prefill; ``graph_mode``: the CUDA-graph
    mode this forward runs or is captured in (``units.GRAPH_MODES``); ``warmup``: an
    uncaptured warm-up forward right before a capture; ``capturing``: override
    of ``torch.cuda.is_current_stream_capturing()`` (``None`` = ask torch; the
    dry-run backend treats ``None`` as not capturing). vLLM V2 reports mode
    NONE during a FULL capture, so capture itself is detected through torch."""

    num_tokens: int | None = None
    is_prefill: bool = False
    graph_mode: str = "eager"
    warmup: bool = False
    capturing: bool | None = None


@dataclass(frozen=True)
class GateDecision:
    """``issue``: whether to fill now; ``reason``: a short stable word for
    stats and logs (``eager``, ``full-capture``, ``prefill``, ``too-many-tokens``,
    ``piecewise-capture``, ``warmup``, ``disabled``)."""

    issue: bool
    reason: str


#: The decision of every gate reason (one object each, so decisions compare
#: by identity).
GATE_DECISIONS = {r: GateDecision(ok, r) for ok, r in (
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
        return GATE_DECISIONS["disabled"]
    if step.is_prefill:
        return GATE_DECISIONS["prefill"]
    if step.num_tokens is not None and step.num_tokens > max_tokens:
        return GATE_DECISIONS["too-many-tokens"]
    if capturing:
        if step.graph_mode == "piecewise":
            return GATE_DECISIONS["piecewise-capture"]
        return GATE_DECISIONS["full-capture"]
    if step.warmup:
        return GATE_DECISIONS["warmup"]
    return GATE_DECISIONS["eager"]


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
