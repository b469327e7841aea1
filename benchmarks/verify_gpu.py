"""``l2sched verify`` on the lent H200: the 6-layer GLM-5.3-Flash-shaped
model of ``benchmarks/vllm_gpu.py`` (real per-layer dimensions, dummy
weights, as many routed experts as fit one engine), one engine, prefetch
switched on and off inside it.

    python3 benchmarks/verify_gpu.py --out DIR [--model glm|qwen3-30b-a3b]
        [--schedule S.l2s|auto] [--set K=V] [--batch-size 1,4,16,64]
        [--num-iters 5] [--timing replay|generate] [--replays 10] [--device P.toml]

``--device``: the device profile the plugin uses (passed to ``l2sched
verify``; a relative .toml path is read from the repository root, as
``--schedule``); default the shipped profile that describes the GPU. On another
card than the H200 (an H100), a profile ``l2sched profile`` measured there:
without one the plugin turns prefetch off with one line
(benchmarks/results/h100-2026-12-07-ds4-engine-start/).

``--model deepseek-v4-flash``: DeepSeek-V4-Flash's public config
(``l2sched/data/deepseek-v4-flash-config.json``) in BF16 (no
``quantization_config``: the FP8 block linears and MXFP4 experts of the
checkpoint need kernels not checked on the lent GPU), cut to the most
layers whose weights fit the engine (``lab.engine_tp.shapes.layers_that_fit``),
compilation mode 0 as for Qwen3, default schedule
``schedules/deepseek-v4-h200-tp1.l2s``; needs the DeepSeek-V4 payload
(``pack.sh`` with ``PAYLOAD_EXTRA=benchmarks/vllm_gpu/payload-deepseek-v4.txt``,
docs/vllm.md "DeepSeek-V4 on the lent GPU").

``--model qwen3-30b-a3b``: Qwen3-30B-A3B's full public config
(``l2sched/data/qwen3-30b-a3b-config.json``, 48 layers, dummy weights) with
vLLM's compilation mode 0 (the plugin refuses a torch.compiled Qwen3: FULL
decode graphs, eager mixed batches), default schedule
``schedules/qwen3-30b-a3b-h200-tp1.l2s``.

Needs the payload of ``benchmarks/vllm_gpu/stage.sh`` (``eval "$(bash
benchmarks/vllm_gpu/stage.sh env)"``). Writes ``DIR/model/config.json``,
``DIR/verify.json`` + ``DIR/verify.md`` (``l2sched verify``'s report) and
``DIR/verify.log`` (the engine's log). The engine arguments are
``vllm_gpu.engine_kwargs``'s (the sparse-MLA backend, the Triton KDA
prefill, no TileLang warm-up, the capture sizes), passed as
``--engine-arg``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import vllm_gpu as VG  # noqa: E402

#: Share of the GPU's memory the one engine may use.
UTIL = 0.85
#: The hand-written Qwen3-30B-A3B schedule (issue 33).
QWEN3_SCHEDULE = "schedules/qwen3-30b-a3b-h200-tp1.l2s"
#: The hand-written DeepSeek-V4-Flash schedule (issue 46).
DS4_SCHEDULE = "schedules/deepseek-v4-h200-tp1.l2s"


def deepseek_v4_config(gpu_bytes: int) -> dict:
    """DeepSeek-V4-Flash's public config in BF16, cut to its first layers
    whose TP1 weights (l2sched's analytical inventory) fit ``UTIL`` of
    ``gpu_bytes`` (bytes) less ``vllm_gpu.ENGINE_RESERVE``: ``num_hidden_layers``,
    ``compress_ratios`` and ``num_hash_layers`` cut alike."""
    from lab.engine_tp.shapes import layers_that_fit

    full = json.loads((ROOT / "l2sched/data/deepseek-v4-flash-config.json").read_text())
    for key in ("quantization_config", "expert_dtype"):
        full.pop(key, None)
    n = layers_that_fit(full, 1, int(UTIL * gpu_bytes) - VG.ENGINE_RESERVE)
    return {**full, "num_hidden_layers": n, "compress_ratios": full["compress_ratios"][:n],
            "num_hash_layers": min(int(full["num_hash_layers"]), n)}


#: Seconds ``l2sched verify`` may take to exit after its last line (the
#: report written, or "nothing to measure"). The DeepSeek-V4 engine's process
#: stayed alive after vLLM's "[shutdown] MPClient: complete" until a 190 s
#: timeout (benchmarks/results/h100-2026-12-07-ds4-engine-start/verify-auto.log).
EXIT_GRACE_S = 45
#: ``l2sched verify``'s last lines (l2sched/cli/verify.py).
FINAL_LINES = ("l2sched verify: wrote ", "nothing to measure",
               "l2sched verify: vLLM's engine did not start")


def _wait_for_exit(proc: subprocess.Popen, log: Path) -> int:
    """Wait for ``proc`` (``l2sched verify``); once its log has one of
    ``FINAL_LINES``, give it ``EXIT_GRACE_S`` seconds, then send SIGUSR1 (verify
    dumps every thread's stack into the log: what keeps it alive) and kill it.
    Returns its exit status, or, when killed, 0 if the report says the token
    ids were equal (1 otherwise)."""
    done_at = None
    while proc.poll() is None:
        time.sleep(2)
        if done_at is None and any(f in log.read_text(errors="replace") for f in FINAL_LINES):
            done_at = time.monotonic()
        if done_at is not None and time.monotonic() - done_at > EXIT_GRACE_S:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(3)
            proc.kill()
            proc.wait()
            report = log.parent / "verify.json"
            summaries = json.loads(report.read_text()).get("batches", []) \
                if report.exists() else []
            print(f"verify_gpu: l2sched verify did not exit {EXIT_GRACE_S} s after its "
                  "last line; killed (its threads' stacks are at the end of "
                  f"{log})", flush=True)
            return 0 if summaries and all(s.get("tokens_equal") for s in summaries) else 1
    return proc.returncode


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=("glm", "qwen3-30b-a3b", "deepseek-v4-flash"),
                   default="glm")
    p.add_argument("--schedule", default=None)
    p.add_argument("--set", action="append", default=["tp=1"])
    p.add_argument("--timing", choices=("replay", "generate"), default="replay")
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--batch-size", default="1,4,16,64")
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--capture-launch", default=None,
                   help="passed to l2sched verify (docs/runtime.md)")
    p.add_argument("--device", default=None, metavar="PROFILE",
                   help="device profile name or .toml, passed to l2sched verify (default: "
                        "the shipped profile that describes this GPU)")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    if a.model == "glm":
        gpu_bytes = torch.cuda.get_device_properties(0).total_memory
        cfg = VG.reduced_config(VG.experts_that_fit(gpu_bytes, UTIL))
        schedule = a.schedule or VG.SHIPPED
    elif a.model == "deepseek-v4-flash":
        cfg = deepseek_v4_config(torch.cuda.get_device_properties(0).total_memory)
        schedule = a.schedule or DS4_SCHEDULE
        if not a.schedule:  # window B fetches the next layer's bytes: not after the last
            a.set.append(f"window.B.layers=all except {cfg['num_hidden_layers'] - 1}")
        print(f"verify_gpu: DeepSeek-V4-Flash, {cfg['num_hidden_layers']} layers in BF16",
              flush=True)
    else:
        cfg = json.loads((ROOT / "l2sched/data/qwen3-30b-a3b-config.json").read_text())
        schedule = a.schedule or QWEN3_SCHEDULE
    model = VG.write_model_dir(cfg, out / "model")
    spec = {"model": str(model), "util": UTIL, "max_model_len": 512,
            "max_num_seqs": max(VG.CAPTURE_SIZES), "max_num_batched_tokens": 2048,
            "capture_sizes": list(VG.CAPTURE_SIZES), "section": None}
    kw = VG.engine_kwargs(spec)
    for k in ("model", "load_format", "skip_tokenizer_init", "seed",
              "tensor_parallel_size", "worker_extension_cls"):
        kw.pop(k)
    if a.model != "glm":  # GLM-5.3's backends and KDA option do not apply
        for k in ("attention_config", "kda_prefill_backend"):
            kw.pop(k)
        kw["compilation_config"] = {**kw["compilation_config"], "mode": 0}
    cmd = [sys.executable, "-m", "l2sched", "verify", str(model),
           "--schedule", schedule if schedule == "auto" else str(ROOT / schedule),
           "--batch-size", a.batch_size, "--num-iters", str(a.num_iters),
           "--output-len", str(a.output_len), "--output-json", str(out / "verify.json"),
           "--timing", a.timing, "--replays", str(a.replays)]
    if a.capture_launch:
        cmd += ["--capture-launch", a.capture_launch]
    if a.device:
        cmd += ["--device", str((ROOT / a.device).resolve()) if a.device.endswith(".toml")
                else a.device]  # relative to the repository root, as --schedule
    if schedule != "auto":
        for s in a.set:
            cmd += ["--set", s]
    for k, v in kw.items():
        cmd += ["--engine-arg", f"{k}={json.dumps(v)}"]
    print("verify_gpu:", " ".join(cmd), flush=True)
    with open(out / "verify.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "L2SCHED_PROGRESS": "1"})
        rc = _wait_for_exit(proc, out / "verify.log")
    print(f"verify_gpu: l2sched verify exited {rc}; {out / 'verify.md'}")
    md = out / "verify.md"
    if md.exists():
        print(md.read_text())
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
