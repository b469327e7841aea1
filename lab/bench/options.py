"""Command-line options of the lab's ``bench`` commands: the research
options of ``run`` and ``tp`` (the validation and perturbation arm sets,
the verdict set, the dispatch controls) on top of the product's
(``l2sched.bench.options``), and the options of ``tp-report`` and
``kernel``."""

from __future__ import annotations

from l2sched.bench.options import FIT_MAX_BYTES, run_arguments, tp_arguments

#: The deliberately bad schedules of the verdict set.
BENCH_DIR = "schedules/bench"


def lab_run_arguments(p) -> None:
    """Options of ``python -m lab bench run``: ``bench run``'s and the
    research arm sets."""
    run_arguments(p)
    p.add_argument("--bench-dir", default=BENCH_DIR,
                   help="deliberately bad schedules measured as extra arms (the verdict set; "
                        "'' for none)")
    p.add_argument("--perturbations", action="store_true",
                   help="an A/A no-prefetch arm and perturbations of --schedule: "
                        "budgets +-25%%, its largest window removed, another fill kernel")
    p.add_argument("--validation", action="store_true",
                   help="the validation arms of docs/lint.md#validation: an A/A "
                        "no-prefetch arm, each fill kernel, each window alone at two "
                        "budgets")
    p.add_argument("--controls", nargs="?", const="head", default="",
                   choices=("head", "decoy"),
                   help="add the control ctl-NAME of every schedule arm: head (the "
                        "default) the same fills at the same hook points, each cut to a "
                        "4 KiB head; decoy the same fills, same bytes and kernel, reading a "
                        "scratch buffer instead of the weights (the fills' cost without "
                        "their hits); needs the A/A arm of --validation (or "
                        "--perturbations) (docs/bench.md#dispatch-controls)")


def lab_tp_arguments(p) -> None:
    """Options of ``python -m lab bench tp``: ``bench tp``'s and the
    validation arm set."""
    tp_arguments(p)
    p.add_argument("--validation", action="store_true",
                   help="the validation arms of docs/lint.md#validation (as bench run "
                        "--validation): an A/A no-prefetch arm, each fill kernel, "
                        "evict_normal, each window alone at two budgets, the schedules "
                        "of --bench-dir")
    p.add_argument("--bench-dir", default=BENCH_DIR,
                   help="deliberately bad schedules measured with --validation")
    p.add_argument("--controls", action="store_true",
                   help="add the dispatch control ctl-NAME of every schedule arm: the "
                        "same fills at the same hook points, each cut to a 4 KiB head (decoy "
                        "controls are a bench run option); needs the A/A arm of "
                        "--validation (docs/bench.md#dispatch-controls)")


def tp_report_arguments(p) -> None:
    """Options of ``bench tp-report``."""
    p.add_argument("result", nargs="+",
                   help="JSON written by `l2sched bench tp --out`; several results of "
                        "runs over different --tokens on the same machine are merged")
    p.add_argument("--md-out", default=None, help="markdown path (default: stdout)")
    p.add_argument("--command", default="", help="command line to quote in the report")
    p.add_argument("--no-lint", action="store_true",
                   help="skip the lint's predicted gains (CPU, a few s per M)")
    p.add_argument("--update-profile", default=None, metavar="NAME_OR_PATH",
                   help="write the fitted all-reduce model into this device profile")
    p.add_argument("--fit-max-bytes", type=int, default=FIT_MAX_BYTES)
    p.add_argument("--fit-source", choices=("graph", "eager"), default="graph")
    p.add_argument("--caveat", action="append", default=[],
                   help="a caveat line for the report (repeatable)")
    p.add_argument("--controls", action="append", default=[], metavar="RESULT",
                   help="a `bench tp --validation --controls` result of another run with "
                        "the same arms and M: add each arm's dispatch-control residual to "
                        "its predicted gain (docs/bench.md#dispatch-controls); given more "
                        "than once, the mean residual over those runs")


def kernel_arguments(p) -> None:
    """Options of ``bench kernel``."""
    p.add_argument("--out", required=True, metavar="RESULT.json")
    p.add_argument("--md-out", default="", metavar="REPORT.md")
    p.add_argument("--reps", type=int, default=40,
                   help="repetitions per measurement (medians, p10/p90)")
    p.add_argument("--consumer-rounds", type=int, default=300,
                   help="interleaved rounds (cold / hot / after each fill) per consumer "
                        "weight; the recovered share is taken from their means")
    p.add_argument("--sizes", default="8,16,32,48,64",
                   help="fill sizes in MB (10^6 B), comma-separated")
    p.add_argument("--shapes", default="",
                   help="consumer weights NxK, comma-separated (default: the "
                        "GLM-5.3-Flash TP4 GEMM weights)")
    p.add_argument("--variants", default="",
                   help="LABEL=MODE[:grid=..,threads=..,chunk=..,stages=..];... "
                        "(default: bulk, copy from 32 and 66 CTAs, load from 528 and "
                        "1056 CTAs)")
    p.add_argument("--policy", default="evict_last",
                   choices=("evict_last", "evict_normal", "evict_first"))
