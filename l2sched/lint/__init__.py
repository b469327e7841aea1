"""``l2sched lint``: static overlap lint of a schedule, before anything runs.

Pipeline: resolve the schedule (``l2sched.semantic``), build the analytical
inventory (``l2sched.inventory``), compile the plan (``l2sched.compile``),
build the decode-step graph (``graph``), simulate it on the device profile
with and without fills (``simulate``), run the rules (``rules``) and report
(``report``). ``timeline`` writes a Chrome/Perfetto trace and an SVG Gantt;
``calibrate`` replaces modeled op durations with a profiler trace's.

Pure Python: imports neither torch nor vLLM (a test checks ``sys.modules``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

#: Graph modes a lint run can assume (``l2sched.adapters.glm5next.GRAPH_MODES``).
GRAPH_MODES = ("full", "piecewise", "eager")


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
    from ..adapters import get_adapter
    from ..compile import compile_plan
    from ..devices import load_device
    from ..inventory import load_model_config
    from . import rules
    from .graph import build_step_graphs
    from .simulate import simulate

    cfg = model_config if model_config is not None else load_model_config(None)
    adapter = get_adapter(schedule.model)
    device = device or load_device(schedule.device)
    plan = compile_plan(schedule, inventory, 0)
    if tokens > schedule.max_tokens:
        # The runtime's gate skips every fill in such steps (runtime.gate).
        import dataclasses

        plan = dataclasses.replace(plan, issues=())
    top_k = int(cfg.get("num_experts_per_tok", 8))
    n_exp = int(cfg.get("n_routed_experts", 0))
    hidden = int(cfg["hidden_size"])
    sims = []
    for sg in build_step_graphs(plan, inventory, adapter, tokens=tokens,
                                top_k=top_k, n_experts=n_exp):
        sim = simulate(sg, device, tp=schedule.tp, tokens=tokens, hidden=hidden,
                       policy=schedule.policy, set_aside=schedule.set_aside,
                       measured=measured)
        sims.append((sg, sim))
    run = LintRun(schedule, inventory, plan, device, sims[0][0], sims[0][1],
                  sims[1][0], sims[1][1], tokens, graph_mode)
    found = (rules.check_targets(schedule, inventory)
             + rules.check_graph_mode(schedule, adapter, graph_mode)
             + rules.check_timing(run)
             + rules.check_fill_size(schedule, plan, inventory.kinds, device)
             + rules.check_set_aside(schedule, device)
             + rules.check_left_over(schedule, plan, inventory.kinds))
    sources = dict(schedule.sources)
    kept = []
    for f in found:
        if not rules.code_selected(f.code, select, ignore):
            continue
        if rules.suppressed(f, sources):
            run.suppressed += 1
            continue
        kept.append(f)
    order = {"error": 0, "warning": 1, "info": 2}
    kept.sort(key=lambda f: (f.span is None, f.span or rules.Span("", 0, 0, 0, 0),
                             order[f.severity], f.code))
    run.findings = kept
    return run


def lint_path(path: str, overrides: Sequence[str] = (), model_config_path=None,
              device_name: str | None = None, **kw) -> LintRun:
    """Load the schedule at ``path`` (with ``--set`` ``overrides``), build
    its inventory at the schedule's TP/EP and run ``run_lint``.
    ``device_name`` overrides the schedule's ``device``."""
    from ..compile import schedule_inventory
    from ..devices import load_device
    from ..inventory import load_model_config
    from ..semantic import load_schedule

    cfg = load_model_config(model_config_path)
    schedule = load_schedule(path, overrides,
                             cfg if model_config_path is not None else None)
    inventory = schedule_inventory(schedule, cfg)
    device = load_device(device_name or schedule.device)
    return run_lint(schedule, inventory, device=device, model_config=cfg, **kw)


def _codes(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def cmd_lint(args) -> int:
    """``l2sched lint SCHEDULE``: print findings and the per-kind summary;
    exit 1 when an error remains."""
    import sys

    from ..errors import L2sError, suggest
    from . import report, rules

    for opt in ("select", "ignore"):
        for code in _codes(getattr(args, opt)):
            if not any(c.startswith(code) for c in rules.RULES):
                print(f"l2sched lint: error: --{opt} {code}: no rule code starts "
                      f"with it{suggest(code, rules.RULES)}", file=sys.stderr)
                return 2
    if args.tokens < 1:
        print(f"l2sched lint: error: --tokens must be at least 1, got {args.tokens}",
              file=sys.stderr)
        return 2
    measured = None
    calib_rows: list = []
    try:
        if args.calibrate:
            from .calibrate import calibrate_path

            measured, calib_rows = calibrate_path(args.calibrate, args.schedule,
                                                  args.overrides, args.model_config,
                                                  args.device, tokens=args.tokens)
        run = lint_path(args.schedule, args.overrides, args.model_config, args.device,
                        tokens=args.tokens, graph_mode=args.graph_mode,
                        select=_codes(args.select), ignore=_codes(args.ignore),
                        measured=measured)
    except L2sError as err:
        # a machine-readable document even when the input is broken; the
        # human message still goes to stderr (the CLI prints it, exit 1)
        if args.format == "json":
            sys.stdout.write(report.input_error_json(args.schedule, err))
        elif args.format == "sarif":
            sys.stdout.write(report.input_error_sarif(err))
        raise
    run.calibration = calib_rows
    if args.format == "json":
        sys.stdout.write(report.to_json(run))
    elif args.format == "sarif":
        sys.stdout.write(report.to_sarif(run))
    else:
        sys.stdout.write(report.human(run, summary=not args.no_summary))
    return 1 if run.has_errors else 0


def cmd_timeline(args) -> int:
    """``l2sched timeline SCHEDULE -o FILE``: write the Chrome trace JSON and
    an SVG Gantt (``FILE`` with ``.svg``) of the predicted timeline."""
    from .timeline import write_timeline

    run = lint_path(args.schedule, args.overrides, args.model_config, args.device,
                    tokens=args.tokens)
    paths = write_timeline(run, args.output)
    for p in paths:
        print(f"wrote {p}")
    return 0


def _common(p) -> None:
    from ..cli import add_schedule_args

    p.add_argument("schedule", metavar="SCHEDULE")
    add_schedule_args(p)
    p.add_argument("--device", metavar="NAME",
                   help="device profile name or .toml path (default: the "
                        "schedule's device)")
    p.add_argument("--tokens", type=int, default=1, metavar="N",
                   help="decode tokens per step (default 1)")


def add_cli(sub) -> None:
    """Register ``l2sched lint`` and ``l2sched timeline``."""
    p = sub.add_parser("lint", help="predict fill overlaps and L2 hits of a "
                                    "schedule; report rule violations")
    _common(p)
    p.add_argument("--format", choices=("human", "json", "sarif"), default="human")
    p.add_argument("--select", metavar="CODES",
                   help="comma-separated rule codes or prefixes to report")
    p.add_argument("--ignore", metavar="CODES",
                   help="comma-separated rule codes or prefixes to skip")
    p.add_argument("--graph-mode", choices=GRAPH_MODES, default="full",
                   help="CUDA-graph mode decode runs in (default full)")
    p.add_argument("--calibrate", metavar="TRACE",
                   help="torch-profiler Chrome trace: use its measured kernel "
                        "times and report the per-op difference")
    p.add_argument("--no-summary", action="store_true",
                   help="print only the findings")
    p.set_defaults(handler=cmd_lint)

    p = sub.add_parser("timeline", help="write the predicted timeline as a "
                                        "Chrome/Perfetto trace and an SVG Gantt")
    _common(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE.json")
    p.set_defaults(handler=cmd_timeline)
