"""``l2sched lint SCHEDULE`` (findings and the per-kind summary, human, JSON
or SARIF) and ``l2sched timeline SCHEDULE -o FILE`` (the predicted timeline
as a Chrome/Perfetto trace and an SVG Gantt)."""

from __future__ import annotations

import sys

from l2sched import progress
from l2sched.cli.options import (
    add_command,
    add_schedule_args,
    check_device_arg,
    check_token_counts,
    numbers,
)
from l2sched.errors import L2sError, L2sUsageError
from l2sched.lint import lint_path, report, rules
from l2sched.lint.measured import load_measured
from l2sched.lint.timeline import timeline_paths, write_timeline
from l2sched.units import GRAPH_MODES


def _codes(opt: str, text: str | None) -> list[str]:
    """The rule-code prefixes of ``--select``/``--ignore`` (``opt``) given
    as ``text`` (comma-separated; none when the option is not given).
    Raises ``L2sUsageError`` for an empty list or entry (``--ignore ,,,``,
    ``--ignore L2S1,``) and for a code no rule starts with."""
    if text is None:
        return []
    codes = [c.strip() for c in text.split(",")]
    for code in codes:
        if not code:
            raise L2sUsageError(f"--{opt} {text!r}: an empty code; give comma-separated "
                                f"rule codes or prefixes (codes: {rules.code_ranges()})")
        if not any(c.startswith(code) for c in rules.RULES):
            raise L2sUsageError(f"--{opt} {code}: no rule code starts with it "
                                f"(codes: {rules.code_ranges()})")
    return codes


def cmd_lint(args) -> int:
    """Lint every schedule given (``check``/``fmt`` take many too): print
    the findings and the per-kind summary of each; exit 1 when an error
    remains in any. One schedule's broken input does not stop the others
    (its error goes to stderr; ``--format json|sarif`` still describe it).
    JSON: one schedule's document, or ``{"schedules": [...], "errors": N}``
    for several; SARIF: one run with every schedule's results. Raises
    ``L2sUsageError`` for a ``--select``/``--ignore`` code no rule starts
    with or an empty one (``_codes``), or a ``--tokens`` value out of 1 .. 2,147,483,647 (``token_counts``). Several
    ``--tokens`` lint each schedule once per M (``_write_report``)."""
    for opt in ("select", "ignore"):
        _codes(opt, getattr(args, opt))
    tokens = token_counts(args.tokens)
    docs: list = []  # per schedule and M: (LintRun, None, path) or (None, L2sError, path)
    for path in args.schedules:
        for m in tokens:
            try:
                docs.append((_lint_one(args, path, m), None, path))
            except L2sUsageError:
                raise
            except L2sError as err:  # the same for every M: reported once
                print(str(err), file=sys.stderr)
                docs.append((None, err, path))
                break
    _write_report(args, docs, several=len(tokens) > 1)
    return 1 if any(err is not None or run.has_errors for run, err, _ in docs) else 0


def token_counts(text: str) -> list[int]:
    """``--tokens``: one decode batch size M, or several comma-separated
    (``1,4,16,64``, as ``fit`` takes them). Raises ``L2sUsageError`` for
    anything but whole numbers in 1 .. 2,147,483,647 (``check_token_counts``)
    without repeats."""
    tokens = numbers("--tokens", text, int)
    check_token_counts("--tokens", tokens, text)
    if len(set(tokens)) != len(tokens):
        raise L2sUsageError(f"--tokens names an M twice: {text}")
    return tokens


def _lint_one(args, path: str, tokens: int):
    """The ``LintRun`` of schedule ``path`` at ``tokens`` with the
    command's options (calibrated when ``--calibrate`` names a trace).
    Raises ``L2sError``."""
    measured = None
    calib_rows: list = []
    # read as every command reads --device; an error is this schedule's
    # (so --format json|sarif still describe it)
    device_profile = check_device_arg(args.device)
    if args.calibrate:
        # loaded only when asked: `l2sched lint` starts faster
        from l2sched.lint.calibrate import calibrate_path
        measured, calib_rows = calibrate_path(args.calibrate, path, args.overrides,
                                              args.model_config, args.device,
                                              tokens=tokens)
    run = lint_path(path, args.overrides, args.model_config, args.device,
                    device_profile=device_profile, tokens=tokens, graph_mode=args.graph_mode,
                    select=_codes("select", args.select),
                    ignore=_codes("ignore", args.ignore),
                    measured=measured)
    run.calibration = calib_rows
    return run


def _write_report(args, docs, several: bool = False) -> None:
    """Print the report of every ``(run, error, path)`` in ``docs`` (in
    ``args.format``) to stdout. With ``several`` M (``--tokens 1,4``):
    human output has a ``--tokens M:`` heading over each M's findings and
    summary; JSON lists one document per schedule and M
    (``{"schedules": [...]}``, each with its ``tokens``); SARIF has each
    finding once (the same finding at several M is one result)."""
    progress.stage("writing the report")
    if args.format == "sarif":
        items, seen = [], set()
        for run, err, path in docs:
            found = run.findings if run is not None else report.input_error_findings(err)
            fresh = [f for f in found if (f.code, f.message, f.span) not in seen]
            seen.update((f.code, f.message, f.span) for f in found)
            items.append((fresh, run.schedule.path if run is not None else path))
        sys.stdout.write(report.sarif_document(items))
        return
    if args.format == "json":
        texts = [report.to_json(run) if run is not None else
                 report.input_error_json(path, err) for run, err, path in docs]
        if len(texts) == 1:
            sys.stdout.write(texts[0])
        else:
            sys.stdout.write(report.json_documents(texts))
        return
    for run, _, _ in docs:
        if run is not None:
            if several:
                sys.stdout.write(f"--tokens {run.tokens}:\n")
            sys.stdout.write(report.human(run, summary=not args.no_summary))


def cmd_timeline(args) -> int:
    """Write the Chrome trace JSON and an SVG Gantt (``FILE`` with
    ``.svg``; none, and a line saying so, when ``-o`` is a device or FIFO)
    of the predicted timeline, with the measured one of
    ``--measured RESULT.json`` (a ``bench run`` result; arm ``--arm``, M =
    ``--tokens``) beside it. An unusable ``-o`` or result is refused before
    the lint runs."""
    timeline_paths(args.output)
    device_profile = check_device_arg(args.device)
    check_token_counts("--tokens", [args.tokens])
    if args.arm is not None and not args.measured:
        raise L2sUsageError(f"--arm {args.arm} needs --measured RESULT.json (the arm "
                            f"is one of that bench result's)")
    measured = (load_measured(args.measured, args.tokens, args.arm or "compiled")
                if args.measured else None)
    run = lint_path(args.schedule, args.overrides, args.model_config, args.device,
                    device_profile=device_profile, tokens=args.tokens)
    written = write_timeline(run, args.output, measured)
    for p in written:
        print(f"wrote {p}")
    if len(written) == 1:
        print(f"no SVG written: {args.output} is not a regular file (the SVG goes "
              f"beside a regular -o FILE.json, as FILE.svg)")
    return 0


def _common(p, many: bool = False) -> None:
    if many:
        p.add_argument("schedules", nargs="+", metavar="SCHEDULE",
                       help="the .l2s schedules to lint")
    else:
        p.add_argument("schedule", metavar="SCHEDULE",
                       help="the .l2s schedule whose decode step to draw")
    add_schedule_args(p)
    if many:
        p.add_argument("--tokens", default="1", metavar="M[,M...]",
                       help="decode tokens per step, or several comma-separated "
                            "(1,4,16,64: one report per M; default 1)")
    else:
        p.add_argument("--tokens", type=int, default=1, metavar="N",
                       help="decode tokens per step (default 1)")


def add_cli(sub) -> None:
    """Register ``l2sched lint`` and ``l2sched timeline``."""
    p = add_command(sub, "lint", cmd_lint,
                    help="predict fill overlaps and L2 hits of a schedule; report "
                         "rule violations")
    _common(p, many=True)
    p.add_argument("--format", choices=("human", "json", "sarif"), default="human",
                   help="human (default: file:line:column lines with the source), "
                        "json, or sarif (SARIF 2.1.0 for code-scanning tools)")
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

    p = add_command(sub, "timeline", cmd_timeline,
                    help="write the predicted timeline as a Chrome/Perfetto trace "
                         "and an SVG Gantt")
    _common(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE.json",
                   help="the Chrome/Perfetto trace; the SVG Gantt goes beside it (.svg)")
    p.add_argument("--measured", metavar="RESULT.json",
                   help="an `l2sched bench run --output` result: draw its measured "
                        "step beside the predicted one in the SVG")
    p.add_argument("--arm", default=None,
                   help="the --measured result's arm to draw (default: compiled)")
