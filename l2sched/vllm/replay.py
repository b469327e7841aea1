"""The captured decode step's GPU time, inside a vLLM worker: replay the
model runner's FULL decode CUDA graphs back to back between two CUDA events,
with prefetch switched on, off and off again (``verify.ARMS``).

This is what ``l2sched verify`` (``--timing replay``, its default) and the
plugin's ``verify`` option measure: one engine, one set of weights and
graphs, the switch (``runtime.switch``) flipping the fills with no
recapture. Replaying graphs back to back times the GPU's step without the
host's scheduling and sampling between steps, which made the
``generate``-difference step of ``verify --timing generate`` 10-100x noisier
than the gains it looks for (benchmarks/results/h200-2026-12-03-verify/).

A replay runs the graph on the inputs its persistent buffers hold (the last
step's, or the capture's dummy batch before any request): it recomputes
that step, the same work every arm. Under TP every rank must replay the same
sequence (the graphs hold the all-reduces); ``replay_ab`` is deterministic
given its arguments, so ranks called with the same arguments stay in step.
"""

from __future__ import annotations

from typing import Callable, Sequence

from l2sched.vllm.verify import ARMS, rotation


#: Graph replays per timed arm (one sample), for ``l2sched verify
#: --timing replay`` (its ``--replays`` default) and the plugin's start-up
#: A/B: ~10 steps keep a sample well above the CUDA events' ~1 us resolution
#: at every M (A/A noise 2-7 us on the H200:
#: benchmarks/results/h200-2026-12-03-replay/README.md).
REPLAYS = 10


class ReplayUnavailable(RuntimeError):
    """The worker has no FULL decode CUDA graph for a batch size asked for
    (``enforce_eager``, a ``cudagraph_mode`` without FULL decode graphs, or a
    size outside ``cudagraph_capture_sizes``)."""


def _mode_name(desc) -> str:
    mode = getattr(desc, "cg_mode", None)
    return getattr(mode, "name", str(mode))


def full_decode_graphs(model_runner) -> dict[int, object]:
    """Token count -> ``torch.cuda.CUDAGraph`` of the runner's captured FULL
    decode graphs: one query token per request (``num_reqs == num_tokens``),
    no LoRA, one micro-batch. vLLM 0.33.0's model runner V2 keeps them in
    ``cudagraph_manager.graphs`` (``BatchExecutionDescriptor`` keys,
    ``v1/worker/gpu/cudagraph_utils.py``); V1 in the ``CUDAGraphWrapper``
    that wraps ``model`` in FULL mode (``concrete_cudagraph_entries``,
    ``compilation/cuda_graph.py``). Empty when there is none; never raises."""
    out: dict[int, object] = {}
    graphs = getattr(getattr(model_runner, "cudagraph_manager", None), "graphs", None)
    if isinstance(graphs, dict):  # model runner V2
        for desc, graph in graphs.items():
            n = getattr(desc, "num_tokens", None)
            if (_mode_name(desc) != "FULL" or n is None or graph is None
                    or getattr(desc, "num_active_loras", 0)
                    or getattr(desc, "num_ubatches", 1) != 1
                    or getattr(desc, "num_reqs", None) != n):
                continue
            out[int(n)] = graph
        return out
    wrapper = getattr(model_runner, "model", None)
    entries = getattr(wrapper, "concrete_cudagraph_entries", None)
    if isinstance(entries, dict) and getattr(
            getattr(wrapper, "runtime_mode", None), "name", "") == "FULL":  # V1
        for desc, entry in entries.items():
            n = getattr(desc, "num_tokens", None)
            graph = getattr(entry, "cudagraph", None)
            if (n is None or graph is None or getattr(desc, "has_lora", False)
                    or not getattr(desc, "uniform", True)):
                continue
            out[int(n)] = graph
    return out


def time_replays(graph, replays: int) -> float:
    """Microseconds per replay of ``graph``: ``replays`` back-to-back replays
    on the current stream between two CUDA events (waits for the end event).
    Raises ``ValueError`` for ``replays < 1``."""
    import torch

    if replays < 1:
        raise ValueError(f"replays must be at least 1, got {replays}")
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / replays


def graphs_for(model_runner, batches: Sequence[int]) -> dict[int, object]:
    """The FULL decode graph of each batch size. Raises
    ``ReplayUnavailable`` naming the sizes without one and the captured
    ones."""
    graphs = full_decode_graphs(model_runner)
    missing = [b for b in batches if b not in graphs]
    if missing:
        have = ", ".join(map(str, sorted(graphs))) or "none (eager, or no FULL mode)"
        raise ReplayUnavailable(
            f"no FULL decode CUDA graph for batch size {', '.join(map(str, missing))}; "
            f"captured: {have}")
    return {b: graphs[b] for b in batches}


def replay_ab(model_runner, batches: Sequence[int], *, rounds: int, warmup: int,
              replays: int, switch: Callable[[bool], None],
              timer: Callable[[object, int], float] | None = None
              ) -> dict[int, dict[str, list[float]]]:
    """The interleaved on/off/off2 replay timing of each batch size: per
    batch, ``warmup`` untimed rounds then ``rounds`` timed ones, the arms in
    ``verify.rotation`` order; per arm ``switch(arm == "on")``, one untimed
    replay (the switch's first step), then ``time_replays(graph,
    replays)`` (``timer``, default ``time_replays``). Returns batch -> arm
    -> us per replay, one value per timed round. Raises ``ReplayUnavailable`` before any replay when a batch size
    has no FULL decode graph, ``ValueError`` for ``rounds < 1`` or
    ``replays < 1``; the switch's own errors propagate."""
    if rounds < 1 or replays < 1 or warmup < 0:
        raise ValueError("rounds and replays must be >= 1 and warmup >= 0")
    graphs = graphs_for(model_runner, batches)
    timer = timer or time_replays
    out: dict[int, dict[str, list[float]]] = {}
    for batch in batches:
        graph = graphs[batch]
        got: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for r in range(warmup + rounds):
            for arm in rotation(r):
                switch(arm == "on")
                graph.replay()
                us = timer(graph, replays)
                if r >= warmup:
                    got[arm].append(round(us, 3))
        out[int(batch)] = got
    return out


def _rank_answer(rank: int, answer) -> dict[int, dict[str, list[float]]]:
    """One rank's ``replay_ab`` answer with int batch keys, checked: an
    object of batch -> ``{arm: [us, ...]}`` for every arm of ``ARMS``, each
    time a finite number. Raises ``ValueError`` naming the rank."""
    if not isinstance(answer, dict):
        raise ValueError(f"rank {rank} answered {type(answer).__name__}, not "
                         "{batch: {arm: [us per round]}}")
    out: dict[int, dict[str, list[float]]] = {}
    for b, arms in answer.items():
        try:
            batch = int(b)
        except (TypeError, ValueError):
            raise ValueError(f"rank {rank}: batch size {b!r} is not a whole number"
                             ) from None
        if batch in out:
            raise ValueError(f"rank {rank}: batch size {batch} answered twice")
        if not isinstance(arms, dict) or any(not isinstance(arms.get(a), (list, tuple))
                                             for a in ARMS):
            raise ValueError(f"rank {rank}: batch {batch}: need {', '.join(ARMS)} with "
                             "a list of times each")
        for arm in ARMS:
            for x in arms[arm]:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x \
                        or x in (float("inf"), float("-inf")):
                    raise ValueError(f"rank {rank}: batch {batch} {arm}: {x!r} is not a "
                                     "time in us")
        out[batch] = {a: list(arms[a]) for a in ARMS}
    return out


def worst_of_ranks(per_rank: Sequence[dict]) -> dict[int, dict[str, list[float]]]:
    """``replay_ab``'s answers of every rank (keys may be strings after an
    RPC) -> one answer: per batch, arm and round the slowest rank's time (a
    TP step ends when its slowest rank does). Raises ``ValueError`` when no
    rank answered, an answer is not ``replay_ab``'s shape (finite times),
    or the ranks measured different batches or rounds."""
    norm = [_rank_answer(i, r) for i, r in enumerate(per_rank)]
    if not norm:
        raise ValueError("no rank answered")
    batches = sorted(norm[0])
    for i, r in enumerate(norm[1:], 1):
        if sorted(r) != batches:
            raise ValueError(f"the ranks measured different batch sizes: rank 0 "
                             f"{batches}, rank {i} {sorted(r)}")
    out: dict[int, dict[str, list[float]]] = {}
    for b in batches:
        out[b] = {}
        for arm in ARMS:
            cols = [r[b][arm] for r in norm]
            if any(len(c) != len(cols[0]) for c in cols):
                raise ValueError(f"the ranks measured different rounds at batch {b}")
            out[b][arm] = [max(vals) for vals in zip(*cols)]
    return out
