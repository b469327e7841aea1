"""The one prepare step of the pipeline: ``schedule, inventory, device
profile -> compiled and simulated`` (``prepare``).

The lint (``run_lint``), the fit's evaluator, the vLLM plugin and the lab's
reports all go through it, so a plan is compiled, its decode step built and
simulated (with and without prefetch) the same way everywhere. Units: us,
bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from l2sched import progress
from l2sched.compiler.compile import compile_plan, schedule_config
from l2sched.lint.graph import build_step_graph, build_step_graphs
from l2sched.lint.simulate import simulate
from l2sched.model.adapters import get_adapter
from l2sched.units import plural
from l2sched.device import DeviceProfile


@dataclass(frozen=True)
class Prepared:
    """A schedule compiled and simulated for one decode step.

    ``plan``: the compiled plan of the TP rank (what the runtime installs);
    ``step_plan``: the plan the step runs at ``tokens`` (``plan``, or no
    issues above the schedule's ``max_tokens``: the runtime's gate skips
    every fill there); ``sg``/``sim``: the step graph with fills and its
    simulation; ``base_sg``/``base``: the no-prefetch step graph and its
    simulation; ``device_profile``: the ``DeviceProfile`` simulated with."""

    schedule: Any
    inventory: Any
    device_profile: DeviceProfile
    tokens: int
    plan: Any
    step_plan: Any
    sg: Any
    sim: Any
    base_sg: Any
    base: Any


def prepare(schedule, inventory, device_profile: DeviceProfile, *, tokens: int = 1,
            tp_rank: int = 0, plan=None, model_config: dict | None = None,
            measured: dict | None = None, base_cache: dict | None = None) -> Prepared:
    """Compile ``schedule`` (a resolved ``Schedule``) against ``inventory``
    for ``tp_rank`` (or take the already compiled ``plan``), build the decode
    step of ``tokens`` tokens with and without its fills, and simulate both
    on ``device_profile`` (a ``DeviceProfile``).

    ``model_config``: the HF text config (default: the one the schedule was
    resolved with, ``compiler.compile.schedule_config``) for hidden size and routing (the adapter's
    ``routing``); ``measured``: ``(layer kind, op) -> us`` per-op
    times (``lint.calibrate``); ``base_cache``: a dict the caller keeps
    across calls on the same inventory and config, holding the no-prefetch
    simulations by (tokens, profile, TP, measured) so that many schedules
    (the fit's candidates) simulate the baseline once. The no-prefetch
    baseline reserves no set-aside (the bench's ``none`` arm does not).
    Raises what ``compile_plan`` and ``simulate`` raise (``L2sError``)."""
    cfg = model_config if model_config is not None else schedule_config(schedule)
    if plan is None:
        plan = compile_plan(schedule, inventory, tp_rank)
    step_plan = plan if tokens <= schedule.max_tokens else dataclasses.replace(plan, issues=())
    hidden = int(cfg["hidden_size"])
    adapter = get_adapter(schedule.model)
    top_k, n_experts = adapter.routing(cfg)
    routing = dict(tokens=tokens, top_k=top_k, n_experts=n_experts)
    progress.stage(f"building the step graph of {plural(len(step_plan.issues), 'fill')}")
    key = (tokens, id(device_profile), schedule.tp, id(measured))
    cached = base_cache.get(key) if base_cache is not None else None
    if cached is None:
        sg, base_sg = build_step_graphs(step_plan, inventory, adapter, **routing)
    else:
        sg = build_step_graph(step_plan, inventory, adapter, **routing)
    progress.stage("simulating the step")
    sim = simulate(sg, device_profile, tp=schedule.tp, tokens=tokens, hidden=hidden,
                   policy=schedule.policy, set_aside=schedule.set_aside, measured=measured)
    if cached is None:
        progress.stage("simulating the step without prefetch")
        cached = (base_sg, simulate(base_sg, device_profile, tp=schedule.tp, tokens=tokens,
                                    hidden=hidden, policy=schedule.policy, set_aside=0,
                                    measured=measured))
        if base_cache is not None:
            # the profile and measured dict stay alive with the ids in the key
            base_cache[key] = cached + (device_profile, measured)
    base_sg, base = cached[0], cached[1]
    return Prepared(schedule, inventory, device_profile, tokens, plan, step_plan,
                    sg, sim, base_sg, base)
