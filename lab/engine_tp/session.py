"""The TP-emulation run on one GPU, step by step (each step its own process;
a device call runs one or more of them):

    python -m lab.engine_tp.session prepare DIR [--model glm5next|qwen3_moe] [--tp 4]
        [--allreduce-from PROFILE | --allreduce-us US] [--base h200] [--util 0.85]
    python -m lab.engine_tp.session spin-fill DIR      # GPU: the measured slowdown terms
    python -m lab.engine_tp.session serve DIR          # GPU: auto + start-up verify
    python -m lab.engine_tp.session verify DIR         # GPU: l2sched verify, M = 1/4/16/64
    python -m lab.engine_tp.session serve-verify DIR   # GPU: both in one engine start
    SCHEDULE=S.l2s python -m lab.engine_tp.session verify|bench DIR
                                                       # GPU: the same for S forced on
    python -m lab.engine_tp.session bench DIR          # GPU: bench run, same schedule
    [SCHEDULE=S.l2s] python -m lab.engine_tp.session trace|trace-bench DIR
                                                       # GPU: kernel traces off/on, engine;
                                                       # then bench + summary (lab.engine_tp.trace)
    SCHEDULE=S.l2s [SET=k=v,...] python -m lab.engine_tp.session forced DIR
                                                       # GPU: S forced on, start-up A/B, tokens
    python -m lab.engine_tp.session report DIR         # tables + thresholds

``prepare`` (CPU) writes ``DIR/full.json`` (the TP model, cut to the layers
whose rank weights fit the GPU share ``--util``), ``DIR/rank/config.json``
(``shapes.rank_config``: what vLLM serves at TP1), ``DIR/emulated.toml``
(``emulation_profile``) and ``DIR/spec.json`` (what ``plugin`` reads from
``$L2SCHED_LAB_EMULATE``). The GPU steps need vLLM staged
(``benchmarks/vllm_gpu/stage.sh``, which also installs ``plugin``'s entry
point) and set ``L2SCHED_LAB_EMULATE`` and ``L2SCHED_CACHE_DIR=DIR/cache``
for the engines they start. Engine arguments: ``benchmarks/vllm_gpu.py``'s
(``engine_kwargs``; Qwen3-MoE with compilation mode 0, as
``benchmarks/verify_gpu.py``). ``report`` writes ``DIR/report.json`` and
``DIR/report.md``: per M the engine's gain (``verify``: off - on), its A/A
noise, the bench step's gain for the same schedule (none - arm) and their
ratio, checked against ``THRESHOLDS`` (written before the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from l2sched.errors import L2sError

ROOT = Path(__file__).resolve().parents[2]

#: Written before the first GPU run (issue 44), never after: what counts as
#: the gain surviving vLLM's real layers.
THRESHOLDS = {
    "startup_keeps_on": "the start-up A/B (verify: 5) keeps the fitted schedule on",
    "engine_vs_bench": 0.5,   # engine gain >= 50% of the bench gain at every M
    "tokens_equal": "token ids identical with prefetch on, off, off again (verify)",
}
TOKENS = (1, 4, 16, 64)
CONFIGS = {"glm5next": "l2sched/data/glm53-flash-config.json",
           "qwen3_moe": "l2sched/data/qwen3-30b-a3b-config.json"}


def _vllm_gpu():
    """``benchmarks/vllm_gpu.py``: the engine arguments and the engine's
    planning margin beyond its weights (``ENGINE_RESERVE``, bytes)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vllm_gpu
    return vllm_gpu


def _env(d: Path) -> dict:
    return {**os.environ, "L2SCHED_LAB_EMULATE": str(d / "spec.json"),
            "L2SCHED_CACHE_DIR": str(d / "cache"), "L2SCHED_PROGRESS": "1",
            "VLLM_USE_FLASHINFER_SAMPLER": "0"}


def prepare(d: Path, model: str, tp: int, base: str, source: str | None,
            fixed_us: float | None, util: float, gpu_bytes: int) -> dict:
    """Write the run's inputs into ``d`` (see the module docstring); returns
    the spec."""
    from l2sched.model.config import load_model_config
    from lab.engine_tp.emulation_profile import emulation_profile_text
    from lab.engine_tp.shapes import layers_that_fit, rank_config

    full = dict(load_model_config(ROOT / CONFIGS[model]))
    budget = int(util * gpu_bytes) - _vllm_gpu().ENGINE_RESERVE
    full["num_hidden_layers"] = layers_that_fit(full, tp, budget)
    rank = rank_config(full, tp, model)
    name = f"{Path(base).stem if base.endswith('.toml') else base}-emulating-tp{tp}"
    emulated = emulation_profile_text(base, tp, name, source=source, fixed_us=fixed_us)
    # every input read and checked above: nothing is half-written on bad input
    d.mkdir(parents=True, exist_ok=True)
    (d / "rank").mkdir(exist_ok=True)
    (d / "full.json").write_text(json.dumps(full, indent=1))
    (d / "rank" / "config.json").write_text(json.dumps(rank, indent=1))
    (d / "emulated.toml").write_text(emulated)
    spec = {"tp": tp, "model": model, "full_config": full,
            "device_profile": str(d / "emulated.toml"), "embedding": True,
            "util": util, "layers": full["num_hidden_layers"]}
    (d / "spec.json").write_text(json.dumps(spec, indent=1))
    return spec


def plugin_section(spec: dict, schedule: Path | None = None, verify: int = 0) -> dict:
    """The l2sched plugin's section for the run's engines: ``schedule``
    forced on (``on_predicted_loss: warn``, so a predicted loss installs
    anyway), else ``auto``; the emulation profile as the device; the
    start-up A/B of ``verify`` rounds when given."""
    section: dict = {"schedule": str(schedule) if schedule else "auto"}
    if verify:
        section["verify"] = verify
    section["device"] = spec["device_profile"]
    if schedule:
        section["on_predicted_loss"] = "warn"
    return section


def engine_kwargs(d: Path, spec: dict) -> dict:
    """``vllm.LLM`` keyword arguments (without model and l2sched section)."""
    VG = _vllm_gpu()
    kw = VG.engine_kwargs({
        "model": str(d / "rank"), "util": spec["util"], "max_model_len": 512,
        "max_num_seqs": max(VG.CAPTURE_SIZES), "max_num_batched_tokens": 2048,
        "capture_sizes": list(VG.CAPTURE_SIZES), "section": None})
    if spec["model"] != "glm5next":  # GLM-5.3's backends do not apply
        for k in ("attention_config", "kda_prefill_backend"):
            kw.pop(k)
        kw["compilation_config"] = {**kw["compilation_config"], "mode": 0}
    return kw


def serve(d: Path) -> int:
    """One engine with ``{"schedule": "auto", "verify": 5}``; greedy token
    ids at every M of ``TOKENS`` into ``d/serve.json``."""
    spec = json.loads((d / "spec.json").read_text())
    os.environ.update(_env(d))
    from vllm import LLM, SamplingParams

    kw = engine_kwargs(d, spec)
    kw["additional_config"] = {"l2sched": plugin_section(spec, verify=5)}
    llm = LLM(**kw)
    vocab = int(llm.llm_engine.model_config.hf_text_config.vocab_size)
    out = {"tokens": {}}
    sp = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    for m in TOKENS:
        res = llm.generate(_prompts(vocab, m), sp, use_tqdm=False)
        out["tokens"][str(m)] = [list(r.outputs[0].token_ids) for r in res]
    (d / "serve.json").write_text(json.dumps(out))
    return 0


def _prompts(vocab: int, m: int) -> list:
    return [{"prompt_token_ids": [(97 * (i + 1) + 13 * j) % (vocab - 200) + 100
                                  for j in range(32)]} for i in range(m)]


def forced(d: Path) -> int:
    """One engine with ``$SCHEDULE`` forced on (``$SET``: comma-separated
    ``KEY=VALUE`` settings; ``on_predicted_loss: warn``, so a predicted loss
    installs anyway) and the start-up A/B (``verify: 5``, its lines in the
    engine's log); then greedy token ids at every M of ``TOKENS`` with the
    fills on, switched off (``l2sched_set_prefetch``), and off again, into
    ``d/forced.json``. Returns 1 when the ids differ or nothing installed.
    For the schedule ``auto`` does not choose (issue 44: where its fit and
    the engine disagree)."""
    spec = json.loads((d / "spec.json").read_text())
    os.environ.update(_env(d))
    from vllm import LLM, SamplingParams

    section = plugin_section(spec, Path(os.environ["SCHEDULE"]).resolve(), verify=5)
    if os.environ.get("SET"):
        section["set"] = os.environ["SET"].split(",")
    kw = engine_kwargs(d, spec)
    kw["additional_config"] = {"l2sched": section}
    llm = LLM(**kw)
    vocab = int(llm.llm_engine.model_config.hf_text_config.vocab_size)
    sp = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)

    def ids() -> dict:
        return {str(m): [list(r.outputs[0].token_ids) for r in
                         llm.generate(_prompts(vocab, m), sp, use_tqdm=False)] for m in TOKENS}

    state = llm.collective_rpc("l2sched_prefetch_state")
    out = {"schedule": section, "state_on": state, "on": ids()}
    out["state_off"] = llm.collective_rpc("l2sched_set_prefetch", args=(False,))
    out["off"], out["off_again"] = ids(), ids()
    out["equal"] = {m: out["on"][m] == out["off"][m] == out["off_again"][m] for m in out["on"]}
    (d / "forced.json").write_text(json.dumps(out))
    print("session forced: installed", [s.get("installed") for s in state],
          "tokens equal", json.dumps(out["equal"]), flush=True)
    return 0 if all(out["equal"].values()) and all(s.get("installed") for s in state) else 1


def verify(d: Path) -> int:
    """``l2sched verify`` of ``auto`` on the rank model with the engine
    arguments; its report is ``d/verify.json`` + ``.md``. With ``$SCHEDULE``
    set: that schedule forced on (``verify_forced``)."""
    spec = json.loads((d / "spec.json").read_text())
    if os.environ.get("SCHEDULE"):
        return verify_forced(d, spec, Path(os.environ["SCHEDULE"]).resolve())
    cmd = [sys.executable, "-m", "l2sched", "verify", str(d / "rank"), "--schedule", "auto",
           "--device", spec["device_profile"], "--tokens", ",".join(map(str, TOKENS)),
           "--num-iters", "5", "--output-len", "64", "--output-json", str(d / "verify.json")]
    for k, v in engine_kwargs(d, spec).items():
        if k not in ("model", "load_format", "skip_tokenizer_init", "seed",
                     "tensor_parallel_size", "worker_extension_cls"):
            cmd += ["--engine-arg", f"{k}={json.dumps(v)}"]
    print("session verify:", shlex.join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=_env(d)).returncode


def verify_forced(d: Path, spec: dict, schedule: Path) -> int:
    """``l2sched verify``'s measurement of ``schedule`` forced on (see
    ``measure_in_engine``). Not the CLI: its ``--tp`` is the engine's TP
    degree and sets the schedule's ``tp`` to it (1 here), while the emulated
    rank is TP rank 0 of ``spec["tp"]``: the schedule keeps its own ``tp``
    line."""
    section = plugin_section(spec, schedule)
    return measure_in_engine(d, spec, section, "verify (SCHEDULE=" + str(schedule) + ")")


def serve_verify(d: Path) -> int:
    """``serve`` and ``verify`` in one engine (one start instead of two): the
    engine starts with ``{"schedule": "auto", "verify": 5}`` (auto's fit and
    the start-up A/B, as ``serve``), then ``measure_in_engine`` measures what
    auto kept on. Writes ``d/verify.json`` + ``.md``; its log is both steps'."""
    spec = json.loads((d / "spec.json").read_text())
    section = plugin_section(spec, verify=5)
    return measure_in_engine(d, spec, section, "serve-verify (auto, verify: 5)")


def measure_in_engine(d: Path, spec: dict, section: dict, label: str) -> int:
    """One engine on the rank model with the plugin ``section``, then
    ``l2sched verify``'s measurement through its library
    (``vllm.verify.measure_replays``: token ids on/off/off again, then
    interleaved FULL-graph replays with an A/A pair, 5 rounds) at every M of
    ``TOKENS``, into ``d/verify.json`` + ``.md``. The lint's prediction per M
    is made for the schedule the engine installed (``auto``'s cached fit, or
    the forced file) on the full config at the schedule's own TP with the
    emulation profile, as the plugin lints it. Returns 1 when nothing was
    installed (auto's "no prefetch" included) or tokens differ."""
    os.environ.update(_env(d))
    from l2sched.lint.run import lint_path
    from l2sched.vllm import verify as V
    from l2sched.vllm.replay import REPLAYS
    from l2sched.vllm.verify_engine import start_engine

    kw = _start_engine_kwargs(d, spec)
    engine = start_engine(str(d / "rank"), tp=1, ep=False, section=section,
                          load_format="dummy", max_batch=max(TOKENS), input_len=32,
                          output_len=64, engine_args=kw)
    installed = engine.state()
    if not all(w.get("installed") for w in installed):
        print(f"session {label}: no schedule installed:", installed, flush=True)
        return 1
    schedule = (Path(section["schedule"]) if section["schedule"] != "auto"
                else fitted_schedule(d))
    predicted = {}
    for m in TOKENS:
        run = lint_path(str(schedule), [], str(d / "full.json"), spec["device_profile"],
                        tokens=m, graph_mode="full")
        predicted[m] = round(run.step_period("base") - run.step_period("sim"), 3)
    results = V.measure_replays(engine, TOKENS, output_len=64, rounds=5, warmup=1,
                                replays=REPLAYS)
    for r in results:
        r.predicted_gain_us = predicted.get(r.batch)
    settings = {"model": str(d / "rank"), "tp": 1, "emulated_tp": spec["tp"],
                "schedule": str(schedule), "section": section,
                "device": spec["device_profile"], "timing": "replay", "replays": REPLAYS,
                "num_iters": 5, "num_iters_warmup": 1, "output_len": 64, "engine_args": kw}
    rep = V.Report("python -m lab.engine_tp.session " + label, settings, installed,
                   [r.summary() for r in results])
    V.write_report(rep, d / "verify.json")
    print(V.render_markdown(rep), flush=True)
    return 0 if all(r.tokens_equal for r in results) else 1


def _start_engine_kwargs(d: Path, spec: dict) -> dict:
    """``engine_kwargs`` without the ones ``verify_engine.start_engine`` sets."""
    return {k: v for k, v in engine_kwargs(d, spec).items()
            if k not in ("model", "load_format", "skip_tokenizer_init", "seed",
                         "tensor_parallel_size", "worker_extension_cls", "additional_config")}


def trace(d: Path) -> int:
    """``lab.engine_tp.trace.trace_engine``: kernel traces of the engine's
    FULL decode graphs with prefetch off and on, for ``$SCHEDULE`` forced on
    (else ``auto``'s fit), into ``d/traces-engine``."""
    from lab.engine_tp.trace import trace_engine

    spec = json.loads((d / "spec.json").read_text())
    forced = os.environ.get("SCHEDULE")
    section = plugin_section(spec, Path(forced).resolve() if forced else None)
    return trace_engine(d, _start_engine_kwargs(d, spec), section, TOKENS, _env(d))


def trace_bench(d: Path) -> int:
    """``lab.engine_tp.trace.trace_bench`` of ``$SCHEDULE`` (else ``auto``'s
    cached fit): the bench step's traces, then ``d/trace.json`` + ``.md``."""
    from lab.engine_tp.trace import trace_bench as run_trace_bench

    spec = json.loads((d / "spec.json").read_text())
    sched = bench_schedule(d, "trace-bench")
    return 1 if sched is None else run_trace_bench(d, spec, sched, TOKENS, _env(d))


def bench_schedule(d: Path, step: str) -> Path | None:
    """``$SCHEDULE``, else ``auto``'s cached fit (``fitted_schedule``); None,
    said in one line, when there is neither."""
    forced = os.environ.get("SCHEDULE")
    sched = Path(forced).resolve() if forced else fitted_schedule(d)
    if sched is None:
        print(f"session {step}: auto cached no schedule (no prefetch, or the engine did not run)")
    return sched


def fitted_schedule(d: Path) -> Path | None:
    """The ``.l2s`` file ``auto`` cached in ``d/cache`` (the newest), or None."""
    files = sorted((d / "cache").glob("**/*.l2s"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def bench(d: Path) -> int:
    """``l2sched bench run`` of ``auto``'s schedule (or ``$SCHEDULE``) on the
    same model and emulation profile, with an A/A arm; ``d/bench.json``."""
    spec = json.loads((d / "spec.json").read_text())
    sched = bench_schedule(d, "bench")
    if sched is None:
        return 1
    cmd = [sys.executable, "-m", "l2sched", "bench", "run", "--schedule", str(sched),
           "--device-profile", spec["device_profile"], "--model-config",
           str(d / "full.json"), "--tokens", ",".join(map(str, TOKENS)), "--aa",
           "--out", str(d / "bench.json")]
    print("session bench:", shlex.join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=_env(d)).returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.engine_tp.session",
                                description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "spin-fill", "serve", "serve-verify", "forced",
                                    "verify", "bench", "trace", "trace-bench", "report"))
    p.add_argument("dir")
    p.add_argument("--model", choices=sorted(CONFIGS), default="glm5next")
    p.add_argument("--tp", type=int, default=4)
    p.add_argument("--base", default="h200")
    p.add_argument("--allreduce-from", default="sm120-rtx-pro-6000-maxq")
    p.add_argument("--allreduce-us", type=float, default=None)
    p.add_argument("--util", type=float, default=0.85)
    p.add_argument("--gpu-bytes", type=int, default=0,
                   help="GPU memory (default: the current CUDA device's)")
    a = p.parse_args(argv)
    d = Path(a.dir).resolve()
    if not 0 < a.util <= 1:
        p.error(f"--util {a.util}: want a share of the GPU's memory in (0, 1]")
    if a.step != "prepare" and not (d / "spec.json").is_file():
        print(f"session {a.step}: {d / 'spec.json'} not found: run "
              f"`python -m lab.engine_tp.session prepare {a.dir}` first", file=sys.stderr)
        return 1
    if a.step != "prepare":  # GPU steps: their tracebacks are the diagnosis
        return _step(a, d)
    try:
        return _step(a, d)
    except (L2sError, ValueError) as e:  # bad profile, model or sizes: one line
        print(f"session {a.step}: {e}", file=sys.stderr)
        return 1


def _step(a, d: Path) -> int:
    """Run step ``a.step`` on ``d`` (``main``'s arguments)."""
    if a.step == "prepare":
        gpu = a.gpu_bytes
        if not gpu:
            import torch
            gpu = torch.cuda.get_device_properties(0).total_memory
        spec = prepare(d, a.model, a.tp, a.base, None if a.allreduce_us else
                       a.allreduce_from, a.allreduce_us, a.util, gpu)
        print(f"session prepare: {spec['layers']} layers of {a.model} at TP{a.tp} rank "
              f"shapes; {d / 'emulated.toml'}")
        return 0
    if a.step == "spin-fill":
        from l2sched.device import load_device
        from lab.engine_tp.spin_fill import measure, write_measured
        spec = json.loads((d / "spec.json").read_text())
        prof = load_device(spec["device_profile"])
        res = measure(prof, spec["tp"], int(spec["full_config"]["hidden_size"]))
        (d / "spin-fill.json").write_text(json.dumps(res, indent=1))
        written = write_measured(spec["device_profile"], res, "spin-fill.json")
        print("session spin-fill:", json.dumps({"slowdown": written,
                                                "errors": res["errors"]}))
        return 0
    if a.step == "report":
        from lab.engine_tp.report import write_report
        return write_report(d)
    return {"serve": serve, "serve-verify": serve_verify, "forced": forced, "verify": verify,
            "bench": bench, "trace": trace, "trace-bench": trace_bench}[a.step](d)


if __name__ == "__main__":
    sys.exit(main())
