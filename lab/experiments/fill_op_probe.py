"""Landed fraction of each fill kernel when the consumer is the decode
step's own op, not the profile's M=8 GEMM stand-in.

    python3 lab/experiments/fill_op_probe.py --out OUT.json [--md-out OUT.md]
        [--tokens 16] [--waits 0,40] [--reps 30]

Why: in the decode step the bulk kernel's fills buy as much as copy's (arm
minus decoy, benchmarks/results/h200-2026-12-01-decoy.md), while the
profile's fill probe, whose consumer is an M=8 GEMM over a random weight,
credits bulk 0.1-0.4 of a copy fill. Issue 14 asks for the landed fraction
"consumed by the real consumer op"; this probe does that for the step ops
with one matrix weight that the shipped schedule fills (``attn.o_proj`` of
each layer kind, the MLA layers' ``mla.fused_qkv_a_proj``, the MoE router
``moe.gate``).

Per op (a middle layer of its kind, the GLM-5.3-Flash tree at TP4, as
``l2sched profile`` builds it), per fill mode of the h200 profile, per wait,
``timing.after_fill`` with ``warm`` = the same op on another layer of the
kind (the ops probe's cold: weights cold; code, workspace and inputs hot):
landed = (cold - after fill) / (cold - hot), the warmed cases. GPU only.
Units: us, MB = 10^6 B.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbours

#: (layer kind, op) pairs the probe times: one-weight ops the shipped h200
#: schedule fills (windows A, A_MLA and B).
OPS = (("kda+moe", "attn.o_proj"), ("mla+moe", "attn.o_proj"),
       ("mla+moe", "mla.fused_qkv_a_proj"), ("kda+moe", "moe.gate"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", default="")
    ap.add_argument("--tokens", default="16")
    ap.add_argument("--waits", default="0,40")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    try:
        waits = tuple(int(w) for w in a.waits.split(","))
        tokens = [int(m) for m in a.tokens.split(",")]
    except ValueError:
        ap.error("--waits and --tokens take comma-separated integers")
    if min(waits) < 0 or min(tokens) < 1 or a.reps < 3:
        ap.error("--waits must be >= 0, --tokens >= 1, --reps >= 3")
    import torch

    from l2sched.profile.probes import ProbeContext
    from l2sched.profile.ops import other_layer
    from l2sched.bench.timing import after_fill
    from l2sched.device import load_device
    from l2sched.runtime import kernel as K
    from probe_output import write_probe
    if not torch.cuda.is_available():
        print("fill_op_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    base = load_device("h200")
    args = SimpleNamespace(quick=False, reps=a.reps, tokens=tokens, tp=4)
    ctx = ProbeContext(torch, args, base, {})
    runner, b = ctx.runner, ctx.bench
    layers: dict = {}
    for i, k in enumerate(runner.inv.kinds):
        layers.setdefault(str(k), []).append(i)
    kerns = {mode: K.get_kernel(0, **{"policy": "evict_last", **shape})
             for mode, shape in ctx.fill_shapes.items()}
    rows = []
    for M in tokens:
        runner.set_tokens(M)
        for kind, name in OPS:
            idx = layers[kind]
            i = idx[len(idx) // 2]
            op = next(o for o in runner.ops_of(i) if o.name == name)
            reads = runner.matrix_reads(i, op)
            if len(reads) != 1:
                continue
            weight = reads[0][1]
            other = other_layer(idx, i)
            for mode, kern in kerns.items():
                if kern is None:
                    continue
                res = after_fill(b, kern, lambda: runner.run_op(i, op), weight, waits,
                                 warm=lambda: runner.run_op(other, op))
                warmed = res["warmed"]
                rows.append({"m": M, "kind": kind, "op": name, "layer": i, "mode": mode,
                             "weight_bytes": weight.numel() * weight.element_size(),
                             "cold_us": warmed["cold_us"]["median"],
                             "waits": {str(w): {"landed": warmed["waits"][w]["recovered"],
                                                "cold_us": warmed["waits"][w]["cold_us"]["median"],
                                                "hot_us": warmed["waits"][w]["hot_us"]["median"],
                                                "after_us": warmed["waits"][w]["us"]["median"]}
                                       for w in waits}})
    out = {"gpu": torch.cuda.get_device_name(0), "reps": a.reps, "waits": waits,
           "fill_shapes": ctx.fill_shapes, "rows": rows}
    lines = [f"# Fill landing with the step's own op as consumer ({out['gpu']}, {a.reps} "
             "interleaved rounds)", "",
             "| M | kind | op | MB | mode | " + " | ".join(
                 f"wait {w} us: cold / hot / after us, landed" for w in waits) + " |",
             "|---|---|---|---|---|" + "---|" * len(waits)]
    for r in rows:
        cells = []
        for w in waits:
            c = r["waits"][str(w)]
            got = "-" if c["landed"] is None else f"{c['landed']:.2f}"
            cells.append(f"{c['cold_us']:.2f} / {c['hot_us']:.2f} / {c['after_us']:.2f}, {got}")
        lines.append(f"| {r['m']} | {r['kind']} | {r['op']} | {r['weight_bytes'] / 1e6:.1f} | "
                     f"{r['mode']} | " + " | ".join(cells) + " |")
    write_probe(out, lines, a.out, a.md_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
