"""The run-time switch of the installed schedules (``runtime.switch``): turn
prefetch on or off in a running engine with no recapture.

In the process that holds the model (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
or code running inside a worker): ``set_prefetch(False)``. From the process
that made ``vllm.LLM``, through vLLM's worker RPC: start the engine with
``worker_extension_cls=WORKER_EXTENSION`` and call
``llm.collective_rpc("l2sched_set_prefetch", args=(False,))`` (one answer per
worker). The plugin option ``"fills": "off"`` installs a schedule switched
off (``plugin``).

Switching writes one device word per installation and waits for it
(outside a capture only); a CUDA graph captured with the fills keeps them,
and they move bytes again from the replay after ``set_prefetch(True)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from l2sched.vllm.replay import full_decode_graphs, graphs_for, replay_ab, time_replays

log = logging.getLogger("l2sched.vllm")

#: The qualified name to pass as vLLM's ``worker_extension_cls``.
WORKER_EXTENSION = "l2sched.vllm.switch.PrefetchSwitchExtension"


@dataclass(frozen=True)
class SwitchState:
    """What one process holds: ``installed`` schedules, how many of them are
    ``on`` after the call, ``refused`` switches (a capture was in
    progress), and their names (``schedules``)."""

    installed: int
    on: int
    refused: int
    schedules: tuple[str, ...]

    def as_dict(self) -> dict:
        """JSON form (what ``collective_rpc`` returns per worker)."""
        return {"installed": self.installed, "on": self.on, "refused": self.refused,
                "schedules": list(self.schedules)}


def _installed() -> list:
    # Lazy: the plugin imports vLLM (its logger); the CLI's process loads this module.
    from l2sched.vllm.plugin import INSTALLED

    return [i for i in INSTALLED if i.model is None or i.model() is not None]


def switch_value(on) -> bool:
    """``on`` as the switch's state: a bool, or ``"on"`` / ``"off"`` (any
    case; the plugin option ``fills``'s words). Raises ``ValueError`` for
    anything else (``bool("off")`` would be True)."""
    if isinstance(on, bool):
        return on
    if isinstance(on, str) and on.strip().lower() in ("on", "off"):
        return on.strip().lower() == "on"
    raise ValueError(f"the prefetch switch takes True/False or 'on'/'off', got {on!r}")


def set_prefetch(on: bool) -> SwitchState:
    """Switch the fills of every schedule installed in this process on or
    off (``Installed.switch``). A switch refused during a capture (or that
    failed: one WARNING line) changes nothing for that installation and is
    counted in ``refused``. Raises ``ValueError`` for an ``on`` that
    ``switch_value`` does not read; nothing else."""
    on = switch_value(on)
    live = _installed()
    refused = 0
    for inst in live:
        try:
            ok = inst.switch(on)
        except Exception as e:  # never raise into vLLM's worker
            log.warning("l2sched: switching plan %r %s failed: %s: %s",
                        inst.plan.schedule, "on" if on else "off", type(e).__name__, e)
            ok = False
        refused += 0 if ok else 1
    return prefetch_state(refused)


def set_prefetch_or_raise(on: bool) -> SwitchState:
    """``set_prefetch(on)`` for a measurement that needs the switch to take
    (the replay A/B, a traced replay): raises ``RuntimeError`` when this
    process has no installed schedule or a switch was refused."""
    state = set_prefetch(on)
    if not state.installed or state.refused:
        raise RuntimeError("no installed schedule to switch" if not state.installed
                           else "the switch was refused")
    return state


def prefetch_state(refused: int = 0) -> SwitchState:
    """The switch state of this process's installed schedules."""
    live = _installed()
    return SwitchState(len(live), sum(1 for i in live if i.runtime.fills_on),
                       refused, tuple(i.plan.schedule for i in live))


def _model_runner(ext, method: str):
    """The worker's ``model_runner`` that ``ext`` (a
    ``PrefetchSwitchExtension`` mixed into vLLM's worker) holds. Raises
    ``RuntimeError`` naming ``method`` outside a vLLM worker."""
    runner = getattr(ext, "model_runner", None)
    if runner is None:
        raise RuntimeError(f"{method}: no vLLM worker here (no model_runner): call it "
                           f"through LLM.collective_rpc({method!r}, ...) of an engine "
                           f"started with worker_extension_cls={WORKER_EXTENSION!r}")
    return runner


class PrefetchSwitchExtension:
    """vLLM worker extension (``worker_extension_cls``): the switch as
    worker methods, for ``LLM.collective_rpc``. Methods take no state of
    the worker; each returns ``SwitchState.as_dict()`` of its process."""

    def l2sched_set_prefetch(self, on: bool) -> dict:
        """``set_prefetch(on)`` in this worker (``on``: a bool or
        ``"on"``/``"off"``; raises ``ValueError`` otherwise)."""
        return set_prefetch(on).as_dict()

    def l2sched_prefetch_state(self) -> dict:
        """``prefetch_state()`` in this worker."""
        return prefetch_state().as_dict()

    def l2sched_replay_ab(self, batches: list, rounds: int, warmup: int,
                          replays: int) -> dict:
        """``replay.replay_ab`` on this worker's model runner, switching with
        ``set_prefetch``: ``{batch: {arm: [us per replay, one per round]}}``.
        Raises ``replay.ReplayUnavailable`` (a size without a FULL decode
        graph) and ``RuntimeError`` when this worker has no installed
        schedule or refused a switch, before or during the timing, or when
        called outside a vLLM worker."""
        runner = _model_runner(self, "l2sched_replay_ab")
        return replay_ab(runner, [int(b) for b in batches], rounds=rounds,
                         warmup=warmup, replays=replays, switch=set_prefetch_or_raise)

    def l2sched_decode_graph_sizes(self) -> list:
        """The batch sizes of this worker's captured FULL decode graphs
        (``replay.full_decode_graphs``), sorted. Raises ``RuntimeError``
        outside a vLLM worker."""
        return sorted(full_decode_graphs(_model_runner(self, "l2sched_decode_graph_sizes")))

    def l2sched_time_replays(self, batches: list, replays: int) -> dict:
        """``{batch: us per replay}`` of this worker's FULL decode graphs as
        they are (no switching; works with no schedule installed: the
        benchmark's no-plugin arm). Raises ``replay.ReplayUnavailable``,
        ``ValueError`` for ``replays < 1`` (before any replay) and
        ``RuntimeError`` outside a vLLM worker."""
        if replays < 1:
            raise ValueError(f"replays must be at least 1, got {replays}")
        graphs = graphs_for(_model_runner(self, "l2sched_time_replays"),
                            [int(b) for b in batches])
        out = {}
        for b, g in graphs.items():
            g.replay()
            out[b] = round(time_replays(g, replays), 3)
        return out
