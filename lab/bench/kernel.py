"""``python -m lab bench kernel``: the fill kernels on one GPU, judged by effect.

For each fill-kernel variant (a mode and launch shape) it measures, with
CUDA events, medians and p10/p90 over ``--reps`` repetitions, each behind an
L2 flush (a 1 GiB *read*; a write flush leaves dirty lines whose write-back
the next fill would pay for):

- ``fill``: for each size, the fill kernel's launch-to-exit time, and the
  time until its bytes are hot, found by effect: fill, sleep D us, then a
  bandwidth-bound dependent read of the buffer; the fill has landed at the
  smallest D whose read is within 10% of the cold->hot gap of a hot read
  (sizes that do not fit the L2 hot have no such point). The ``copy`` and
  ``load`` kernels exit only when their bytes have arrived, so for them
  launch-to-exit is the fill time; ``bulk`` exits when its requests are
  issued. Landed bandwidth = bytes / max(launch-to-exit, D) (TB/s =
  10^12 B/s). Also the same kernel inside a CUDA graph (between event
  nodes), and its own GPU time as CUPTI reports it (``torch.profiler``; no
  event or launch inside), each beside the same kernel over 0 bytes.
- ``gemm``: the real consumers: an M=8 bf16 GEMM over each weight shape of
  the GLM-5.3-Flash TP4 inventory (``--shapes``), cold, hot, and right after
  a fill on the same stream (plus a sleep of 0 or 30 us), interleaved over
  ``--consumer-rounds`` rounds; the share of the cold->hot gap the fill
  recovers, from the means (``timing.recovered_share``); outputs checked
  bitwise against cold.
- ``interference`` (``bench.interference``): a latency-bound chain (200
  tiny kernels, replayed from a CUDA graph so the host does not set the
  pace) and a memory-bound chain (a 256 MiB read), alone and with a
  concurrent 50 MB fill of each variant forked onto a side stream right
  before, and a chain of GEMMs whose weight stays in L2 with a 24 MB fill:
  the extra time of the chain (us).

Writes JSON (every number) and markdown (tables) and prints a table; the
JSON records the machine and the command. Needs torch with CUDA and
``nvidia-cutlass-dsl``; Triton for the bandwidth-bound read (else
``torch.sum``, recorded).
"""

from __future__ import annotations

import json
import sys
import time

from l2sched.profile.interference import bench_interference, gemm_chain_record
from l2sched.bench.timing import (TimingBench, after_fill, dependent_read, gemm_consumer,
                                 row_table, stats)
from l2sched.files import write_texts_atomically
from l2sched.runtime import kernel as K

MB = 10**6

#: Variants measured by default: (label, KernelSpec shape). Bulk in the
#: shape of the earlier probe; copy from 32 and 66 CTAs (4 stages of
#: 32 KiB); load from 528 and 1056 CTAs x 128 threads (kernel_probe_l2.py).
DEFAULT_VARIANTS = (
    ("bulk", {"mode": "bulk"}),
    ("copy-32", {"mode": "copy", "grid": 32, "chunk": 32768, "stages": 4}),
    ("copy-66", {"mode": "copy", "grid": 66, "chunk": 32768, "stages": 4}),
    ("load-528", {"mode": "load", "grid": 528, "threads": 128, "chunk": 128}),
    ("load-1056", {"mode": "load", "grid": 1056, "threads": 128, "chunk": 128}),
)
#: Consumer weights (N, K), bf16: the GLM-5.3-Flash TP4 KDA o_proj (16.8 MB)
#: and MLA o_proj (33.6 MB) (``l2sched inventory --tp 4``), and the 29.4 MB
#: and 50.3 MB weights of issue 13's criteria. (The 52.6 MB KDA in_proj does
#: not fit the H200's L2 hot: its hot and cold times are the same.)
DEFAULT_SHAPES = ((4096, 2048), (3584, 4096), (4096, 4096), (6144, 4096))


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: comma-separated fill sizes in MB (10^6 B) -> ``[MB]``.
    Raises ``ValueError`` (the option's message) for non-integers, an empty
    list or a size below 1."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--sizes must be MB integers separated by commas, "
                         f"got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--sizes must be positive MB values, got {text}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"--sizes names a size twice: {text}")
    return sizes


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """``--shapes``: comma-separated ``NxK`` consumer weights -> ``((N, K),
    ...)`` (empty for an empty text: the default shapes; a trailing comma is
    allowed). Raises ``ValueError`` naming the bad item."""
    out = []
    for s in filter(None, (s.strip() for s in text.split(","))):
        nk = s.split("x")
        if len(nk) != 2 or not all(x.isdigit() and int(x) > 0 for x in nk):
            raise ValueError(f"--shapes: {s!r} is not NxK with positive integers "
                             "(e.g. 4096x2048)")
        out.append((int(nk[0]), int(nk[1])))
    return tuple(out)


def parse_variants(text: str) -> list[tuple[str, dict]]:
    """``LABEL=MODE[:key=value,...];...`` -> ``[(label, shape)]``, e.g.
    ``copy-66=copy:grid=66,stages=4``. Raises ``ValueError``."""
    out = []
    keys = ("grid", "threads", "chunk", "stages")
    for part in filter(None, (p.strip() for p in text.split(";"))):
        label, eq, spec = part.partition("=")
        label = label.strip()
        if not eq or not label or any(c.isspace() for c in label):
            raise ValueError(f"--variants {part!r}: expected LABEL=MODE[:key=value,...] "
                             "with a label without spaces (e.g. copy-66=copy:grid=66)")
        mode, _, kv = spec.partition(":")
        shape: dict = {"mode": mode.strip()}
        for item in filter(None, (i.strip() for i in kv.split(","))):
            k, _, v = item.partition("=")
            if k.strip() not in keys:
                raise ValueError(f"--variants {label}: unknown key {k.strip()!r} "
                                 f"(keys: {', '.join(keys)})")
            if k.strip() in shape:
                raise ValueError(f"--variants {label}: {k.strip()} given twice")
            try:
                shape[k.strip()] = int(v)
            except ValueError:
                raise ValueError(f"--variants {label}: {k.strip()} must be an integer, "
                                 f"got {v.strip()!r}") from None
        if label in (x for x, _ in out):
            raise ValueError(f"--variants {label}: given twice")
        try:
            K.KernelSpec(**shape).check()
        except ValueError as e:
            raise ValueError(f"--variants {label}: {e}") from None
        out.append((label, shape))
    if not out:
        raise ValueError("--variants names no variant")
    return out


def bench_fill(b: TimingBench, kern, size: int, delays) -> dict:
    """Fill time and landed bandwidth of ``kern`` for ``size`` bytes."""
    torch = b.torch
    w = torch.ones(size // 4, dtype=torch.int32, device="cuda")
    tab = row_table(torch, w)
    read, read_kind = dependent_read(torch, w)
    read()
    h = torch.cuda.current_stream().cuda_stream
    _, cold = b.timed(b.flush, read)
    _, hot = b.timed(read, read)
    _, exit_t = b.timed(b.flush, lambda: kern.launch(tab.data_ptr(), 0, 1, h))
    # the same with the fill's table row read into L2 first: how much of
    # the fixed cost is the kernel's first (dependent) read of its table
    _, exit_hot_table = b.timed(lambda: (b.flush(), tab.sum()),
                                lambda: kern.launch(tab.data_ptr(), 0, 1, h))
    # inside a CUDA graph, as a FULL-graph decode step runs it; and the
    # same kernel over a 0-byte row: its fixed cost
    empty = torch.tensor([[w.data_ptr(), 0]], dtype=torch.int64, device="cuda")
    in_graph = b.graph_timed(b.flush, lambda s: kern.launch(tab.data_ptr(), 0, 1, s))
    empty_graph = b.graph_timed(b.flush, lambda s: kern.launch(empty.data_ptr(), 0, 1, s))
    c, hh = stats(cold)["median"], stats(hot)["median"]
    res = {"bytes": size, "read": read_kind, "cold_read_us": stats(cold),
           **kernel_durations(b, kern, tab, empty, read, size),
           "hot_read_us": stats(hot), "launch_to_exit_us": stats(exit_t),
           "launch_to_exit_table_hot_us": stats(exit_hot_table),
           "in_graph_us": stats(in_graph), "empty_in_graph_us": stats(empty_graph),
           "in_graph_TBps": size / (stats(in_graph)["median"] * 1e-6) / 1e12,
           "exit_TBps": size / (stats(exit_t)["median"] * 1e-6) / 1e12,
           "delays": [], "landed": None}
    for d in delays:
        pre, rd = b.timed(lambda: (b.flush(), kern.launch(tab.data_ptr(), 0, 1, h),
                                   b.sleep(d)), read)
        # setup time includes the flush: subtract the flush's own time
        res["delays"].append({"sleep_us": d, "read_us": stats(rd)})
        if res["landed"] is None and stats(rd)["median"] <= hh + 0.1 * (c - hh):
            res["landed"] = {"sleep_us": d}
    # the fill's own time to landed: launch-to-exit, or the sleep if longer
    if res["landed"] is not None:
        t = max(stats(exit_t)["median"], float(res["landed"]["sleep_us"]))
        res["landed"]["fill_us"] = t
        res["landed"]["TBps"] = size / (t * 1e-6) / 1e12
    del w
    return res


def kernel_durations(b: TimingBench, kern, tab, empty, read, size: int) -> dict:
    """The fill kernel's own GPU time behind the flush as CUPTI reports it
    (``TimingBench.kernel_times``), over ``tab`` and over the 0-byte row
    ``empty``, and the cold bandwidth-bound read's, all in us, with their
    rates (TB/s); ``{"kernel_error": why}`` where the profiler cannot tell
    them apart."""
    h = b.torch.cuda.current_stream().cuda_stream
    try:
        fill = stats(b.kernel_times(b.flush, lambda: kern.launch(tab.data_ptr(), 0, 1, h)))
        zero = stats(b.kernel_times(b.flush, lambda: kern.launch(empty.data_ptr(), 0, 1, h)))
        cold = stats(b.kernel_times(b.flush, read))
    except RuntimeError as e:
        return {"kernel_error": str(e)}
    return {"kernel_us": fill, "kernel_TBps": size / (fill["median"] * 1e-6) / 1e12,
            "empty_kernel_us": zero, "cold_read_kernel_us": cold,
            "cold_read_kernel_TBps": size / (cold["median"] * 1e-6) / 1e12}


def bench_gemm(b: TimingBench, kern, n: int, k: int, sleeps=(0, 30),
               rounds: int | None = None) -> dict:
    """An M=8 GEMM over an (n, k) bf16 weight: cold, hot and after a fill
    (then a wait of each ``sleeps`` us), interleaved over ``rounds``
    (``after_fill``); ``warmed``: the same with the GEMM's code, input and
    workspace warmed after the flush by its twin over another weight and
    references with the same kernel sequence (``after_fill``)."""
    torch = b.torch
    mm, w, y, twin = gemm_consumer(torch, n, k)
    torch.cuda.synchronize()
    ref = y.clone()
    res = after_fill(b, kern, mm, w, sleeps, rounds, warm=twin)
    row = {"weight_bytes": n * k * 2, "shape": [8, k, n], "cold_us": res["cold_us"],
           "hot_us": res["hot_us"], "interleaved": True,
           "after_fill": {f"sleep{s}us": res["waits"][s] for s in sleeps},
           "warmed": {"cold_us": res["warmed"]["cold_us"],
                      "after_fill": {f"sleep{s}us": res["warmed"]["waits"][s]
                                     for s in sleeps},
                      "empty_fill_cost_us": {f"sleep{s}us": res["warmed"]["empty_fill_cost_us"][s]
                                             for s in sleeps}}}
    mm()
    torch.cuda.synchronize()
    row["bitwise_equal_to_cold"] = bool(torch.equal(y, ref))
    return row


def run_kernel_bench(args) -> dict:
    """``python -m lab bench kernel``: every section for every variant; writes
    ``args.out`` (JSON) and ``args.md_out`` (markdown). Returns the result."""
    import torch
    variants = parse_variants(args.variants) if args.variants else list(DEFAULT_VARIANTS)
    sizes = [mb * MB for mb in parse_sizes(args.sizes)]
    shapes = parse_shapes(args.shapes) or DEFAULT_SHAPES
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sm": f"{props.major}.{props.minor}",
           "sms": props.multi_processor_count,
           "l2_bytes": getattr(props, "L2_cache_size", None),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cutlass_dsl": K.cutlass_version(), "reps": args.reps,
           "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
           "variants": {}}
    b = TimingBench(torch, args.reps)
    delays = [0, 5, 10, 15, 20, 30, 40]
    for label, shape in variants:
        kern = K.get_kernel(0, policy=args.policy, **shape)
        rec = {"shape": shape}
        out["variants"][label] = rec
        if kern is None:
            rec["error"] = K.disabled_reason() or "compile failed (see the log)"
            continue
        rec["ffi"], rec["compile_s"] = kern.ffi, kern.compile_s
        print(f"[{label}] fill ...", file=sys.stderr, flush=True)
        rec["fill"] = [bench_fill(b, kern, s, delays) for s in sizes]
        print(f"[{label}] gemm ...", file=sys.stderr, flush=True)
        rec["gemm"] = [bench_gemm(b, kern, n, k, rounds=args.consumer_rounds)
                       for n, k in shapes]
        print(f"[{label}] interference ...", file=sys.stderr, flush=True)
        rec["interference"] = bench_interference(b, kern)
        _write(args, out)
    _write(args, out)
    print(table(out))
    return out


def _write(args, out: dict) -> None:
    files = [(args.out, json.dumps(out, indent=1) + "\n")]
    if args.md_out:
        files.append((args.md_out, markdown(out)))
    write_texts_atomically(files)


def _f(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def _share(after: dict) -> str:
    """``0.93 [0.88-0.97]``: a recovered share and its bootstrap interval."""
    lo_hi = after.get("recovered_p5_p95")
    if after.get("recovered") is None or not lo_hi:
        return "-"
    return f"{after['recovered']:.2f} [{lo_hi[0]:.2f}-{lo_hi[1]:.2f}]"


def _kernel_cells(f: dict) -> str:
    """The CUPTI columns of a fill row (``kernel_durations``)."""
    if "kernel_us" not in f:
        return " | ".join(["-"] * 3)
    k, z, r = f["kernel_us"], f["empty_kernel_us"], f["cold_read_kernel_us"]
    return (f"{k['median']:.1f} [{k['p10']:.1f}-{k['p90']:.1f}] ({f['kernel_TBps']:.2f}) | "
            f"{z['median']:.1f} | {r['median']:.1f} ({f['cold_read_kernel_TBps']:.2f})")


def table(out: dict) -> str:
    """A short text table: per variant, landed TB/s at the largest size,
    GEMM recovered share per shape (sleep 0; cold / warmed), chain extras
    (us)."""
    lines = [f"{out['device']} ({out['cutlass_dsl']}), medians of {out['reps']}"]
    for label, rec in out["variants"].items():
        if "error" in rec:
            lines.append(f"{label:10} error: {rec['error']}")
            continue
        fits = [f for f in rec["fill"] if f["bytes"] <= (out["l2_bytes"] or 0) * 0.8]
        big = fits[-1] if fits else rec["fill"][-1]
        landed = big["landed"] or {}
        def warmed0(g):
            after = (g.get("warmed") or {}).get("after_fill", {}).get("sleep0us") or {}
            return _f(after.get("recovered"))
        rec0 = " ".join(
            f"{g['weight_bytes'] / MB:.1f}MB:{_f(g['after_fill']['sleep0us']['recovered'])}"
            f"/{warmed0(g)}" for g in rec["gemm"])
        inter = rec["interference"]
        lines.append(
            f"{label:10} {big['bytes'] / MB:.0f} MB landed "
            f"{_f(landed.get('TBps'))} TB/s in {_f(landed.get('fill_us'), '.1f')} us "
            f"(exit {_f(big['exit_TBps'])} TB/s, in a graph {_f(big.get('in_graph_TBps'))}, "
            f"kernel {_f(big.get('kernel_TBps'))}); "
            f"GEMM recovered {rec0}; latency chain +"
            f"{_f(inter['latency_chain_200_kernels']['extra_us'], '.1f')} us, memory "
            f"chain +{_f(inter['memory_chain_256MiB_read']['extra_us'], '.1f')} us")
    return "\n".join(lines)


def _interference_lines(out: dict) -> list[str]:
    """The markdown section of the ``interference`` records."""
    md = ["", "## Cost to concurrent work: a fill on a side stream", "",
           "A 50 MB fill beside 200 tiny kernels (replayed from a CUDA graph) and beside a "
           "256 MiB read; a 24 MB fill beside 24 M=8 GEMMs over an 8.4 MB weight that stays "
           "in L2 (replayed from a CUDA graph). Medians, us.", "",
           "| variant | 200 tiny kernels alone | with fill | extra | 256 MiB read alone | "
           "with fill | extra | GEMM chain alone | with fill | extra |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for label, rec in out["variants"].items():
        if "interference" not in rec:
            continue
        inter = rec["interference"]
        cells = []
        for key in ("latency_chain_200_kernels", "memory_chain_256MiB_read"):
            c = inter[key]
            cells.append(f"{c['alone_us']['median']:.1f} | {c['with_fill_us']['median']:.1f}"
                         f" | {c['extra_us']:.1f}")
        g = gemm_chain_record(inter)
        cells.append("- | - | -" if g is None else
                     f"{g['alone_us']['median']:.1f} | {g['with_fill_us']['median']:.1f} | "
                     f"{g['extra_us']:.1f}")
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    return md


def markdown(out: dict) -> str:
    """The markdown report of a ``bench kernel`` result."""
    md = [f"# Fill kernels on {out['device']} ({out['date']})", "",
          f"Command: `{out['command']}`. torch {out['torch']}, CUDA {out['cuda']}, "
          f"nvidia-cutlass-dsl {out['cutlass_dsl']}, {out['sms']} SMs, L2 "
          f"{out['l2_bytes']} B. Medians of {out['reps']} repetitions, each behind a "
          "1 GiB read flush; p10-p90 in brackets. MB = 10^6 B.", "",
          "## Fill: time until the bytes are hot", "",
          "| variant | bytes | launch-to-exit us | bytes / exit TB/s | landed after (sleep) us "
          "| landed TB/s | launch-to-exit, table in L2 us | in a CUDA graph us (TB/s) | "
          "0 B in a CUDA graph us | kernel (CUPTI) us (TB/s) | 0 B kernel us | "
          "cold read kernel us (TB/s) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, rec in out["variants"].items():
        for f in rec.get("fill", []):
            la = f["landed"] or {}
            e = f["launch_to_exit_us"]
            md.append(f"| {label} | {f['bytes'] / MB:.1f} MB | {e['median']:.1f} "
                      f"[{e['p10']:.1f}-{e['p90']:.1f}] | {f['exit_TBps']:.2f} | "
                      f"{_f(la.get('fill_us'), '.1f')}"
                      f" ({_f(la.get('sleep_us'), '.0f')}) | {_f(la.get('TBps'))} | "
                      f"{_f((f.get('launch_to_exit_table_hot_us') or {}).get('median'), '.1f')}"
                      f" | {_f((f.get('in_graph_us') or {}).get('median'), '.1f')} "
                      f"({_f(f.get('in_graph_TBps'))}) | "
                      f"{_f((f.get('empty_in_graph_us') or {}).get('median'), '.1f')} | "
                      f"{_kernel_cells(f)} |")
    rounds = next((g["cold_us"]["n"] for rec in out["variants"].values()
                   for g in rec.get("gemm", [])), 0)
    md += ["", "## The consumer: M=8 bf16 GEMM, cold / hot / right after a fill", "",
           f"Means of {rounds} rounds, cold, hot and after each fill interleaved round by "
           "round; recovered = (cold - after) / (cold - hot) of the means, with a 90% "
           "interval from a paired bootstrap over rounds (`bench.timing.recovered_share`). "
           "Warmed: right after the flush the same GEMM ran over another weight, so its "
           "code, input and workspace are hot and only the weight is cold, as inside a "
           "decode step; its cold and hot references run the same kernels as the fill case, "
           "the fill launched over 0 bytes (`bench.timing.after_fill`).", "",
           "| variant | weight | hot us | cold us | after fill us (recovered [90% interval]) | "
           "after fill + 30 us | warmed: hot / cold us | warmed: after fill us | warmed: "
           "after fill + 30 us | bitwise |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    costs = []
    for label, rec in out["variants"].items():
        for g in rec.get("gemm", []):
            a0, a30 = g["after_fill"]["sleep0us"], g["after_fill"]["sleep30us"]
            wm = g.get("warmed") or {"after_fill": {}}
            w0 = wm["after_fill"].get("sleep0us")
            w30 = wm["after_fill"].get("sleep30us")

            def cell(a):
                return "-" if a is None else f"{a['us']['mean']:.2f} ({_share(a)})"
            refs = ("-" if not w0 or "hot_us" not in w0 else
                    f"{w0['hot_us']['mean']:.2f} / {w0['cold_us']['mean']:.2f}")
            md.append(f"| {label} | {g['weight_bytes'] / MB:.1f} MB | "
                      f"{g['hot_us']['mean']:.2f} | {g['cold_us']['mean']:.2f} | "
                      f"{cell(a0)} | {cell(a30)} | {refs} | {cell(w0)} | "
                      f"{cell(w30)} | {g['bitwise_equal_to_cold']} |")
            cost = (wm.get("empty_fill_cost_us") or {}).get("sleep0us")
            if cost:
                costs.append(f"| {label} | {g['weight_bytes'] / MB:.1f} MB | "
                             f"{cost['hot']:+.2f} | {cost['cold']:+.2f} |")
    if costs:
        md += ["", "What launching the fill kernel over 0 bytes between the warm-up and the "
               "consumer adds to the consumer (warmed, no wait; us, difference of means):", "",
               "| variant | weight | hot | cold |", "|---|---|---|---|", *costs]
    md += _interference_lines(out)
    return "\n".join(md) + "\n"
