"""vLLM 0.33.0's real offline engine on one H200: GLM-5.3-Flash-shaped model,
dummy weights, vLLM's default CUDA-graph modes, the l2sched plugin off vs on.

    python3 benchmarks/vllm_gpu.py --out DIR [--quick] [--arms off,shipped,load]
    python3 benchmarks/vllm_gpu.py --report DIR/raw.json --out DIR   # re-render

Needs the payload that ``benchmarks/vllm_gpu/stage.sh`` stages (vLLM's files,
small wheels, l2sched and the shims plugin installed with their entry points,
``PYTHONPATH`` set by ``stage.sh env``); docs/vllm.md ("GPU run") says how,
and what is substituted and why.

Steps (each fails with one line ``vllm_gpu: FAILED <step>: <why>`` and the
log to read; the JSON and markdown are written whatever happened):

1. preflight: one CUDA GPU, its memory; ``vllm``/``l2sched`` importable.
2. model: a GLM-5.3-Flash ``config.json`` (``l2sched/data``) with its real
   per-layer dimensions and ``LAYERS`` (KDA+dense, KDA+MoE, MLA+MoE, the
   last layer KDA+MoE as in the real model); the routed experts per layer
   are as many as fit ``--util`` of the GPU per engine (``weight_bytes``).
3. engines: one child process per arm (``--child``), each
   ``vllm.LLM(load_format="dummy", skip_tokenizer_init=True, seed=0)`` with
   vLLM's default graph modes (GLM-5.3: breakable CUDA graphs, FULL for
   uniform decode, PIECEWISE for mixed batches; ``cudagraph_capture_sizes``
   cut to ``CAPTURE_SIZES``) and, for a prefetch arm,
   ``additional_config={"l2sched": {...}}`` exactly as docs/vllm.md says.
   Arms start one after another and stay up together (``--util`` each).
4. checks on each arm's log: graph capture finished; the plugin's summary
   line (one, TP rank 0/1, backend cuda) in every prefetch arm and no
   ``l2sched:`` line in ``off``; no ``prefetch OFF`` / ``L2 prefetch
   disabled``; the shims' line; the sparse-MLA backend chosen.
5. token ids (and their logprobs) identical in every arm, greedy, at every
   batch size.
6. decode throughput: per batch size, ms per decode step =
   (t(``--tokens``) - t(``--short-tokens``)) / (difference in tokens) of two
   ``generate`` calls with the same prompts, output tokens/s = batch /
   step; ``--reps`` rounds, arms interleaved (rotated every round); medians
   with p10/p90.
7. failure arms (full run; ``--failures``): a missing schedule and a
   schedule with a lint error on a small model; each must log exactly one
   ``prefetch OFF`` line and still serve.

Writes ``DIR/raw.json`` (everything measured), ``DIR/vllm-gpu.json``
(summary) and ``DIR/vllm-gpu.md``, and one log per arm. Exit code 0 when
every check passed, 1 when one failed, 2 when the run could not start.
torch and vLLM are imported by the child processes (and ``preflight``) only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import random
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Layer kinds of the reduced model, in order (attention+mlp).
LAYERS = ("kda+dense", "kda+moe", "kda+moe", "mla+moe", "kda+moe", "kda+moe")
#: The small model of the failure arms.
SMALL_LAYERS = ("kda+dense", "kda+moe", "kda+moe", "mla+moe")
SMALL_EXPERTS = 16
BATCHES = (1, 4, 16, 64)
CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64)
PROMPT_LEN = 32
SPARSE_MLA_BACKEND = "FLASHMLA_SPARSE"
SHIPPED = "schedules/glm53-flash-h200-tp4.l2s"
LINT_ERROR = "schedules/bench/fill-over-experts.l2s"

#: arm name -> ``additional_config["l2sched"]`` (None: no l2sched section).
#: The forced arms install the shipped schedule even where the plugin's
#: predicted-loss gate would keep it off (docs/vllm.md): measuring that loss
#: in the engine is what they are for.
FORCED = {"on_predicted_loss": "warn"}
ARMS = {
    "off": None,
    "shipped": {"schedule": SHIPPED, "set": {"tp": "1"}, **FORCED},
    "copy": {"schedule": SHIPPED, "set": {"tp": "1", "kernel": "copy"}, **FORCED},
    "load": {"schedule": SHIPPED, "set": {"tp": "1", "kernel": "load"}, **FORCED},
    "bulk": {"schedule": SHIPPED, "set": {"tp": "1", "kernel": "bulk"}, **FORCED},
    # issue 31: the shipped schedule installed and captured with its run-time
    # switch off (kernels exit at once): its cost against no plugin at all
    "shipped-off": {"schedule": SHIPPED, "set": {"tp": "1"}, "fills": "off", **FORCED},
    # issue 31: the plugin fits the live engine (vllm/auto.py)
    "auto": {"schedule": "auto"},
    # issue 31: the shipped schedule forced on, then the plugin's start-up
    # A/B of the captured decode graphs (verify_startup) decides
    "shipped-verify": {"schedule": SHIPPED, "set": {"tp": "1"}, "verify": 5, **FORCED},
    # `l2sched fit` for the reduced model at TP1 on the h200 profile, written
    # at run time (``fit_reduced``); the committed FITTED is for the full model
    "fit": {"schedule": "fit.l2s"},
}
FAILURE_ARMS = {
    "bad-path": {"schedule": "schedules/no-such-schedule.l2s"},
    "lint-error": {"schedule": LINT_ERROR, "set": {"tp": "1"}},
}

#: Bytes an engine needs beyond its weights (KV cache for 64 short
#: sequences incl. KDA states, activations, CUDA graphs, workspaces): a
#: planning margin, not a measurement.
ENGINE_RESERVE = 12 * 2**30

MARK = "@@VG "
#: Seconds an engine may take to come up (first arm: cold JIT caches).
START_FIRST_S, START_NEXT_S = 480.0, 300.0


# --------------------------------------------------------------------------
# the model


def reduced_config(n_experts: int, layers=LAYERS) -> dict:
    """The GLM-5.3-Flash text config (``l2sched/data/glm53-flash-config.json``)
    with ``len(layers)`` layers of the given kinds and ``n_experts`` routed
    experts per MoE layer; every other dimension is the real one."""
    from l2sched.model.config import default_config

    cfg = dict(default_config())
    kinds = [k.split("+") for k in layers]
    cfg.update(
        num_hidden_layers=len(layers), n_routed_experts=int(n_experts),
        layer_types=["linear_attention" if a == "kda" else "full_attention"
                     for a, _ in kinds],
        mlp_layer_types=["dense" if m == "dense" else "sparse" for _, m in kinds],
        architectures=["Glm5NextForCausalLM"], model_type="glm5_next_text")
    if cfg["num_experts_per_tok"] > n_experts:
        raise ValueError(f"{n_experts} experts < top-k {cfg['num_experts_per_tok']}")
    return cfg


def weight_bytes(cfg: dict) -> int:
    """bf16 parameter bytes of ``cfg`` at TP1: the decoder layers
    (l2sched's analytical inventory, lazy tensors and views excluded) plus
    embedding, LM head and final norm."""
    from l2sched.model.inventory import analytical_inventory

    inv = analytical_inventory(cfg, tp=1, ep=False)
    layers = sum(e.nbytes for layer in inv.layers for e in layer
                 if e.owns_memory and not e.lazy)
    return layers + (2 * cfg["vocab_size"] + 1) * cfg["hidden_size"] * 2


def experts_that_fit(gpu_bytes: int, util: float, layers=LAYERS,
                     reserve: int = ENGINE_RESERVE, cap: int | None = None) -> int:
    """The most routed experts per MoE layer (a multiple of 8, at most the
    real model's) whose weights fit ``util * gpu_bytes - reserve``."""
    full = reduced_config(8, layers)
    cap = cap or json.loads((ROOT / "l2sched/data/glm53-flash-config.json")
                            .read_text())["n_routed_experts"]
    base = weight_bytes(full)
    per8 = weight_bytes(reduced_config(16, layers)) - base
    room = util * gpu_bytes - reserve - base
    n = 8 + 8 * int(room // per8) if room > 0 else 0
    if n < full["num_experts_per_tok"]:
        raise ValueError(f"no room for {full['num_experts_per_tok']} experts: "
                         f"{util:.2f} x {gpu_bytes / 2**30:.0f} GiB")
    return min(n, cap)


def write_model_dir(cfg: dict, directory: Path) -> Path:
    """``directory/config.json`` (vLLM reads nothing else with dummy weights
    and no tokenizer)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    return directory


def prompts(batch: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``batch`` distinct prompts of ``length`` token ids (deterministic)."""
    rng = random.Random(seed * 1000003 + batch)
    return [[rng.randrange(100, vocab - 100) for _ in range(length)]
            for _ in range(batch)]


def arm_section(name: str, out: Path) -> dict | None:
    """The ``l2sched`` section of arm ``name`` with absolute paths (a
    relative path resolves against the server's working directory)."""
    spec = {**ARMS, **FAILURE_ARMS}[name]
    if spec is None:
        return None
    sec = json.loads(json.dumps(spec))
    sec["schedule"] = (str(out / "missing.l2s") if name == "bad-path" else
                       str(out / sec["schedule"]) if name == "fit" else
                       sec["schedule"] if sec["schedule"] == "auto" else
                       str(ROOT / sec["schedule"]))
    return sec


def fit_reduced(model_dir: Path, out: Path) -> dict:
    """Run ``l2sched fit --device h200 --tp 1`` for the reduced model
    (``model_dir/config.json``) into ``out/fit.l2s``, the ``fit`` arm's
    schedule (the committed fitted schedule names tensors of the full
    45-layer model's layer sequence). Returns ``{"windows": N, "summary":
    the command's last stderr line, "command"}``; ``windows`` 0 is fit's
    no-prefetch answer. Raises ``RuntimeError`` when fit fails."""
    cmd = [sys.executable, "-m", "l2sched", "fit", "--device", "h200", "--tp", "1",
           "--model-config", str(model_dir / "config.json"), "-o", str(out / "fit.l2s")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"l2sched fit exited {r.returncode}: "
                           f"{(r.stderr.strip().splitlines() or [''])[-1]}")
    text = (out / "fit.l2s").read_text()
    return {"windows": len(re.findall(r"^window ", text, flags=re.M)),
            "summary": (r.stderr.strip().splitlines() or [""])[-1],
            "command": shlex.join(["l2sched", *cmd[3:]])}


# --------------------------------------------------------------------------
# one engine (child process)


def engine_kwargs(spec: dict) -> dict:
    """The ``vllm.LLM`` keyword arguments of one arm (``spec``: what
    ``Run.spec`` writes plus the arm's ``section``)."""
    kwargs = dict(
        model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
        seed=0, dtype="bfloat16", tensor_parallel_size=1,
        max_model_len=spec["max_model_len"], max_num_seqs=spec["max_num_seqs"],
        max_num_batched_tokens=spec["max_num_batched_tokens"],
        gpu_memory_utilization=spec["util"],
        compilation_config={"cudagraph_capture_sizes": spec["capture_sizes"]},
        # TileLang mHC warm-ups would import tilelang (not carried).
        kernel_config={"enable_jit_warmup": False},
        # vLLM's sm_90 order for GLM-5.3's sparse MLA (head 512) is FlashInfer
        # SM90 (not carried), FA3 sparse (carried for the MLA prefill, but no
        # NoPE-512 guard), FlashMLA sparse (the one that documents GLM-5.3
        # NoPE on sm_90): docs/vllm.md (GPU run).
        attention_config={"backend": SPARSE_MLA_BACKEND},
        # FlashKDA's prefill workspace (706 MB at 64 sequences) is sized by
        # its first prefill, but vLLM 0.33.0 locks the workspace after graph
        # capture and its profile run skips attention: the first real
        # prefill then fails ("Workspace is locked ... requires 706.00 MB,
        # current size is 256.00 MB", run of 2026-12-01). The Triton KDA
        # prefill needs no workspace; decode is unchanged.
        kda_prefill_backend="triton",
        # the decode graphs' replay timing (l2sched_time_replays) in every arm
        worker_extension_cls="l2sched.vllm.switch.PrefetchSwitchExtension")
    if spec["section"] is not None:
        kwargs["additional_config"] = {"l2sched": spec["section"]}
    return kwargs


def child_main(spec_path: str) -> int:
    """Run one engine; commands (JSON lines) on stdin, results on stdout as
    ``MARK`` + JSON; vLLM's own log lines go to stdout/stderr as usual."""
    spec = json.loads(Path(spec_path).read_text())

    def emit(**kw):
        print(MARK + json.dumps(kw), flush=True)

    try:
        from vllm import LLM, SamplingParams
    except Exception as e:
        emit(event="error", step="import vllm", error=f"{type(e).__name__}: {e}")
        return 3
    kwargs = engine_kwargs(spec)
    t0 = time.time()
    try:
        llm = LLM(**kwargs)
    except Exception as e:
        import traceback

        traceback.print_exc()
        emit(event="error", step="start engine",
             error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return 4
    emit(event="ready", seconds=round(time.time() - t0, 1))
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            if cmd["cmd"] == "replay":  # GPU time of the captured decode graph
                (us,) = [r.get(cmd["batch"], r.get(str(cmd["batch"]))) for r in llm.collective_rpc(
                    "l2sched_time_replays", args=([cmd["batch"]], cmd["replays"]))]
                emit(event="replay", us=us)
                continue
            emit(event="gen", **_generate(llm, SamplingParams, cmd, spec))
        except Exception as e:
            emit(event="error", step=cmd["cmd"],
                 error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    del llm
    emit(event="bye")
    return 0


def _generate(llm, SamplingParams, cmd: dict, spec: dict) -> dict:
    ps = prompts(cmd["batch"], cmd.get("prompt_len", PROMPT_LEN), spec["vocab"])
    sp = SamplingParams(temperature=0.0, max_tokens=cmd["max_tokens"],
                        ignore_eos=True, detokenize=False,
                        logprobs=0 if cmd.get("logprobs") else None)
    t = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in ps], sp, use_tqdm=False)
    dt = time.perf_counter() - t
    toks = [list(o.outputs[0].token_ids) for o in outs]
    res = {"seconds": dt, "digest": hashlib.sha256(json.dumps(toks).encode())
           .hexdigest()[:16], "n_out": sum(len(x) for x in toks)}
    if cmd.get("logprobs"):
        res["tokens"] = toks
        res["logprobs"] = [[next(iter(d.values())).logprob for d in o.outputs[0].logprobs]
                           for o in outs]
    return res


# --------------------------------------------------------------------------
# the orchestrator's view of one child


class Fail(Exception):
    """A step failed; the message is the one line to print."""


class Arm:
    """One child process running one engine: its log, its results."""

    def __init__(self, name: str, section: dict | None, spec: dict, out: Path):
        self.name, self.section, self.out = name, section, out
        self.log_path = out / f"arm-{name}.log"
        spec_path = out / f"arm-{name}.spec.json"
        spec_path.write_text(json.dumps({**spec, "section": section}, indent=1))
        self.msgs: queue.Queue = queue.Queue()
        self.lines: list[str] = []
        self.ready_s = None
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(Path(__file__).resolve()), "--child",
             str(spec_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
            cwd=str(ROOT))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with open(self.log_path, "w", encoding="utf-8") as log:
            for line in self.proc.stdout:
                if line.startswith(MARK):
                    self.msgs.put(json.loads(line[len(MARK):]))
                    continue
                self.lines.append(line.rstrip("\n"))
                log.write(line)
                log.flush()
        self.msgs.put({"event": "exit", "code": self.proc.wait()})

    def wait(self, event: str, timeout: float) -> dict:
        """The next message; ``Fail`` on an error message, an exit or a
        timeout (the message names the log)."""
        try:
            m = self.msgs.get(timeout=timeout)
        except queue.Empty:
            raise Fail(f"arm {self.name}: no '{event}' within {timeout:.0f} s "
                       f"(log {self.log_path})") from None
        if m["event"] == event:
            return m
        if m["event"] == "error":
            raise Fail(f"arm {self.name}: {m['step']}: {m['error']} (log {self.log_path})")
        last = next((ln for ln in reversed(self.lines) if ln.strip()), "")
        raise Fail(f"arm {self.name}: {m['event']} {m.get('code', '')} while waiting "
                   f"for '{event}'; last log line: {last[-200:]} (log {self.log_path})")

    def gen(self, timeout: float = 300, **cmd) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": "gen", **cmd}) + "\n")
        self.proc.stdin.flush()
        return self.wait("gen", timeout)

    def replay(self, batch: int, replays: int, timeout: float = 120) -> float:
        """us per replay of the arm's FULL decode graph of ``batch``."""
        self.proc.stdin.write(json.dumps({"cmd": "replay", "batch": batch,
                                          "replays": replays}) + "\n")
        self.proc.stdin.flush()
        return self.wait("replay", timeout)["us"]

    def stop(self, timeout: float = 60) -> None:
        """Ask the engine to shut down; kill the child's process group when it
        does not exit in time."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        self._reader.join(10)


# --------------------------------------------------------------------------
# log checks

SUMMARY = re.compile(r"l2sched: TP rank 0/1: schedule (\S+) \(.*\) installed"
                     r"(?: switched off \(fills off\))?, backend (\S+), device (\S+), (lint [^:]+: \d+ errors, \d+ warnings|"
                     r"lint off|lint unavailable)")
OFF_LINE = re.compile(r"l2sched: TP rank 0/1: prefetch OFF: (.*)")
VERIFY_LINE = re.compile(r"l2sched: TP rank 0/1: verify \(.*\): (prefetch O[NF]F?:.*)")
BACKEND = re.compile(r"Using (?:AttentionBackendEnum\.)?(\S+?)(?: attention)? backend")


def log_checks(name: str, lines: list[str], section: dict | None,
               expect_off: str | None = None) -> list[dict]:
    """The checks on one arm's log lines: ``[{check, ok, detail}]``.
    ``expect_off``: the ``prefetch OFF`` reason a failure arm must log once."""
    text = "\n".join(lines)
    out = []

    def add(check, ok, detail=""):
        out.append({"arm": name, "check": check, "ok": bool(ok), "detail": detail})

    add("graph capture finished", "Graph capturing finished" in text,
        next((ln.strip()[-120:] for ln in lines if "Graph capturing finished" in ln), ""))
    add("shims applied", "vllm_gpu_shims:" in text and "FAILED" not in "".join(
        ln for ln in lines if "vllm_gpu_shims:" in ln),
        next((ln.split("vllm_gpu_shims:", 1)[1].strip()[:160] for ln in lines
              if "vllm_gpu_shims:" in ln), "no vllm_gpu_shims line"))
    backends = sorted({m.group(1) for m in BACKEND.finditer(text)})
    add(f"attention backend {SPARSE_MLA_BACKEND}", SPARSE_MLA_BACKEND in backends,
        ", ".join(backends))
    summaries = [ln for ln in lines if SUMMARY.search(ln)]
    offs = [OFF_LINE.search(ln).group(1) for ln in lines if OFF_LINE.search(ln)]
    disabled = [ln for ln in lines if "L2 prefetch disabled" in ln]
    if expect_off is not None:
        add(f"one 'prefetch OFF: {expect_off}' line",
            len(offs) == 1 and offs[0].startswith(expect_off) and not summaries,
            offs[0][:200] if offs else f"{len(offs)} prefetch OFF lines")
    elif section is None:
        l2 = [ln for ln in lines if "l2sched:" in ln]
        add("no l2sched line", not l2, l2[0][-160:] if l2 else "")
    elif section.get("schedule") == "auto" and not summaries:
        # auto may answer no prefetch: one INFO line with the fit's bound
        auto = [o for o in offs if o.startswith("auto: no prefetch")]
        add("auto: one 'prefetch OFF: auto: no prefetch' line (the fit's answer)",
            len(offs) == 1 and len(auto) == 1 and not disabled,
            (offs or disabled or ["no auto line"])[0][:400])
    else:
        m = SUMMARY.search(summaries[0]) if summaries else None
        add("one plugin summary line (TP rank 0/1, backend cuda)",
            len(summaries) == 1 and m and m.group(2) == "cuda",
            summaries[0].split("l2sched:", 1)[1].strip()[:400] if summaries
            else (offs[0][:200] if offs else "no summary line"))
        if section.get("verify"):
            verdicts = [VERIFY_LINE.search(ln).group(1) for ln in lines
                        if VERIFY_LINE.search(ln)]
            add("one start-up verify line (its verdict is the measurement)",
                len(verdicts) == 1 and not disabled,
                verdicts[0][:400] if verdicts else "no verify line")
        else:
            add("prefetch stays on", not offs and not disabled,
                (offs or disabled or [""])[0][:200])
    return out


# --------------------------------------------------------------------------
# statistics and the report


def stats(xs: list[float]) -> dict:
    """``{median, p10, p90, n}`` (``l2sched.bench.run.stats``)."""
    from l2sched.bench.run import stats as _stats

    return _stats(xs)


def step_ms(t_short: float, t_long: float, short: int, long: int) -> float:
    """ms per decode step from two generate times (s) of the same prompts."""
    return (t_long - t_short) / (long - short) * 1e3


def _max_logprob_diff(a: list, b: list) -> float:
    """The largest |difference| between two runs' per-token logprobs
    (lists of per-sequence lists, same shape)."""
    return max((abs(x - y) for sa, sb in zip(a, b) for x, y in zip(sa, sb)), default=0.0)


def summarize(raw: dict) -> dict:
    """The summary of a raw result: per arm and batch, ms/step and output
    tokens/s stats and the ratio of medians to ``off``; checks passed."""
    dec = {}
    for arm, per_b in raw.get("decode", {}).items():
        dec[arm] = {}
        for b, samples in per_b.items():
            ms = [s["ms_step"] for s in samples]
            if ms:  # an arm that failed before this batch has no samples
                dec[arm][b] = {"ms_step": stats(ms),
                               "tok_s": stats([int(b) * 1e3 / x for x in ms])}
    ratios = {}
    if "off" in dec:
        for arm, per_b in dec.items():
            if arm == "off":
                continue
            ratios[arm] = {b: v["ms_step"]["median"] / dec["off"][b]["ms_step"]["median"]
                           for b, v in per_b.items() if b in dec["off"]}
    rep = {arm: {b: stats(us) for b, us in per_b.items() if us}
           for arm, per_b in raw.get("replay", {}).items()}
    rep_vs_off = {}
    if "off" in rep:
        for arm, per_b in rep.items():
            if arm == "off":
                continue
            rep_vs_off[arm] = {
                b: {"ratio": v["median"] / rep["off"][b]["median"],
                    "us": v["median"] - rep["off"][b]["median"]}
                for b, v in per_b.items() if b in rep["off"]}
    checks = raw.get("checks", [])
    return {"meta": raw.get("meta", {}), "decode": dec, "replay_us": rep,
            "replay_vs_off": rep_vs_off,
            "step_ratio_vs_off": ratios, "checks": checks,
            "all_checks_passed": bool(checks) and all(c["ok"] for c in checks)
            and not raw.get("failed"),
            "failed": raw.get("failed", []), "skipped": raw.get("skipped", []),
            "arms": raw.get("arms", {}), "equality": raw.get("equality", {})}


def _cell(s: dict, fmt: str) -> str:
    if not s or s.get("median") is None:
        return "-"
    return f"{fmt.format(s['median'])} ({fmt.format(s['p10'])}-{fmt.format(s['p90'])})"


def markdown(summary: dict) -> str:
    """The report: what ran, every check, decode tables."""
    m = summary["meta"]
    title = (f"# vLLM {m.get('vllm', '?')} offline engine on {m.get('gpu', '?')}: "
             "GLM-5.3-Flash-shaped model, l2sched plugin off vs on")
    lines = [title, "",
             f"Run {m.get('date', '?')}: `{m.get('command', '?')}`. torch "
             f"{m.get('torch', '?')}, triton {m.get('triton', '?')}, Python "
             f"{m.get('python', '?')}. Model: {m.get('layers', '?')} layers "
             f"({m.get('layer_kinds', '?')}), {m.get('experts', '?')} routed experts "
             f"per MoE layer, real GLM-5.3-Flash dimensions otherwise, dummy weights "
             f"({m.get('weight_gb', '?')} GB), TP1, bf16, {m.get('util', '?')} of the GPU "
             f"per engine. Graph modes: vLLM's defaults for GLM-5.3 (breakable CUDA "
             f"graphs: FULL decode, PIECEWISE mixed), capture sizes "
             f"{m.get('capture_sizes', '?')}. Substitutions: docs/vllm.md (GPU run).", ""]
    lines += ["## Checks", "", "| arm | check | ok | detail |", "|---|---|---|---|"]
    for c in summary["checks"]:
        d = str(c.get("detail", "")).replace("|", "\\|")
        lines.append(f"| {c['arm']} | {c['check']} | {'yes' if c['ok'] else '**NO**'} | {d} |")
    for f in summary["failed"]:
        lines.append(f"| - | FAILED | **NO** | {f} |")
    if summary["skipped"]:
        lines += ["", "Skipped: " + "; ".join(summary["skipped"]) + "."]
    dec = summary["decode"]
    if dec:
        bs = sorted({int(b) for per in dec.values() for b in per})
        head = "| arm | " + " | ".join(f"batch {b}" for b in bs) + " |"
        sep = "|---|" + "---|" * len(bs)
        lines += ["", "## Decode: ms per step, median (p10-p90)", "", head, sep]
        for arm, per in dec.items():
            lines.append(f"| {arm} | " + " | ".join(
                _cell(per.get(str(b), {}).get("ms_step"), "{:.3f}") for b in bs) + " |")
        lines += ["", "## Decode: output tokens/s, median (p10-p90)", "", head, sep]
        for arm, per in dec.items():
            lines.append(f"| {arm} | " + " | ".join(
                _cell(per.get(str(b), {}).get("tok_s"), "{:.0f}") for b in bs) + " |")
        if summary["step_ratio_vs_off"]:
            lines += ["", "## Step time / off (ratio of medians; < 1 is faster)", "",
                      head, sep]
            for arm, per in summary["step_ratio_vs_off"].items():
                lines.append(f"| {arm} | " + " | ".join(
                    f"{per[str(b)]:.4f}" if str(b) in per else "-" for b in bs) + " |")
        n = max((v["ms_step"]["n"] for per in dec.values() for v in per.values()), default=0)
        how = (f"ms/step = (t({m.get('tokens')}) - t({m.get('short_tokens')})) / "
               f"{(m.get('tokens') or 0) - (m.get('short_tokens') or 0)} of two "
               f"`generate` calls with the same {m.get('prompt_len')}-token prompts; "
               f"{n} interleaved rounds per cell.")
        lines += ["", how]
    rep = summary.get("replay_us") or {}
    if rep:
        bs = sorted({int(b) for per in rep.values() for b in per})
        head = "| arm | " + " | ".join(f"batch {b}" for b in bs) + " |"
        sep = "|---|" + "---|" * len(bs)
        lines += ["", "## Decode step on the GPU: us per replay of the captured FULL "
                  "decode graph, median (p10-p90)", "", head, sep]
        for arm, per in rep.items():
            lines.append(f"| {arm} | " + " | ".join(
                _cell(per.get(str(b)), "{:.1f}") for b in bs) + " |")
        vs = summary.get("replay_vs_off") or {}
        if vs:
            lines += ["", "## GPU step - off (us per step; ratio of medians)", "", head, sep]
            for arm, per in vs.items():
                lines.append(f"| {arm} | " + " | ".join(
                    f"{per[str(b)]['us']:+.1f} ({per[str(b)]['ratio']:.4f})"
                    if str(b) in per else "-" for b in bs) + " |")
        n = max((v["n"] for per in rep.values() for v in per.values()), default=0)
        lines += ["", f"{m.get('replays')} back-to-back replays per sample between CUDA "
                  f"events (`l2sched_time_replays`), arms interleaved, {n} rounds per cell; "
                  "the host's share of a step is not in it."]
    eq = summary["equality"]
    if eq:
        lines += ["", "## Token ids", "", f"{eq.get('detail', '')}"]
    lines += ["", "## Arms", ""]
    for name, a in summary["arms"].items():
        sec = json.dumps(a.get("section")) if a.get("section") else "no l2sched section"
        lines.append(f"- `{name}`: {sec}; engine up in {a.get('ready_s', '?')} s; "
                     f"log `{a.get('log', '?')}`")
        for ln in a.get("l2sched_lines", []):
            lines.append(f"  - `{ln}`")
    return "\n".join(lines) + "\n"


def write_report(raw: dict, out: Path) -> dict:
    """``raw.json``, ``vllm-gpu.json`` and ``vllm-gpu.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.json").write_text(json.dumps(raw, indent=1))
    summary = summarize(raw)
    (out / "vllm-gpu.json").write_text(json.dumps(summary, indent=1))
    (out / "vllm-gpu.md").write_text(markdown(summary))
    return summary


# --------------------------------------------------------------------------
# the run


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="output directory (JSON, markdown, logs)")
    p.add_argument("--quick", action="store_true",
                   help="~2 min: arms off,shipped; batches 1,16; 2 rounds; no failure arms")
    p.add_argument("--arms", help=f"comma list of {', '.join(ARMS)} "
                   "(default off,shipped,load; quick: off,shipped; fit: the schedule "
                   "`l2sched fit` writes for the reduced model, skipped when it answers "
                   "no prefetch)")
    p.add_argument("--batches", help="comma list (default 1,4,16,64; quick 1,16)")
    p.add_argument("--reps", type=int, help="interleaved rounds (default 5, quick 2)")
    p.add_argument("--tokens", type=int, default=72, help="long generate (tokens)")
    p.add_argument("--short-tokens", type=int, default=8, help="short generate (tokens)")
    p.add_argument("--experts", type=int, help="routed experts per layer (default: fit)")
    p.add_argument("--replays", type=int, default=20,
                   help="graph replays per GPU-step sample (default 20)")
    p.add_argument("--replay-reps", type=int, default=9,
                   help="interleaved rounds of GPU-step samples (default 9; 0: none)")
    p.add_argument("--generate-timing", action=argparse.BooleanOptionalAction,
                   default=True, help="the generate-difference ms/step rounds (default on)")
    p.add_argument("--util", type=float,
                   help="GPU memory fraction per engine (default 0.88 / arms)")
    p.add_argument("--failures", action=argparse.BooleanOptionalAction, default=None,
                   help="run the bad-path and lint-error arms (default: on, quick off)")
    p.add_argument("--budget-s", type=float,
                   help="wall-clock budget: decode rounds and the failure arms are "
                   "skipped, and said so, when it runs out; engine starts are not "
                   "cut short (default 300, quick 130)")
    p.add_argument("--report", metavar="RAW_JSON",
                   help="only re-render the JSON and markdown of a raw result")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return a
    if not a.out:
        p.error("--out DIR is required")
    q = a.quick
    a.arms = (a.arms or ("off,shipped" if q else "off,shipped,load")).split(",")
    bad = [x for x in a.arms if x not in ARMS]
    if bad or "off" not in a.arms or len(set(a.arms)) != len(a.arms):
        p.error(f"--arms: need 'off' and distinct names from {', '.join(ARMS)}; got "
                f"{','.join(a.arms)}")
    try:
        a.batches = [int(b) for b in (a.batches or ("1,16" if q else "1,4,16,64")).split(",")]
    except ValueError:
        p.error(f"--batches: comma list of integers, got {a.batches!r}")
    if any(b < 1 or b > max(CAPTURE_SIZES) for b in a.batches):
        p.error(f"--batches: each in 1..{max(CAPTURE_SIZES)}")
    a.reps = a.reps or (2 if q else 5)
    if a.short_tokens < 1 or a.tokens <= a.short_tokens:
        p.error("--tokens must be > --short-tokens >= 1")
    a.failures = (not q) if a.failures is None else a.failures
    a.budget_s = a.budget_s or (130 if q else 300)
    a.util = a.util or round(0.88 / len(a.arms), 3)
    if not 0.05 <= a.util <= 0.95:
        p.error("--util must be in 0.05..0.95")
    return a


def preflight() -> dict:
    """GPU name and memory, versions; ``Fail`` with what is missing."""
    import importlib.util

    for mod in ("torch", "vllm", "l2sched", "vllm_gpu_shims"):
        if importlib.util.find_spec(mod) is None:
            raise Fail(f"{mod} is not importable (stage the payload: "
                       "benchmarks/vllm_gpu/stage.sh; then eval \"$(bash "
                       "benchmarks/vllm_gpu/stage.sh env)\")")
    import importlib.metadata as md

    import torch
    import triton

    if not torch.cuda.is_available():
        raise Fail("no CUDA device")
    props = torch.cuda.get_device_properties(0)
    eps = [e.name for e in md.entry_points(group="vllm.general_plugins")]
    for ep in ("l2sched", "vllm_gpu_shims"):
        if ep not in eps:
            raise Fail(f"entry point vllm.general_plugins:{ep} not installed "
                       f"(found {eps}); run benchmarks/vllm_gpu/stage.sh")
    return {"gpu": props.name, "gpu_bytes": props.total_memory,
            "cc": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "triton": triton.__version__, "vllm": md.version("vllm"),
            "python": sys.version.split()[0], "plugins": eps}


class Run:
    """One run of the script: arms, checks, measurements, report."""

    def __init__(self, args: argparse.Namespace):
        self.a = args
        self.out = Path(args.out).resolve()
        self.t0 = time.time()
        self.raw: dict = {"meta": {}, "arms": {}, "checks": [], "decode": {},
                          "equality": {}, "failed": [], "skipped": []}

    def left(self) -> float:
        return self.a.budget_s - (time.time() - self.t0)

    def step(self, name: str, fn, *args):
        """Run ``fn``; on ``Fail`` (or any exception) print and record one
        line and return None."""
        print(f"vllm_gpu: {name} ...", flush=True)
        try:
            return fn(*args)
        except Fail as e:
            msg = f"{name}: {e}"
        except Exception as e:
            msg = f"{name}: unexpected {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"vllm_gpu: FAILED {msg}", flush=True)
        self.raw["failed"].append(msg)
        return None

    def spec(self, model_dir: Path, util: float, cfg: dict) -> dict:
        return {"model": str(model_dir), "util": util, "vocab": cfg["vocab_size"],
                "max_model_len": 512, "max_num_seqs": max(CAPTURE_SIZES),
                "max_num_batched_tokens": 2048, "capture_sizes": list(CAPTURE_SIZES)}

    def start(self, names: list[str], spec: dict, arms: dict) -> dict:
        """Start the arms one after another into ``arms``; each must report
        ready: the first within ``START_FIRST_S`` (cold JIT caches: Triton,
        DeepGEMM's nvcc, Inductor), the others within ``START_NEXT_S``. The
        budget does not cut a start short."""
        for i, name in enumerate(names):
            arm = Arm(name, arm_section(name, self.out), spec, self.out)
            arms[name] = arm
            m = arm.wait("ready", START_FIRST_S if i == 0 else START_NEXT_S)
            arm.ready_s = m["seconds"]
            print(f"vllm_gpu: arm {name} up in {m['seconds']} s", flush=True)
        return arms

    def record_arm(self, arm: Arm, expect_off: str | None = None) -> None:
        self.raw["arms"][arm.name] = {
            "section": arm.section, "ready_s": arm.ready_s,
            "log": str(arm.log_path.relative_to(self.out)),
            "l2sched_lines": [ln.split("l2sched:", 1)[1].strip()[:600]
                              for ln in arm.lines if "l2sched:" in ln][:8]}
        self.raw["checks"] += log_checks(arm.name, arm.lines, arm.section, expect_off)

    def equality(self, arms: dict) -> None:
        """Token ids and logprobs of every arm against ``off``'s, per batch,
        with an A/A: ``off`` generates twice. Token ids must be identical
        in every arm. Logprobs must be identical where the A/A's are; where
        the engine does not reproduce its own logprobs (batched kernels
        whose reduction order depends on the batch), the largest
        |difference| of each arm is reported beside the A/A's, not judged."""
        ref, diffs, notes = {}, [], []
        for b in self.a.batches:
            for name, arm in arms.items():
                r = arm.gen(batch=b, max_tokens=16, logprobs=True)
                if name == "off":
                    again = arm.gen(batch=b, max_tokens=16, logprobs=True)
                    ref[b] = (r["tokens"], r["logprobs"],
                              _max_logprob_diff(r["logprobs"], again["logprobs"])
                              if r["tokens"] == again["tokens"] else None)
                    if r["tokens"] != again["tokens"]:
                        diffs.append(f"off A/A batch {b}: token ids differ")
                    continue
                tokens, logprobs, aa = ref[b]
                if r["tokens"] != tokens:
                    diffs.append(f"{name} batch {b}: token ids differ")
                    continue
                d = _max_logprob_diff(r["logprobs"], logprobs)
                if d > 0 and aa == 0:
                    diffs.append(f"{name} batch {b}: logprobs differ (max |diff| {d:.3g}; "
                                 "off A/A identical)")
                elif d > 0:
                    notes.append(f"batch {b}: {name} max |logprob diff| {d:.3g}, off A/A "
                                 f"{aa:.3g}")
        ok = not diffs
        detail = ("token ids identical in " + ", ".join(arms) +
                  f" at batch {', '.join(map(str, self.a.batches))} (16 greedy tokens); "
                  + ("logprobs identical" if not notes else
                     "logprobs identical where the off A/A's are; elsewhere "
                     + "; ".join(notes))
                  if ok else "; ".join(diffs))
        self.raw["equality"] = {"ok": ok, "detail": detail, "notes": notes}
        self.raw["checks"].append({"arm": "all", "check": "token ids identical",
                                   "ok": ok, "detail": detail})

    def measure(self, arms: dict) -> None:
        """Interleaved rounds; per (arm, batch) one warm-up, then per round a
        short and a long generate. Rounds after the first stop when the
        budget runs out."""
        a, names = self.a, list(arms)
        dec = self.raw["decode"] = {n: {str(b): [] for b in a.batches} for n in names}
        for b in a.batches:
            for n in names:
                arms[n].gen(batch=b, max_tokens=a.short_tokens)
        for rnd in range(a.reps):
            if rnd > 0 and self.left() < 15:  # the first round always runs
                self.raw["skipped"].append(f"decode rounds {rnd + 1}..{a.reps} "
                                           "(budget)")
                break
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for b in a.batches:
                for n in order:
                    s = arms[n].gen(batch=b, max_tokens=a.short_tokens)
                    lg = arms[n].gen(batch=b, max_tokens=a.tokens)
                    dec[n][str(b)].append({
                        "ms_step": step_ms(s["seconds"], lg["seconds"],
                                           a.short_tokens, a.tokens),
                        "t_short": s["seconds"], "t_long": lg["seconds"],
                        "digest": lg["digest"]})
            print(f"vllm_gpu: round {rnd + 1}/{a.reps} done, "
                  f"{time.time() - self.t0:.0f} s", flush=True)

    def measure_replays(self, arms: dict) -> None:
        """Interleaved rounds of each arm's captured FULL decode graph
        replayed ``--replays`` times between CUDA events (one warm-up sample
        per arm and batch first): the GPU's step, which separate engines
        share to well under the generate timing's A/A spread."""
        a, names = self.a, list(arms)
        rep = self.raw["replay"] = {n: {str(b): [] for b in a.batches} for n in names}
        for b in a.batches:
            for n in names:
                arms[n].replay(b, a.replays)
        for rnd in range(a.replay_reps):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for b in a.batches:
                for n in order:
                    rep[n][str(b)].append(arms[n].replay(b, a.replays))
        print(f"vllm_gpu: {a.replay_reps} replay rounds done, "
              f"{time.time() - self.t0:.0f} s", flush=True)

    def failure_arms(self, gpu_bytes: int) -> None:
        cfg = reduced_config(SMALL_EXPERTS, SMALL_LAYERS)
        d = write_model_dir(cfg, self.out / "model-small")
        spec = self.spec(d, 0.15, cfg)
        reasons = {"bad-path": "cannot read schedule",
                   "lint-error": "lint error with device profile"}
        # one at a time: two engines profiling memory at once see each
        # other's allocations ("No available memory for the cache blocks")
        for n in FAILURE_ARMS:
            arm = Arm(n, arm_section(n, self.out), spec, self.out)
            try:
                arm.ready_s = arm.wait("ready", START_NEXT_S)["seconds"]
                r = arm.gen(batch=2, max_tokens=8)
                self.raw["checks"].append({"arm": n, "check": "engine serves",
                                           "ok": r["n_out"] == 16,
                                           "detail": f"{r['n_out']} tokens"})
            finally:
                arm.stop()
                self.record_arm(arm, expect_off=reasons[n])

    def run(self) -> int:
        a, out = self.a, self.out
        out.mkdir(parents=True, exist_ok=True)
        self.raw["meta"].update(
            command="python3 " + " ".join(shlex.quote(x) for x in sys.argv),
            date=time.strftime("%Y-%m-%d %H:%M:%S"), arms=a.arms, batches=a.batches,
            reps=a.reps, tokens=a.tokens, short_tokens=a.short_tokens,
            replays=a.replays, replay_reps=a.replay_reps,
            prompt_len=PROMPT_LEN, capture_sizes=list(CAPTURE_SIZES), util=a.util,
            layers=len(LAYERS), layer_kinds=", ".join(LAYERS))
        pre = self.step("preflight", preflight)
        if pre is None:
            write_report(self.raw, out)
            return 2
        self.raw["meta"].update(pre)
        n_exp = a.experts or self.step("model size", experts_that_fit,
                                       pre["gpu_bytes"], a.util)
        if not n_exp:
            write_report(self.raw, out)
            return 2
        cfg = reduced_config(n_exp)
        self.raw["meta"].update(experts=n_exp, weight_gb=round(weight_bytes(cfg) / 1e9, 2))
        model_dir = write_model_dir(cfg, out / "model")
        print(f"vllm_gpu: model {len(LAYERS)} layers x {n_exp} experts, "
              f"{weight_bytes(cfg) / 1e9:.1f} GB of weights per engine", flush=True)
        names = list(a.arms)
        if "fit" in names:
            got = self.step("fit the reduced model", fit_reduced, model_dir, out)
            self.raw["fit"] = got
            if not got or not got["windows"]:
                names.remove("fit")
                self.raw["skipped"].append(
                    "arm fit: " + (f"`{got['command']}` answered no prefetch ({got['summary']})"
                                   if got else "l2sched fit failed"))
        arms: dict = {}
        try:
            started = self.step("start engines", self.start, names,
                                self.spec(model_dir, a.util, cfg), arms)
            if started:
                self.step("token equality", self.equality, arms)
                if a.replay_reps:
                    self.step("GPU step (graph replays)", self.measure_replays, arms)
                if a.generate_timing:
                    self.step("decode throughput", self.measure, arms)
        finally:
            for arm in arms.values():
                arm.stop()
                self.record_arm(arm)
        if a.failures and self.left() > 60:
            self.step("failure arms", self.failure_arms, pre["gpu_bytes"])
        elif a.failures:
            self.raw["skipped"].append("failure arms (budget)")
        summary = write_report(self.raw, out)
        ok = summary["all_checks_passed"]
        bad = [f"{c['arm']}: {c['check']}: {c['detail']}" for c in summary["checks"]
               if not c["ok"]]
        for b in bad:
            print(f"vllm_gpu: CHECK FAILED {b}", flush=True)
        print(f"vllm_gpu: {'all checks passed' if ok else 'checks failed'}; "
              f"{out / 'vllm-gpu.md'} ({time.time() - self.t0:.0f} s)", flush=True)
        return 0 if ok else 1


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    if a.child:
        return child_main(a.child)
    if a.report:
        try:
            raw = json.loads(Path(a.report).read_text())
        except (OSError, ValueError) as e:
            print(f"vllm_gpu: FAILED report: cannot read {a.report}: {e}")
            return 2
        summary = write_report(raw, Path(a.out))
        print(f"vllm_gpu: wrote {Path(a.out) / 'vllm-gpu.md'}")
        return 0 if summary["all_checks_passed"] else 1
    return Run(a).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
