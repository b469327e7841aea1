"""``l2sched verify``: a schedule's gain measured inside vLLM's offline
engine, prefetch switched on and off in one engine (``l2sched.vllm.verify``),
beside the lint's prediction. Options follow ``vllm bench latency`` where
they fit (``--input-len``, ``--output-len``, ``--num-iters``,
``--num-iters-warmup``, ``--load-format``); tokens per decode step is
``--tokens`` and the report path ``-o/--output``, as in every other command
(``--batch-size`` and ``--output-json``, ``vllm bench latency``'s
spellings, are kept as aliases).
"""

from __future__ import annotations

import faulthandler
import json
import shlex
import signal
import sys
from pathlib import Path

from l2sched import progress
from l2sched.cli.options import (
    SetAction,
    add_command,
    check_device_arg,
    model_config_arg,
    numbers,
)
from l2sched.errors import L2sUsageError
from l2sched.files import check_output_path
from l2sched.lang.resolve import load_schedule
from l2sched.lint.run import lint_path
from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES
from l2sched.vllm import verify as V
from l2sched.vllm.replay import REPLAYS

#: File names whose presence says a model directory holds weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def _model_dir(text: str) -> Path:
    """The model directory (``config.json`` inside) that ``MODEL`` names: a
    directory or its ``config.json``. Raises ``L2sUsageError``."""
    p = Path(text)
    if p.is_file() and p.name == "config.json":
        p = p.parent
    if (p / "config.json").is_dir():
        raise L2sUsageError(f"MODEL: {p / 'config.json'} is a directory, not a "
                            "Hugging Face config file")
    if not (p / "config.json").is_file():
        raise L2sUsageError(f"MODEL: no config.json in {text!r} (give a Hugging Face "
                            "model directory or its config.json)")
    return p


#: ``vllm.LLM`` arguments verify sets itself (``--engine-arg`` may not).
OWN_ENGINE_ARGS = ("model", "tensor_parallel_size", "enable_expert_parallel",
                   "additional_config", "worker_extension_cls", "load_format")


def _engine_args(items: list[str]) -> dict:
    """``--engine-arg KEY=JSON`` (repeatable) -> keyword arguments of
    ``vllm.LLM``. Raises ``L2sUsageError`` for a missing ``=``, a value that
    is not JSON (a string is ``'KEY="text"'``), a key given twice or a key
    of ``OWN_ENGINE_ARGS``."""
    out = {}
    for it in items:
        key, eq, val = it.partition("=")
        key = key.strip()
        if not eq or not key:
            raise L2sUsageError(f"--engine-arg takes KEY=JSON, got {it!r}")
        if key in out:
            raise L2sUsageError(f"--engine-arg {key}: given twice")
        if key in OWN_ENGINE_ARGS:
            raise L2sUsageError(f"--engine-arg {key}: set by verify itself (MODEL, "
                                "--tp, --ep, --schedule, --load-format)")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError as e:
            raise L2sUsageError(f"--engine-arg {key}: the value is not JSON ({e.msg} at "
                                f"column {e.colno}); write a string as {key}='\"text\"'"
                                ) from None
    return out


def predicted_gains(args, config: dict, batches: list[int]) -> tuple[dict, str]:
    """The lint's predicted gain (us per decode step, no prefetch minus
    prefetch; positive = faster) of the schedule at each batch size, for the
    engine's model config, and a note ("" or why there is none: ``auto``).
    Raises ``L2sError`` for a bad schedule, device profile or model config
    (before any engine starts)."""
    if args.schedule == "auto":
        return {}, "schedule auto: the plugin fits at start-up; see its log line"
    sets = _schedule_sets(args)
    load_schedule(args.schedule, sets, config)  # a bad schedule: exit 1, no engine
    out = {}
    for m in batches:  # an L2sError (device profile, config, TP split): exit 1
        run = lint_path(args.schedule, sets, str(args.model_dir / "config.json"),
                        args.device, tokens=m, graph_mode="full")
        out[m] = round(run.step_period("base") - run.step_period("sim"), 3)
    return out, ""


def _schedule_sets(args) -> list[str]:
    """The overrides verify applies (the user's, then TP and EP)."""
    return list(args.overrides) + [f"tp={args.tp}", f"ep={'on' if args.ep else 'off'}"]


def _check_args(args) -> list[int]:
    """The batch sizes, after checking every option before any work (the
    report's two paths included). Raises ``L2sUsageError``; ``L2sError``
    for a model config that does not read."""
    batches = [int(b) for b in numbers("--tokens", args.tokens, int)]
    if any(b < 1 for b in batches) or len(set(batches)) != len(batches):
        raise L2sUsageError("--tokens takes distinct positive integers, got "
                            f"{args.tokens}")
    if not args.schedule.strip():
        raise L2sUsageError("--schedule: empty (a .l2s path, or auto)")
    generate = args.timing == "generate"
    if generate and args.replays is not None:
        raise L2sUsageError("--replays: only with --timing replay (--timing generate "
                            "times whole generate calls)")
    if args.replays is None:
        args.replays = REPLAYS
    for opt, value, low in (("--output-len", args.output_len, 8 if generate else 1),
                            ("--num-iters", args.num_iters, 1),
                            ("--replays", args.replays, 1),
                            ("--num-iters-warmup", args.num_iters_warmup, 0),
                            ("--input-len", args.input_len, 1)):
        if value < low:
            why = (" (with --timing generate: the short call makes a quarter of it)"
                   if opt == "--output-len" and generate else "")
            raise L2sUsageError(f"{opt} must be at least {low}{why}, got {value}")
    if args.tp is not None and args.tp < 1:
        raise L2sUsageError(f"--tp must be at least 1, got {args.tp}")
    if args.schedule == "auto" and args.overrides:
        raise L2sUsageError("--set: not with --schedule auto (the fit chooses every "
                            "setting)")
    args.model_dir = _model_dir(args.model)
    out = Path(args.output_json)
    if str(out).startswith("/dev/") or out.suffix != ".json":
        raise L2sUsageError(f"--output: a .json file path (the markdown goes "
                            f"beside it, .md), got {args.output_json!r}")
    model_config_arg(str(args.model_dir / "config.json"))  # file:line:col errors
    check_device_arg(args.device)
    _check_report_paths(args)
    return batches


def _check_report_paths(args) -> None:
    """``files.check_output_path`` for the report's JSON and markdown: run
    again once the schedule is read, so that no file verify reads (the
    model config, the device profile, the schedule) is replaced by its
    report (a usage error before the engine starts)."""
    out = Path(args.output_json)
    check_output_path(out)
    check_output_path(out.with_suffix(".md"))


def _default_tp(args) -> None:
    """``--tp`` not given: the schedule's own ``tp`` line (1 for auto)."""
    if args.tp is not None:
        return
    if args.schedule == "auto":
        args.tp = 1
        return
    args.tp = load_schedule(args.schedule, args.overrides).tp


def _plugin_section(args) -> dict:
    """``additional_config["l2sched"]`` of the engine: the schedule (an
    absolute path, or ``auto``), the overrides and TP, the device profile,
    ``on_predicted_loss: warn`` (verify measures: a schedule predicted
    to lose is installed so that its loss is measured), and the capture
    launch when ``--capture-launch`` chose one."""
    if args.schedule == "auto":
        section = {"schedule": "auto"}
    else:
        section = {"schedule": str(Path(args.schedule).resolve()),
                   "set": _schedule_sets(args)}
    section["on_predicted_loss"] = "warn"
    if args.device:
        section["device"] = args.device
    if args.capture_launch:
        section["capture_launch"] = args.capture_launch
    return section


def _start(args, batches: list[int], load_format: str, engine_args: dict):
    """The started ``verify_engine.VllmEngine``, or ``None`` after one line
    on stderr when vLLM's engine did not start. Raises ``L2sUsageError``
    without vLLM."""
    from l2sched.vllm.verify_engine import start_engine  # optional: imports vLLM

    try:
        import torch
        import vllm  # noqa: F401
    except ImportError:
        raise L2sUsageError("needs vLLM 0.33.0 and a GPU: pip install 'l2sched[vllm,gpu]' "
                            "(in a checkout: pip install -e '.[vllm,gpu]')") from None
    if torch.cuda.device_count() < args.tp:
        raise L2sUsageError(f"needs {args.tp} CUDA GPU{'s' if args.tp > 1 else ''}; "
                            f"this machine has {torch.cuda.device_count()}")
    try:
        return start_engine(str(args.model_dir), tp=args.tp, ep=args.ep,
                            section=_plugin_section(args), load_format=load_format,
                            max_batch=max(batches), input_len=args.input_len,
                            output_len=args.output_len, engine_args=engine_args)
    except Exception as e:  # vLLM's own error; its log above says more
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"l2sched verify: vLLM's engine did not start: {type(e).__name__}: "
              f"{first}", file=sys.stderr)
        return None


def _dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` writes every thread's stack to stderr (an engine
    whose process does not exit); skipped where stderr has no file
    descriptor (captured output) or the platform has no SIGUSR1."""
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError
        pass


def cmd_verify(args) -> int:
    """Run the measurement and write the report. Returns 0 when it ran and
    token ids were equal (or ``auto`` chose no prefetch: nothing to
    measure), 1 when they differed, the engine did not start or a worker
    has no installed schedule (the engine's log says why), 2 for usage
    errors. SIGUSR1 dumps every thread's stack to stderr (a process that
    does not exit after its report: benchmarks/verify_gpu.py)."""
    from l2sched.vllm.verify_engine import SwitchFailed  # optional: imports vLLM

    _dump_stacks_on_sigusr1()
    engine_args = _engine_args(args.engine_arg)
    batches = _check_args(args)
    _default_tp(args)
    config = json.loads((args.model_dir / "config.json").read_text())
    load_format = args.load_format or (
        "auto" if any(f.suffix in WEIGHT_SUFFIXES for f in args.model_dir.iterdir())
        else "dummy")
    progress.stage("linting the schedule at each batch size")
    predicted, note = predicted_gains(args, config, batches)
    _check_report_paths(args)  # the schedule and its profile are read now
    progress.stage("starting vLLM's engine")
    engine = _start(args, batches, load_format, engine_args)
    if engine is None:
        return 1
    installed = engine.state()
    if args.schedule == "auto" and not any(w.get("installed") for w in installed):
        print("l2sched verify: schedule auto installed nothing on any worker (the "
              "plugin's 'prefetch OFF: auto: ...' line in the log above says what the "
              "fit answered); nothing to measure", file=sys.stderr)
        return 0
    try:
        missing = engine.missing_graphs(batches) if args.timing == "replay" else ""
        if missing:
            print(f"l2sched verify: {missing}; give --tokens among the captured sizes, "
                  "or capture these (--engine-arg 'compilation_config={\"cudagraph_capture_"
                  "sizes\": [...]}'), or use --timing generate", file=sys.stderr)
            return 1
        if args.timing == "replay":
            results = V.measure_replays(engine, batches, output_len=args.output_len,
                                        rounds=args.num_iters,
                                        warmup=args.num_iters_warmup,
                                        replays=args.replays, on_progress=progress.stage)
        else:
            results = V.measure(engine, batches, output_len=args.output_len,
                                rounds=args.num_iters, warmup=args.num_iters_warmup,
                                on_progress=progress.stage)
    except SwitchFailed as e:
        print(f"l2sched verify: {e}", file=sys.stderr)
        return 1
    summaries = []
    for r in results:
        r.predicted_gain_us = predicted.get(r.batch)
        summaries.append(r.summary())
    settings = {"model": str(args.model_dir), "tp": args.tp, "ep": args.ep,
                "load_format": load_format, "input_len": args.input_len,
                "output_len": args.output_len, "timing": args.timing,
                **({"replays": args.replays} if args.timing == "replay" else {}),
                "num_iters": args.num_iters,
                "num_iters_warmup": args.num_iters_warmup, "schedule": args.schedule,
                "set": list(args.overrides), "device": args.device,
                "engine_args": engine_args, **({"prediction": note} if note else {})}
    rep = V.Report("l2sched " + shlex.join(args.argv), settings, installed, summaries)
    md = V.write_report(rep, Path(args.output_json))
    sys.stdout.write(V.render_markdown(rep))
    print(f"l2sched verify: wrote {args.output_json} and {md}", file=sys.stderr)
    return 0 if all(s["tokens_equal"] for s in summaries) else 1


def add_cli(sub) -> None:
    """Register ``verify MODEL --schedule X.l2s|auto ...``."""
    p = add_command(
        sub, "verify", cmd_verify,
        help="measure a schedule's gain inside vLLM's engine (needs a GPU)",
        description="Start vLLM's offline engine with the l2sched plugin, switch "
                    "prefetch on and off in the one engine (interleaved rounds, an "
                    "A/A pair for the noise) at each batch size, and write the "
                    "decode step times, the gain, the lint's prediction and a "
                    "verdict (faster / same / slower) as JSON + markdown.")
    p.add_argument("model", metavar="MODEL",
                   help="Hugging Face model directory (or its config.json); "
                        "without weight files the engine uses dummy weights")
    p.add_argument("--schedule", required=True, metavar="PATH|auto",
                   help="the .l2s schedule, or auto (the plugin fits one)")
    p.add_argument("--set", dest="overrides", action=SetAction, default=[],
                   metavar="KEY=VALUE", help="override a schedule value (repeatable)")
    p.add_argument("--device", metavar="NAME_OR_FILE",
                   help="device profile (default: the schedule's)")
    p.add_argument("--tp", type=int, default=None, metavar="N",
                   help="tensor-parallel size (default: the schedule's tp line; 1 for auto)")
    p.add_argument("--ep", action="store_true", help="expert parallel")
    p.add_argument("--capture-launch", default=None, choices=CAPTURE_LAUNCHES,
                   help="how a fill enters the FULL decode graphs (the plugin's "
                        "capture_launch; default: the runtime's, fork; docs/runtime.md)")
    p.add_argument("--tokens", "--batch-size", dest="tokens", default="1,4,16,64",
                   metavar="M[,M...]",
                   help="tokens per decode step, the batch sizes timed (default "
                        "1,4,16,64; --batch-size: vllm bench latency's spelling)")
    p.add_argument("--input-len", type=int, default=32, metavar="N",
                   help="prompt tokens (default 32)")
    p.add_argument("--output-len", type=int, default=64, metavar="N",
                   help="new tokens of the token check; with --timing generate, of the "
                        "long call (the short call makes a quarter) (default 64)")
    p.add_argument("--timing", choices=("replay", "generate"), default="replay",
                   help="replay (default): the step is the GPU time of back-to-back "
                        "replays of the captured FULL decode graph of each batch size "
                        "(token ids checked by one generate per arm); generate: the "
                        "difference of two generate calls (the host's share included, "
                        "10-100x noisier)")
    p.add_argument("--replays", type=int, default=None, metavar="N",
                   help=f"graph replays per timed arm; only with --timing replay "
                        f"(default {REPLAYS})")
    p.add_argument("--num-iters", type=int, default=5, metavar="N",
                   help="timed rounds per batch size (default 5)")
    p.add_argument("--num-iters-warmup", type=int, default=1, metavar="N",
                   help="untimed rounds first (default 1)")
    p.add_argument("--load-format", default=None,
                   help="vLLM load format (default: auto with weight files, else dummy)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=JSON",
                   help="extra vllm.LLM keyword argument (repeatable; not one verify "
                        "sets: " + ", ".join(OWN_ENGINE_ARGS) + "), e.g. "
                        "--engine-arg 'compilation_config={\"cudagraph_capture_sizes\":[1,4]}'")
    # --output-json: vllm bench latency's spelling, kept as an alias
    p.add_argument("-o", "--output", "--output-json", dest="output_json",
                   default="l2sched-verify.json", metavar="PATH",
                   help="JSON report (a .json path); the markdown goes beside it "
                        "(.md) and to stdout, which also carries vLLM's log "
                        "(default l2sched-verify.json)")
