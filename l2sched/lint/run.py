"""Running the lint: ``run_lint`` over a resolved schedule and inventory,
``lint_path`` from a schedule file, and the ``LintRun`` record both return
(see ``l2sched.lint`` for the pipeline)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from l2sched import progress
from l2sched.errors import Span
from l2sched.lang.resolve import load_schedule
from l2sched.compiler.compile import schedule_config, schedule_inventory
from l2sched.lint import rules
from l2sched.lint.prepare import prepare
from l2sched.lint.rules.base import SEVERITIES
from l2sched.model.config import read_config_arg
from l2sched.device import DeviceProfile, load_device
from l2sched.model.device_ops import check_device_ops


@dataclass
class LintRun:
    """Everything one lint run computed: the resolved ``schedule``, the
    ``inventory``, the ``plan``, the ``device_profile``, the step graph
    ``sg`` and its simulation ``sim``, the no-prefetch baseline ``base``
    (graph and simulation), ``findings`` (after selection and suppression),
    ``suppressed`` (count), ``tokens`` per decode step, ``calibration``
    (per-op comparison rows, when a trace was given)."""

    schedule: Any
    inventory: Any
    plan: Any
    device_profile: DeviceProfile
    sg: Any
    sim: Any
    base_sg: Any
    base: Any
    tokens: int
    graph_mode: str
    findings: list = field(default_factory=list)
    suppressed: int = 0
    calibration: list = field(default_factory=list)
    #: the HF text config the run used (``run_lint``'s ``model_config``,
    #: else the schedule's: ``compiler.compile.schedule_config``)
    model_config: dict | None = None

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


def run_lint(schedule, inventory, *, device: str | None = None,
             device_profile: DeviceProfile | None = None, tokens: int = 1,
             graph_mode: str = "full", select: Sequence[str] = (),
             ignore: Sequence[str] = (), measured: dict | None = None,
             model_config: dict | None = None, tp_rank: int = 0, plan=None) -> LintRun:
    """Lint ``schedule`` (``semantic.Schedule``) against ``inventory``.

    ``device_profile``: the loaded ``DeviceProfile`` to lint with; without
    it, the profile ``device`` names (a shipped name or a ``.toml`` path;
    default: the schedule's ``device``) is loaded;
    ``tokens``: decode tokens per step (expert bytes and all-reduce size);
    ``graph_mode``: ``full``/``piecewise``/``eager``; ``select``/``ignore``:
    rule-code prefixes; ``measured``: ``(layer kind, op) -> us`` from
    ``calibrate``; ``model_config``: the HF text config (default: the one
    embedded for the schedule's model) for hidden size and routing;
    ``tp_rank``/``plan``: the TP rank to compile for, or its plan already
    compiled (the plugin lints the plan it installs). The schedule is
    compiled and simulated by ``prepare.prepare``. Raises
    ``L2sSemanticError`` for a malformed ``# l2s: ignore`` comment
    (``rules.check_suppressions``), ``L2sError`` for what the device
    profile or the compilation rejects."""
    rules.check_suppressions(schedule.sources)  # a malformed one hides nothing
    if device_profile is None:
        if device is not None and not isinstance(device, str | os.PathLike):
            # the keyword took a loaded profile before device_profile existed
            raise TypeError("run_lint: device is a profile name or path; pass a "
                            "loaded DeviceProfile as device_profile=")
        device_profile = load_device(device or schedule.device)
    check_device_ops(device_profile, schedule.model)
    p = prepare(schedule, inventory, device_profile, tokens=tokens, tp_rank=tp_rank,
                plan=plan, model_config=model_config, measured=measured)
    run = LintRun(schedule, inventory, p.step_plan, device_profile, p.sg, p.sim, p.base_sg,
                  p.base, tokens, graph_mode,
                  model_config=(model_config if model_config is not None
                                else schedule_config(schedule)))
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
              device_name: str | None = None, *,
              device_profile: DeviceProfile | None = None, **kw) -> LintRun:
    """Load the schedule at ``path`` (with ``--set`` ``overrides``), build
    its inventory at the schedule's TP/EP and run ``run_lint``.
    ``device_name`` overrides the schedule's ``device``;
    ``model_config_path`` (``--model-config``: a file, a model directory or
    a shipped config's name) takes the place of the schedule's
    ``model_config`` (default: that line's config, else the one embedded
    for the schedule's model); ``device_profile``: the ``DeviceProfile`` of
    ``device_name`` when the caller already loaded it (read once per
    command)."""
    cfg, ref = None, None
    if model_config_path is not None:
        cfg, ref = read_config_arg(str(model_config_path))
    schedule = load_schedule(path, overrides, cfg, ref)
    inventory = schedule_inventory(schedule, cfg)
    return run_lint(schedule, inventory, device=device_name, device_profile=device_profile,
                    model_config=cfg, **kw)
