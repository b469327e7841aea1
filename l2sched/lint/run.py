"""Running the lint: ``run_lint`` over a resolved schedule and inventory,
``lint_path`` from a schedule file, and the ``LintRun`` record both return
(see ``l2sched.lint`` for the pipeline)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from l2sched import progress
from l2sched.compiler.compile import compile_plan, schedule_inventory
from l2sched.errors import Span
from l2sched.lang.resolve import load_schedule
from l2sched.lint import rules
from l2sched.lint.graph import build_step_graphs
from l2sched.lint.rules.base import SEVERITIES
from l2sched.lint.simulate import simulate
from l2sched.model.adapters import get_adapter
from l2sched.model.config import default_config, load_model_config
from l2sched.device import load_device
from l2sched.model.device_ops import check_device_ops
from l2sched.units import plural


@dataclass
class LintRun:
    """Everything one lint run computed: the resolved ``schedule``, the
    ``inventory``, the ``plan``, the ``device`` profile, the step graph
    ``sg`` and its simulation ``sim``, the no-prefetch baseline ``base``
    (graph and simulation), ``findings`` (after selection and suppression),
    ``suppressed`` (count), ``tokens`` per decode step, ``calibration``
    (per-op comparison rows, when a trace was given)."""

    schedule: Any
    inventory: Any
    plan: Any
    device: Any
    sg: Any
    sim: Any
    base_sg: Any
    base: Any
    tokens: int
    graph_mode: str
    findings: list = field(default_factory=list)
    suppressed: int = 0
    calibration: list = field(default_factory=list)

    @property
    def has_errors(self) -> bool:
        """True when an error-severity finding remains."""
        return any(f.severity == "error" for f in self.findings)

    def step_period(self, which: str = "sim") -> float:
        """Steady-state step time (us): from the end of layer 0 to the end
        of layer 0 of the next step (the wrap-around extension), so layer 0
        sees the bytes the last layer prefetched for it."""
        sg, sim = (self.sg, self.sim) if which == "sim" else (self.base_sg, self.base)
        n = sg.num_layers
        return sim.timing[sg.layer_end[n]].finish - sim.timing[sg.layer_end[0]].finish


def run_lint(schedule, inventory, *, device=None, tokens: int = 1,
             graph_mode: str = "full", select: Sequence[str] = (),
             ignore: Sequence[str] = (), measured: dict | None = None,
             model_config: dict | None = None) -> LintRun:
    """Lint ``schedule`` (``semantic.Schedule``) against ``inventory``.

    ``device``: a ``DeviceProfile`` (default: the schedule's ``device``);
    ``tokens``: decode tokens per step (expert bytes and all-reduce size);
    ``graph_mode``: ``full``/``piecewise``/``eager``; ``select``/``ignore``:
    rule-code prefixes; ``measured``: ``(layer kind, op) -> us`` from
    ``calibrate``; ``model_config``: the HF text config (default: the
    embedded GLM-5.3-Flash one) for hidden size and routing."""
    cfg = model_config if model_config is not None else default_config(schedule.model)
    adapter = get_adapter(schedule.model)
    device = device or load_device(schedule.device)
    check_device_ops(device, schedule.model)
    plan = compile_plan(schedule, inventory, 0)
    if tokens > schedule.max_tokens:
        # The runtime's gate skips every fill in such steps (runtime.gate).
        plan = dataclasses.replace(plan, issues=())
    top_k = int(cfg.get("num_experts_per_tok", 8))
    n_exp = int(cfg.get("n_routed_experts", 0))
    hidden = int(cfg["hidden_size"])
    sims = []
    progress.stage(f"building the step graph of {plural(len(plan.issues), 'fill')}")
    for sg in build_step_graphs(plan, inventory, adapter, tokens=tokens,
                                top_k=top_k, n_experts=n_exp):
        progress.stage("simulating the step" + (" without prefetch" if sims else ""))
        # the no-prefetch baseline reserves no set-aside (the bench's
        # ``none`` arm does not)
        sim = simulate(sg, device, tp=schedule.tp, tokens=tokens, hidden=hidden,
                       policy=schedule.policy,
                       set_aside=0 if sims else schedule.set_aside,
                       measured=measured)
        sims.append((sg, sim))
    run = LintRun(schedule, inventory, plan, device, sims[0][0], sims[0][1],
                  sims[1][0], sims[1][1], tokens, graph_mode)
    progress.stage("checking the rules")
    found = rules.check_all(run)
    sources = dict(schedule.sources)
    kept = []
    for f in found:
        if not rules.code_selected(f.code, select, ignore):
            continue
        if rules.suppressed(f, sources):
            run.suppressed += 1
            continue
        kept.append(f)
    kept.sort(key=lambda f: (f.span is None, f.span or Span("", 0, 0, 0, 0),
                             SEVERITIES.index(f.severity), f.code))
    run.findings = kept
    return run


def lint_path(path: str, overrides: Sequence[str] = (), model_config_path=None,
              device_name: str | None = None, *, device_profile=None, **kw) -> LintRun:
    """Load the schedule at ``path`` (with ``--set`` ``overrides``), build
    its inventory at the schedule's TP/EP and run ``run_lint``.
    ``device_name`` overrides the schedule's ``device``; ``device_profile``:
    its ``DeviceProfile`` when the caller already loaded it (read once per
    command)."""
    cfg = load_model_config(model_config_path)
    schedule = load_schedule(path, overrides,
                             cfg if model_config_path is not None else None)
    inventory = schedule_inventory(schedule, cfg)
    device = device_profile or load_device(device_name or schedule.device)
    return run_lint(schedule, inventory, device=device, model_config=cfg, **kw)
