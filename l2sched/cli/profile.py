"""``l2sched profile --output PROFILE.toml``: measure this box once and write
its device profile (``l2sched.profile.probes``, ``l2sched.profile.write``;
with ``--collectives N`` the all-reduce part across N GPUs,
``l2sched.profile.collectives``)."""

from __future__ import annotations

import sys

from l2sched.cli.options import add_command, check_token_counts
from l2sched.device import load_device, load_device_text
from l2sched.errors import L2sUsageError
from l2sched.files import check_output_path, write_texts_atomically
from l2sched.model.config import default_config
from l2sched.model.inventory import analytical_inventory
from l2sched.profile.collective_terms import collective_terms_text
from l2sched.profile.collectives import (
    STATE_KEY,
    collectives_markdown,
    run_collectives,
    state_source,
)
from l2sched.profile.gaps import apply_step_gaps, step_gaps
from l2sched.profile.origins import default_profile_name, record_collectives
from l2sched.profile.probes import STATE_KEYS, run_profile
from l2sched.profile.state import load_state, save_state
from l2sched.profile.step_fill import BENCH_TP
from l2sched.profile.write import derive, profile_markdown, profile_toml


def cmd_profile(args) -> int:
    """Run the probes (resuming ``--state``), write the profile TOML, the
    probe report (``--md-output``) and the raw results (``--state``). Raises
    ``L2sUsageError`` for bad options, without torch or without a GPU."""
    try:
        args.tokens = [int(x) for x in args.tokens.split(",") if x.strip()]
    except ValueError:
        raise L2sUsageError(f"--tokens takes numbers, got {args.tokens!r}") from None
    if not args.tokens or min(args.tokens) < 1 or args.tokens != sorted(set(args.tokens)):
        raise L2sUsageError(f"--tokens must be increasing numbers >= 1, got {args.tokens}")
    check_token_counts("--tokens", args.tokens)
    if args.tp < 1:
        raise L2sUsageError(f"--tp must be at least 1, got {args.tp}")
    if args.reps < 3:
        raise L2sUsageError(f"--reps must be at least 3, got {args.reps}")
    if args.fill_fork and (args.quick or args.tp != BENCH_TP):
        raise L2sUsageError(f"--fill-fork runs bench run's TP{BENCH_TP} decode step, "
                            "which --quick skips: drop --quick" if args.quick else
                            f"--fill-fork needs --tp {BENCH_TP} (bench run's decode step), "
                            f"got --tp {args.tp}")
    if args.collectives and not 2 <= args.collectives <= args.tp:
        raise L2sUsageError(f"--collectives takes 2..--tp ({args.tp}) GPUs, got "
                            f"{args.collectives}")
    if args.state:  # read (resumed) and written back in place
        check_output_path(args.state)
    device_profile = load_device(args.base)  # an L2sInputError for a bad --base: exit 1
    # a bad state is an error before the GPU is asked for
    state = load_state(args.state, STATE_KEYS) if args.state else {}
    for path in (args.out, args.md_out or None):
        if path is not None:  # before minutes of probes, after reading the
            check_output_path(path)  # inputs they may not replace: one line
    try:
        import torch
    except ModuleNotFoundError:
        raise L2sUsageError("needs torch and a GPU: pip install 'l2sched[vllm,gpu]' "
                            "(in a checkout: pip install -e '.[vllm,gpu]')") from None
    if not torch.cuda.is_available():
        raise L2sUsageError("needs a CUDA GPU (compute capability >= 9.0)")
    if args.collectives > torch.cuda.device_count():
        raise L2sUsageError(f"--collectives {args.collectives} but "
                            f"{torch.cuda.device_count()} GPU(s) visible")

    got = run_profile(args, state)
    coll = _collectives(args, got, torch)
    inv = analytical_inventory(default_config(), tp=args.tp, ep=False)
    derived = derive(got["results"], device_profile, inv, got["provenance"])
    name = args.name or default_profile_name(device_profile, got["provenance"])
    desc = f"{got['provenance']['gpu']}, measured by l2sched profile"
    text = profile_toml(name, desc, got["provenance"], derived, device_profile)
    step = got["results"].get("step_fill") or {}
    if step.get("per_m"):  # per-op step gaps, against the op table just derived
        apply_step_gaps(derived, step_gaps(step, load_device_text(text, args.out)))
        text = profile_toml(name, desc, got["provenance"], derived, device_profile)
    report = profile_markdown(got["provenance"], got["results"], derived)
    if coll is not None:
        try:
            text, lines = collective_terms_text(coll, text, state_source(args.state))
            text = record_collectives(text, args.out, derived, lines,
                                      str(got["provenance"].get("date", "")),
                                      state_source(args.state))
        except ValueError as e:  # e.g. no all-reduce curve can be fitted: keep the rest
            lines = [f"the collective part is not written: {e}"]
        for line in lines:
            print(f"{args.out}: {line}", file=sys.stderr)
        report += "\n" + "\n".join(collectives_markdown(coll)) + "\n"
    files = [(args.out, text)] + ([(args.md_out, report)] if args.md_out else [])
    write_texts_atomically(files)
    for path, _ in files:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _collectives(args, got: dict, torch):
    """The ``bench tp`` result of the collective part (``--collectives``):
    from the state when an earlier run measured it across as many GPUs, else
    measured now (the single-GPU probes' memory released first) and kept in
    the state; None without ``--collectives``."""
    if not args.collectives:
        return None
    res = got["results"]
    if res.get(STATE_KEY, {}).get("world_size") != args.collectives:  # none, or other N
        torch.cuda.empty_cache()
        print(f"l2sched profile: collectives across {args.collectives} GPUs",
              file=sys.stderr)
        res[STATE_KEY] = run_collectives(args.collectives, tp=args.tp, tokens=args.tokens,
                                         base=args.base, iters=args.reps)
        save_state(args.state, got)
    return res[STATE_KEY]


def add_cli(sub) -> None:
    """Register ``l2sched profile``."""
    p = add_command(sub, "profile", cmd_profile,
                    help="measure this GPU and write its device profile (GPU)")
    # --out and --md-out: the spellings before the one output option name (issue 47)
    p.add_argument("-o", "--output", "--out", dest="out", required=True,
                   metavar="PROFILE.toml",
                   help="the device profile to write (never one it reads)")
    p.add_argument("--md-output", "--md-out", dest="md_out", default="", metavar="REPORT.md",
                   help="markdown report of every probe")
    p.add_argument("--state", default="", metavar="STATE.json",
                   help="raw probe results; an existing file is resumed")
    p.add_argument("--base", default="h200", metavar="NAME_OR_TOML",
                   help="profile whose unmeasured numbers are kept when it describes this "
                        "GPU; for another GPU they get conservative values, named in the "
                        "profile's [origin] table (default h200)")
    p.add_argument("--name", default="",
                   help="profile name (default: the base's when it describes this GPU, "
                        "else measured-<gpu name>, e.g. measured-nvidia-h100-80gb-hbm3)")
    p.add_argument("--tp", type=int, default=4,
                   help="TP degree of the inventory whose op shapes are timed")
    p.add_argument("--tokens", default="1,4,16,64,256",
                   help="decode tokens M of the op table")
    p.add_argument("--reps", type=int, default=40, help="repetitions per timing")
    p.add_argument("--quick", action="store_true",
                   help="fewer sizes, 15 repetitions, no step_fill probe (about 20 s "
                        "on the lent H200)")
    p.add_argument("--fill-fork", action="store_true",
                   help="also run the fill_fork probe (about 60 s; --tp 4, not with --quick) "
                        "and write latency.fill_fork_us, the step's loss per forked fill of a "
                        "lone window; off by default: the lint adds that cost once per fill, "
                        "which over-predicts schedules of several windows (docs/lint.md, "
                        "'Fork cost')")
    p.add_argument("--collectives", type=int, default=0, metavar="N",
                   help="also measure the all-reduce across N GPUs of this box (one "
                        "process per GPU, NCCL, multicast off): [allreduce.tpN] and "
                        "fill.MODE.allreduce_slowdown (default: not measured)")
