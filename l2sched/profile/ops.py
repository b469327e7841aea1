"""The profile's ``ops`` probe: the per-op cold/hot table the lint reads
instead of global GEMM rates (``probe_ops``), and its section of the probe
report (``ops_markdown``).

Every weight-reading op of the decode step, ``OP_LAYERS`` layers per layer
kind (the GLM-5.3-Flash inventory at ``--tp``), at each M: cold after the
read flush and the same op on another layer (weights cold; code, workspace
and activations hot, as in the decode step), hot with all its weight bytes
in L2. Units: us, bytes.
torch comes in through the probe context.
"""

from __future__ import annotations

import statistics

from l2sched.bench.timing import stats

MB = 10**6

#: Layers per layer kind whose ops the ops probe times (the kind's first,
#: middle and last): the first layer alone did not stand for its kind, as ops
#: of the same shapes had cold->hot gaps up to 2 us apart between kinds, the
#: same in two runs (benchmarks/results/h200-profile-2026-12-01-state.json.gz
#: and -s7-state.json.gz, e.g. mhc.attn_pre at M=16).
OP_LAYERS = 3
#: Share of the effective L2 read into it, as a prefix of an op's weights,
#: before timing an op whose weights do not fit (``probe_ops``): below the
#: effective L2 (re-read hit 1.00 up to 40 MB, 0.42 at 48 MB on the H200:
#: benchmarks/results/h200-profile-2026-12-01.md) so the prefix stays while
#: the op streams the rest.
HOT_PREFIX_SHARE = 0.75

def probe_ops(ctx) -> dict:
    """Per layer kind and M, the time (us) of every weight-reading op of the
    decode step: ``cold`` after the read flush and the same op on another
    layer of the kind (weights cold; code, workspace and activations hot: an
    op of the decode step before its weights are prefetched, which ran on the
    layer before and whose inputs the op before just wrote),
    ``hot`` with all its weight bytes in L2, and ``cold_all`` after the flush
    alone (the activations cold too; what the table measured before, kept for
    the report). Hot is the op right after itself when its weights fit in
    the effective L2 (``l2`` probe); an op whose weights do not fit cannot be
    hot that way (a re-read of 52.6 MB mostly misses), so it is timed after a
    prefix of ``HOT_PREFIX_SHARE`` x the effective L2 of its weights was read
    into L2, and hot is that time's gap to cold scaled to all its bytes
    (linear in the hit share, as the lint's op model is: ``extrapolated``
    says so, ``hot_reread_us`` keeps the re-read). Each time is the median
    over ``OP_LAYERS`` layers of the kind of the per-layer medians
    (``per_layer`` keeps those)."""
    b, runner = ctx.bench, ctx.runner
    torch = ctx.torch
    fit = ctx.results.get("l2", {}).get("effective_bytes") or ctx.capacity_bytes
    layers: dict = {}
    for i, k in enumerate(runner.inv.kinds):
        layers.setdefault(str(k), []).append(i)
    table: dict = {}
    for M in ctx.tokens:
        runner.set_tokens(M)
        for kind, idx in layers.items():
            picked = sorted({idx[0], idx[len(idx) // 2], idx[-1]})[:OP_LAYERS]
            for op in runner.ops_of(idx[0]):
                if op.cls not in ("gemm", "shared_expert", "small") or not op.reads:
                    continue
                if not runner.matrix_reads(idx[0], op):
                    continue
                per = [_time_op(b, torch, runner, i, op, fit, other_layer(idx, i))
                       for i in picked]
                rec = table.setdefault(kind, {}).setdefault(
                    op.name, {"m": [], "layers": picked, "cold_us": [], "hot_us": [],
                              "cold_all_us": [], "hot_reread_us": [], "per_layer": [],
                              "extrapolated": per[0]["prefix_bytes"] is not None})
                rec["m"].append(M)
                for key in ("cold", "hot", "cold_all", "hot_reread"):
                    rec[f"{key}_us"].append(statistics.median(p[f"{key}_us"] for p in per))
                rec["per_layer"].append(per)
        ctx.progress.step(f"ops M={M}")
    return {"tokens": list(ctx.tokens), "layers_per_kind": OP_LAYERS,
            "effective_bytes": fit, "table": table}


def _time_op(b, torch, runner, i: int, op, fit_bytes: float, warm_on: int | None = None
             ) -> dict:
    """Timing stats (us) of op ``op`` of layer ``i`` (``probe_ops``):
    ``cold``, ``cold_all``, ``hot_reread`` (right after itself), ``prefix``
    (after a prefix of its weights was read into L2; None when they fit) and
    their medians ``*_us``, ``hot_us`` (the re-read, or the prefix's gap to
    cold scaled to all weight bytes), ``prefix_bytes`` (None when they fit).
    ``cold`` follows the flush with the same op on layer ``warm_on`` (another
    layer of the kind: the op's code, workspace and inputs come back into L2,
    not its weights), or, without one, with its inputs read back."""
    reads = runner.matrix_reads(i, op)
    inputs = [x for _, _, x in reads]
    weights = [w for _, w, _ in reads]
    total = sum(w.numel() * w.element_size() for w in weights)

    def flush_keep_inputs(prefix: int = 0):
        b.flush()
        if warm_on is not None:
            runner.run_op(warm_on, op)
        else:
            for x in inputs:  # as bytes: any dtype sums
                x.reshape(-1).view(torch.uint8).sum()
        for w in weights:  # the first ``prefix`` bytes of the weights, in order
            n = min(prefix, w.numel() * w.element_size())
            if n > 0:
                w.reshape(-1).view(torch.uint8)[:n].sum()
            prefix -= n

    body = (lambda: runner.run_op(i, op))
    body()
    got = {"cold": b.timed(flush_keep_inputs, body)[1],
           "cold_all": b.timed(b.flush, body)[1],
           "hot_reread": b.timed(body, body)[1], "prefix": None}
    prefix = None
    if total > fit_bytes:
        prefix = int(HOT_PREFIX_SHARE * fit_bytes)
        got["prefix"] = b.timed(lambda: flush_keep_inputs(prefix), body)[1]
    out = {k: (stats(v) if v is not None else None) for k, v in got.items()}
    for k, v in list(out.items()):
        out[f"{k}_us"] = v["median"] if v is not None else None
    out["prefix_bytes"] = prefix
    out["warm_on"] = warm_on
    out["hot_us"] = out["hot_reread_us"]
    if prefix is not None:
        gap = max(0.0, out["cold_us"] - out["prefix_us"])
        out["hot_us"] = out["cold_us"] - gap * total / prefix
    return out


def other_layer(idx: list[int], i: int) -> int | None:
    """Another layer of the kind whose layers are ``idx`` than ``i`` (the
    next one, cyclically), or None for a kind of one layer."""
    rest = [j for j in idx if j != i]
    return next((j for j in rest if j > i), rest[0]) if rest else None


def ops_markdown(ops: dict) -> list[str]:
    """The report's op table: cold / hot us per M, and, from runs that
    measured it, the cold time with the activations cold too (in brackets)."""
    both = all("cold_all_us" in rec for per in ops["table"].values() for rec in per.values())
    head = ("## Ops: cold / hot us per M" + (" (cold with the activations cold too)"
                                             if both else ""))
    md = [head, ""]
    if both:
        md += [f"Cold: after the read flush, the op's inputs (or, where the state says "
               f"`warm_on`, the same op on another layer of the kind) back in L2: weights "
               f"cold, the rest hot; median over {ops.get('layers_per_kind', 1)} layers "
               "per kind.", ""]
    md += ["| kind | op | " + " | ".join(f"M={m}" for m in ops["tokens"]) + " |",
           "|---|---|" + "---|" * len(ops["tokens"])]
    extrapolated = False
    for kind, per in ops["table"].items():
        for name, rec in per.items():
            cells = [f"{c:.1f} / {h:.1f}" for c, h in zip(rec["cold_us"], rec["hot_us"])]
            if both:
                cells = [f"{x} ({a:.1f})" for x, a in zip(cells, rec["cold_all_us"])]
            if rec.get("extrapolated"):
                extrapolated = True
                name += " *"
            md.append(f"| {kind} | {name} | " + " | ".join(cells) + " |")
    if extrapolated:
        md += ["", "\\* weights larger than the effective L2 "
               f"({ops.get('effective_bytes', 0) / MB:.0f} MB): hot is the time after a "
               "prefix of the weights was read into L2, its gap to cold scaled to all the "
               "bytes; re-read right after itself: " + "; ".join(
                   f"{kind} {name} " + " / ".join(f"{h:.1f}" for h in rec["hot_reread_us"])
                   for kind, per in ops["table"].items() for name, rec in per.items()
                   if rec.get("extrapolated")) + " us."]
    return md + [""]


