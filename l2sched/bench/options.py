"""Command-line options of ``l2sched bench run`` and ``tp``, kept apart from
``run.py`` and ``tp.py`` so that registering the subcommands (every ``l2sched`` call does) imports
neither the benchmark's step machinery nor torch."""

from __future__ import annotations

#: The schedule the benchmarks measure by default (a path under schedules/;
#: ``bench.shipped_path`` finds the shipped copy outside the repository).
SCHEDULE = "schedules/glm53-flash-h200-tp4.l2s"
#: The deliberately bad schedules of the verdict set.
BENCH_DIR = "schedules/bench"
#: Largest message the all-reduce fit uses by default: a 256-token decode
#: step (the plans' ``max_tokens``) of hidden 4096 in bf16, bytes.
FIT_MAX_BYTES = 256 * 4096 * 2
#: Fill forked right before the standalone all-reduce of ``bench tp``'s
#: interference measurement, MB (10^6 B): the budget of window B of the
#: shipped H200 schedule, the largest fill it forks right before an
#: all-reduce (``attn.pre_all_reduce``).
AR_FILL_MB = 30.0


def run_arguments(p) -> None:
    """Options of ``bench run`` on the argparse parser ``p``."""
    p.add_argument("--out", default=None, help="result JSON path")
    p.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4, 16, 64], help="decode tokens M per step (list)")
    p.add_argument("--replays", type=int, default=25)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--eager-reps", type=int, default=2)
    p.add_argument("--ideal-reps", type=int, default=5)
    p.add_argument("--expert-pools", type=int, default=3)
    p.add_argument("--schedule", default=SCHEDULE)
    p.add_argument("--bench-dir", default=BENCH_DIR)
    p.add_argument("--variant", action="append", default=[],
                   help="NAME:KEY=VALUE,... extra arm of the schedule with overrides "
                        "(the item join=every-layer installs it with a join at the end "
                        "of every decoder layer; launch=deferred captures each fill "
                        "after the main stream's next kernel)")
    p.add_argument("--load-mode", action="store_true",
                   help="add an arm with the load-mode fill kernel")
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
    p.add_argument("--trace-dir", dest="trace_dir", default="", metavar="DIR",
                   help="after the replays of each M, one more untimed replay per arm "
                        "under torch.profiler (CUDA kernels): DIR/trace-M<M>-<arm>.json "
                        "(Chrome trace; docs/bench.md); ignored with --dry (no GPU "
                        "kernels to trace)")
    p.add_argument("--lead-us", dest="lead_us", type=float, default=0.0,
                   help="spin this long (us) before each timed replay so the graph's "
                        "launch is submitted before its start event (default 0: the "
                        "launch is inside the measured step)")
    p.add_argument("--dry", action="store_true", help="meta device, no GPU")
    p.add_argument("--per-op", dest="per_op", choices=("graph", "eager"), default="graph",
                   help="per-op times from a timed CUDA-graph variant (default) or the "
                        "host-launch-bound eager pass (fallback, labelled so)")


def tp_arguments(p) -> None:
    """Options of ``bench tp``."""
    toks = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    p.add_argument("--world-size", type=int, default=0,
                   help="processes (GPUs); default: all visible GPUs (nccl) or 2 (gloo)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="default: nccl when CUDA is available and not --dry, else gloo")
    p.add_argument("--dry", action="store_true",
                   help="CPU: meta-device tree, dry-run runtime, gloo all-reduces")
    p.add_argument("--out", default=None, help="result JSON path (rank 0 writes it)")
    p.add_argument("--tokens", type=toks, default=[1, 2, 4, 8, 16, 32, 64],
                   help="decode tokens M per step (list)")
    p.add_argument("--replays", type=int, default=25, help="timed replays per graph")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    p.add_argument("--timed-reps", type=int, default=3,
                   help="replays of the graph with per-op events")
    p.add_argument("--ar-iters", type=int, default=40,
                   help="standalone all-reduce calls per message size")
    p.add_argument("--ar-extra-tokens", type=toks, default=[128, 256, 1024, 4096],
                   help="standalone all-reduce sizes beyond --tokens, in tokens")
    p.add_argument("--tp", type=int, default=4,
                   help="modelled TP degree of the inventory and plan")
    p.add_argument("--schedule", default=SCHEDULE)
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="schedule override (as l2sched check)")
    p.add_argument("--device-profile", default="h200")
    p.add_argument("--expert-pools", type=int, default=3)
    p.add_argument("--no-spin-arms", action="store_true",
                   help="skip the idle-interval (spin) arms")
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
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the replay order (shared by every rank)")
    p.add_argument("--p2p", choices=("on", "off"), default="on",
                   help="off: NCCL_P2P_DISABLE=1 in every rank before NCCL starts")
    p.add_argument("--ar-fill-mb", type=float, default=AR_FILL_MB,
                   help="bytes (MB) of the fill forked right before the standalone "
                        "all-reduce in the interference measurement; 0 skips it")


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
