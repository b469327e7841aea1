"""Command-line options of ``l2sched bench run`` and ``tp`` (the lab adds its
research options on top: ``lab.bench.options``), kept apart from
``run.py`` and ``tp.py`` so that registering the subcommands (every ``l2sched`` call does) imports
neither the benchmark's step machinery nor torch."""

from __future__ import annotations

#: The schedule the benchmarks measure by default (a path under schedules/;
#: ``bench.shipped_path`` finds the shipped copy outside the repository).
SCHEDULE = "schedules/glm53-flash-h200-tp4.l2s"
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
    # --out: the spelling before the one output option name (issue 47)
    p.add_argument("-o", "--output", "--out", dest="out", default=None,
                   help="result JSON path")
    p.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4, 16, 64], help="decode tokens M per step (list)")
    p.add_argument("--replays", type=int, default=25,
                   help="timed rounds per M; each replays every arm's graphs once, in a "
                        "shuffled order (default 25)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed rounds before them (default 3)")
    p.add_argument("--eager-reps", type=int, default=2,
                   help="timed eager steps per arm with --per-op eager (default 2)")
    p.add_argument("--ideal-reps", type=int, default=5,
                   help="repetitions of each consumer op's cold and L2-resident timing "
                        "behind the ideal gain (default 5)")
    p.add_argument("--expert-pools", type=int, default=3,
                   help="full routed-expert pools allocated; MoE layer i reads pool "
                        "i mod N (default 3; the real model's 42 do not fit one GPU)")
    p.add_argument("--schedule", default=SCHEDULE,
                   help=f"the .l2s schedule of the prefetch arms (default {SCHEDULE})")
    p.add_argument("--device-profile", default="h200", metavar="NAME_OR_FILE",
                   help="device profile whose collective model times the idle "
                        "intervals standing in for the all-reduces (as bench tp's; "
                        "default h200)")
    p.add_argument("--model-config", default=None, metavar="PATH",
                   help="a GLM-5.3 (glm5next) config.json or its directory: layer "
                        "count and kinds, experts, dimensions of the step (default: "
                        "the embedded GLM-5.3-Flash config)")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME:KEY=VALUE,... extra arm of the schedule with overrides "
                        "(the item join=every-layer installs it with a join at the end "
                        "of every decoder layer; launch=fork|deferred|leaf|leaf-deferred|"
                        "launch-order enters each fill into the captured step that way; "
                        "merge=off launches each issue of a hook point on its own "
                        "instead of one fill per hook point and kernel, docs/runtime.md; "
                        "grid=N launches every fill kernel of the arm with N CTAs, "
                        "1..65535)")
    p.add_argument("--load-mode", action="store_true",
                   help="add an arm with the load-mode fill kernel")
    p.add_argument("--aa", action="store_true",
                   help="an A/A arm: the no-prefetch step captured twice, for the noise "
                        "floor of the gains")
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
    p.add_argument("-o", "--output", "--out", dest="out", default=None,
                   help="result JSON path (rank 0 writes it)")
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
    p.add_argument("--schedule", default=SCHEDULE,
                   help=f"the .l2s schedule of the prefetch arm (default {SCHEDULE})")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="schedule override (as l2sched check)")
    p.add_argument("--device-profile", default="h200", metavar="NAME_OR_FILE",
                   help="device profile of the lint's prediction and the all-reduce model "
                        "beside the measured one (default h200)")
    p.add_argument("--expert-pools", type=int, default=3,
                   help="full routed-expert pools allocated per rank; MoE layer i reads "
                        "pool i mod N (default 3)")
    p.add_argument("--no-spin-arms", action="store_true",
                   help="skip the idle-interval (spin) arms")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the replay order (shared by every rank)")
    p.add_argument("--p2p", choices=("on", "off"), default="on",
                   help="off: NCCL_P2P_DISABLE=1 in every rank before NCCL starts")
    p.add_argument("--ar-fill-mb", type=float, default=AR_FILL_MB,
                   help="bytes (MB) of the fill forked right before the standalone "
                        "all-reduce in the interference measurement; 0 skips it")
