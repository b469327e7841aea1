"""``l2sched verify`` on the lent H200: the 6-layer GLM-5.3-Flash-shaped
model of ``benchmarks/vllm_gpu.py`` (real per-layer dimensions, dummy
weights, as many routed experts as fit one engine), one engine, prefetch
switched on and off inside it.

    python3 benchmarks/verify_gpu.py --out DIR [--schedule S.l2s] [--set K=V]
        [--batch-size 1,4,16,64] [--num-iters 5]

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
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import vllm_gpu as VG  # noqa: E402

#: Share of the GPU's memory the one engine may use.
UTIL = 0.85


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--schedule", default=VG.SHIPPED)
    p.add_argument("--set", action="append", default=["tp=1"])
    p.add_argument("--batch-size", default="1,4,16,64")
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--output-len", type=int, default=64)
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu_bytes = torch.cuda.get_device_properties(0).total_memory
    cfg = VG.reduced_config(VG.experts_that_fit(gpu_bytes, UTIL))
    model = VG.write_model_dir(cfg, out / "model")
    spec = {"model": str(model), "util": UTIL, "max_model_len": 512,
            "max_num_seqs": max(VG.CAPTURE_SIZES), "max_num_batched_tokens": 2048,
            "capture_sizes": list(VG.CAPTURE_SIZES), "section": None}
    kw = VG.engine_kwargs(spec)
    for k in ("model", "load_format", "skip_tokenizer_init", "seed",
              "tensor_parallel_size"):
        kw.pop(k)
    cmd = [sys.executable, "-m", "l2sched", "verify", str(model),
           "--schedule", a.schedule if a.schedule == "auto" else str(ROOT / a.schedule),
           "--batch-size", a.batch_size, "--num-iters", str(a.num_iters),
           "--output-len", str(a.output_len), "--output-json", str(out / "verify.json")]
    if a.schedule != "auto":
        for s in a.set:
            cmd += ["--set", s]
    for k, v in kw.items():
        cmd += ["--engine-arg", f"{k}={json.dumps(v)}"]
    print("verify_gpu:", " ".join(cmd), flush=True)
    with open(out / "verify.log", "w") as log:
        r = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                           env={**__import__("os").environ, "L2SCHED_PROGRESS": "1"})
    print(f"verify_gpu: l2sched verify exited {r.returncode}; {out / 'verify.md'}")
    md = out / "verify.md"
    if md.exists():
        print(md.read_text())
    return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
