"""Turning ``l2sched profile``'s probe results into a device profile TOML
(``l2sched.device`` reads it back) and a markdown report of every probe.

Each number the probes measured is written with its source in
``[measured]`` (the probe, and median/p10/p90 where the probe has a spread);
numbers no probe measures (the stand-in kernel times of the decode-step
bench, the all-reduce model) come from the base profile and are listed in
``provenance.kept_from_base``. Pure Python (no torch): the tests run it on
synthetic results.
"""

from __future__ import annotations

import statistics
from typing import Any

from l2sched.profile.fill_fork import apply_fill_fork, fill_fork_markdown
from l2sched.profile.interference import CLASS_CHAINS, chain_record
from l2sched.profile.ops import ops_markdown
from l2sched.profile.gaps import step_gap_markdown
from l2sched.bench.step import MODEL
from l2sched.profile.step_fill import apply_step_fill, step_fill_markdown
from l2sched.device import DeviceProfile, slowdown_for_extra
from l2sched.model.adapters import get_adapter
from l2sched.profile.origins import apply_base_policy, origin_table, toml_value

MB = 10**6


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` (``statistics.linear_regression``):
    ``(a, b)``; b = 0 when x has one distinct value."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    if len(set(xs)) < 2:
        return statistics.fmean(ys), 0.0
    fit = statistics.linear_regression(xs, ys)
    return fit.intercept, fit.slope


def derive(res: dict, device_profile: DeviceProfile, inventory=None,
           provenance: dict | None = None) -> dict:
    """The profile's values from probe results ``res`` (``run_profile``'s ``results``),
    its ``provenance`` (GPU facts: ``l2_bytes``, ``set_aside_max_bytes``) and
    ``device_profile``, the base profile (``--base``: numbers no probe measures);
    ``inventory``: the analytical inventory the op probe ran (weight bytes per op, for the
    GEMM rate fit). A dict of sections -> {key: value}, ``fill`` (mode -> table), ``ops``,
    ``measured`` (``section.key`` -> {probe, median, p10, p90}), ``kept`` and ``origins``."""
    measured: dict[str, dict] = {}
    kept: list[str] = []
    l2 = res.get("l2", {})
    ops = res.get("ops", {})
    fill = res.get("fill", {})
    surv = res.get("survival", {})
    inter = res.get("interference", {})
    graph = res.get("graph", {})
    prov = provenance or {}

    sec: dict[str, dict[str, Any]] = {"l2": {}, "bandwidth": {}, "latency": {}}
    sec["l2"]["bytes"] = int(prov.get("l2_bytes") or device_profile.l2_bytes)
    if l2:
        sec["l2"]["effective_bytes"] = int(l2["effective_bytes"])
        measured["l2.effective_bytes"] = {"probe": "l2", "median": l2["effective_bytes"]}
        bw = l2["dram_read_gbps"]
        sec["bandwidth"]["dram_read_gbps"] = round(bw, 1)
        lo, hi = l2.get("dram_read_gbps_p10_p90", [bw, bw])
        measured["bandwidth.dram_read_gbps"] = {"probe": "l2 (256 MB cold read)",
                                                "median": bw, "p10": lo, "p90": hi}
    else:
        sec["bandwidth"]["dram_read_gbps"] = device_profile.dram_read_gbps
        kept.append("bandwidth.dram_read_gbps")
    aside = prov.get("set_aside_max_bytes")
    sec["l2"]["set_aside_max_bytes"] = int(aside) if aside else device_profile.set_aside_max_bytes
    if not aside:
        kept.append("l2.set_aside_max_bytes")
    _survival(surv, device_profile, sec, measured, kept)
    _set_aside(res.get("set_aside", {}), device_profile, sec, measured, kept)
    # GEMM rates for ops the table does not cover: a line through (bytes, us)
    gemm = _gemm_points(ops, inventory)
    if len(gemm["cold"]) >= 2:
        a, b = _fit_line(gemm["cold"])
        ah, bh = _fit_line(gemm["hot"])
        sec["bandwidth"]["gemm_fixed_us"] = round(max(0.0, a), 2)
        sec["bandwidth"]["gemm_dram_gbps"] = round(1 / (b * 1e3), 1) if b > 0 \
            else device_profile.gemm_dram_gbps
        sec["bandwidth"]["gemm_l2_gbps"] = round(1 / (bh * 1e3), 1) if bh > 0 \
            else device_profile.gemm_l2_gbps
        for k in ("gemm_fixed_us", "gemm_dram_gbps", "gemm_l2_gbps"):
            measured[f"bandwidth.{k}"] = {"probe": "ops (line fit over the GEMMs at "
                                          "the smallest M)"}
    else:
        for k in ("gemm_fixed_us", "gemm_dram_gbps", "gemm_l2_gbps"):
            sec["bandwidth"][k] = getattr(device_profile, k)
            kept.append(f"bandwidth.{k}")
    launch = max(0.0, graph["fork_join_us"]) if graph else None
    modes = _fill_modes(fill, inter, device_profile, measured, launch)
    apply_step_fill(modes, res.get("step_fill", {}), measured)
    if graph:
        measured["fill.launch_us"] = {"probe": "graph (fork + empty fill + join in a "
                                      "200-kernel chain)", "median": launch}
    bulk = modes.get("bulk") or {}
    sec["bandwidth"]["fill_gbps"] = bulk.get("gbps", device_profile.fill_gbps)
    sec["bandwidth"]["fill_launch_us"] = bulk.get("launch_us", device_profile.fill_launch_us)
    sec["l2"]["fill_effect"] = bulk.get("effect", device_profile.fill_effect)
    if graph:
        sec["latency"]["kernel_gap_us"] = round(graph["kernel_gap_us"], 3)
        measured["latency.kernel_gap_us"] = {
            "probe": "graph (200-kernel chain / 200)",
            "median": graph["kernel_gap_us"],
            "p10": graph["chain_200_us"]["p10"] / 200,
            "p90": graph["chain_200_us"]["p90"] / 200}
    else:
        sec["latency"]["kernel_gap_us"] = device_profile.kernel_gap_us
        kept.append("latency.kernel_gap_us")
    _kept_latency(device_profile, sec, kept, measured)
    apply_fill_fork(res.get("fill_fork"), device_profile, sec, measured, kept)
    kept.append("allreduce")
    return apply_base_policy({"sections": sec, "fill": modes, "fill_default": default_fill_mode(
        modes, device_profile), "ops": _op_table(ops), "measured": measured, "kept": kept},
        device_profile, prov)


def _kept_latency(device_profile: DeviceProfile, sec: dict, kept: list, measured: dict) -> None:
    """Latency terms no probe measures, copied from the base profile: the
    stand-in kernel times and, where the base has one, the fill-slowdown
    scale fitted on a decode-step run (``bench calibrate``), with the base's
    ``[measured]`` record of where that fit came from."""
    for k in ("small_kernel_us", "attention_core_us"):
        sec["latency"][k] = getattr(device_profile, k)
        kept.append(f"latency.{k}")
    # a fitted scale can be 1 (the default) too: its [measured] record says it was fitted
    if device_profile.fill_slowdown_scale != 1.0 or \
            "latency.fill_slowdown_scale" in device_profile.measured:
        sec["latency"]["fill_slowdown_scale"] = device_profile.fill_slowdown_scale
        kept.append("latency.fill_slowdown_scale")
        if "latency.fill_slowdown_scale" in device_profile.measured:
            measured["latency.fill_slowdown_scale"] = dict(
                device_profile.measured["latency.fill_slowdown_scale"])


def _set_aside(probe: dict, device_profile: DeviceProfile, sec: dict, measured: dict,
               kept: list) -> None:
    """``l2.set_aside_stream_slowdown`` from the set_aside probe (the median
    over M of the expert stream's slowdown with the maximum set-aside; a
    negative median is written as 0, since the model has no speed-up term,
    while ``[measured]`` keeps the probe's own numbers), else the base
    profile's value (kept)."""
    v = probe.get("median")
    if v is not None:
        v = max(0.0, float(v))
        sec["l2"]["set_aside_stream_slowdown"] = round(v, 4)
        lo, hi = probe.get("p10_p90", [v, v])
        measured["l2.set_aside_stream_slowdown"] = {
            "probe": "set_aside (routed-expert stream of one MoE layer per M, maximum "
                     "set-aside vs none, after a 48 MB evict_last fill)",
            "median": v, "p10": lo, "p90": hi}
    elif device_profile.set_aside_stream_slowdown:
        sec["l2"]["set_aside_stream_slowdown"] = device_profile.set_aside_stream_slowdown
        kept.append("l2.set_aside_stream_slowdown")


def _survival(surv: dict, device_profile: DeviceProfile, sec: dict, measured: dict,
              kept: list) -> None:
    """Residency terms from the survival probe: evict_last bytes that
    survive a stream larger than the L2, and the normal-policy survival."""
    pol = surv.get("policies", {})
    last = [r for r in pol.get("evict_last", []) if r["hot_fraction"] is not None]
    normal = [r for r in pol.get("evict_normal", []) if r["hot_fraction"] is not None]
    w = surv.get("weight_bytes", 0)
    def kept_share(rows):
        # what survived the longest stream, relative to what the fill landed
        # (the fill's own landed fraction is the fill table's ``effect``)
        landed = rows[0]["hot_fraction"] if rows[0]["stream_mb"] == 0 else None
        f = rows[-1]["hot_fraction"]
        if landed is None or landed <= 0.1 or rows[-1]["stream_mb"] == 0:
            return None
        return max(0.0, min(1.0, f / landed))
    f = kept_share(last) if last else None
    if f is not None:
        # the probe fills one weight: it shows protection up to its size
        prot = int(f * w) if f < 0.95 else max(int(f * w),
                                               device_profile.evict_last_protected_bytes)
        sec["l2"]["evict_last_protected_bytes"] = prot
        measured["l2.evict_last_protected_bytes"] = {
            "probe": f"survival (evict_last: hot fraction after a {last[-1]['stream_mb']} MB "
                     f"stream / before it, x the {w / MB:.1f} MB fill)", "median": f}
    else:
        sec["l2"]["evict_last_protected_bytes"] = device_profile.evict_last_protected_bytes
        kept.append("l2.evict_last_protected_bytes")
    f = kept_share(normal) if normal else None
    if f is not None:
        sec["l2"]["evict_normal_survival"] = round(f, 3)
        measured["l2.evict_normal_survival"] = {
            "probe": f"survival (evict_normal: hot fraction after a {normal[-1]['stream_mb']} "
                     f"MB stream / before it)", "median": f}
    else:
        sec["l2"]["evict_normal_survival"] = device_profile.evict_normal_survival
        kept.append("l2.evict_normal_survival")


def _gemm_points(ops: dict, inventory) -> dict:
    """``(weight bytes, us)`` points of the measured GEMMs at the smallest
    M, cold and hot (bytes from the inventory's op reads)."""
    out = {"cold": [], "hot": []}
    if not ops or inventory is None:
        return out
    ad = get_adapter(inventory.model)
    first = {}
    for i, k in enumerate(inventory.kinds):
        first.setdefault(str(k), i)
    for kind, per in ops.get("table", {}).items():
        i = first.get(kind)
        if i is None:
            continue
        by_name = {op.name: op for op in ad.decode_timeline(inventory.kinds[i])}
        have = {t.path: t for t in inventory.tensors(i)}
        for name, rec in per.items():
            op = by_name.get(name)
            if op is None or op.cls != "gemm":
                continue
            nbytes = sum(have[p].nbytes for p in op.reads if p in have)
            if nbytes < MB:
                continue
            out["cold"].append((nbytes, rec["cold_us"][0]))
            out["hot"].append((nbytes, rec["hot_us"][0]))
    return out


#: The per-class fill slowdowns a probe chain gives besides ``slowdown``
#: (``interference.CLASS_CHAINS``), and how each was measured.
CLASS_TERMS = tuple(k for _, k in CLASS_CHAINS if k != "slowdown")
_READ_AS = "read as the lint's slowdown: device.overlap)"
CLASS_PROBES = {
    "slowdown": f"interference (latency chain's extra us beside a 50 MB fill, {_READ_AS}",
    "gemm_slowdown": "interference (L2-resident GEMM chain's extra us beside a 24 MB "
                     f"fill, {_READ_AS}",
    "attention_slowdown": "interference (decode-attention chain over an L2-resident KV cache, "
                          f"extra us beside a 24 MB fill, {_READ_AS}",
    "routing_slowdown": f"interference (sigmoid/top-k/renormalize chain's extra us beside a 50 MB "
                        f"fill, {_READ_AS}"}


def _fill_modes(fill: dict, inter: dict, device_profile: DeviceProfile, measured: dict,
                launch_us: float | None = None) -> dict:
    """``mode -> {grid, threads, chunk, stages, gbps, effect, launch_us,
    slowdown, gemm_slowdown (when measured), landed, source}`` from the
    fill and interference probes;
    ``launch_us``: the graph probe's fork + empty fill + join (us), else the
    base profile's."""
    out = {}
    for mode, rec in fill.items():
        if "rows" not in rec:
            continue
        shape = rec["shape"]
        rows = rec["rows"]
        landed = []
        for r in rows:
            w = r["waits"]
            last = w[sorted(w, key=int)[-1]]
            if last["landed"] is not None:
                landed.append([r["mb"], round(max(0.0, min(1.0, last["landed"])), 3)])
        big = rows[-1]
        exit_us = big["launch_to_exit_us"]["median"]
        gbps = big["mb"] * MB / exit_us / 1e3
        if mode == "bulk":  # exits when its requests are issued, not landed
            old = device_profile.fill_modes.get("bulk")
            gbps = min(gbps, old.gbps if old else gbps)
        effs = [f for _, f in landed]
        launch = launch_us if launch_us is not None else (
            device_profile.fill_modes[mode].launch_us if mode in device_profile.fill_modes
            else device_profile.fill_launch_us)
        slow = probe_slowdowns(inter.get(mode, {}), gbps, launch)
        entry = {"grid": shape.get("grid"), "threads": shape.get("threads", 32),
                 "chunk": shape.get("chunk"), "stages": shape.get("stages", 1),
                 "gbps": round(gbps, 1),
                 "effect": round(statistics.median(effs), 3) if effs else 0.0,
                 "launch_us": launch,
                 "slowdown": round(slow.get("slowdown", 0.0), 3),
                 **{k: round(slow[k], 3) for k in CLASS_TERMS if k in slow},
                 "landed": landed, "source": "l2sched profile: fill, interference"}
        entry = {k: v for k, v in entry.items() if v is not None}
        out[mode] = entry
        measured[f"fill.{mode}.gbps"] = {"probe": f"fill ({big['mb']} MB / launch-to-exit"
                                         + (", capped at the base's: a bulk kernel exits "
                                            "before its lines land)" if mode == "bulk"
                                            else ")"), "median": gbps}
        measured[f"fill.{mode}.effect"] = {"probe": "fill (median over sizes of the "
                                           "landed fraction at the longest wait)",
                                           "median": entry["effect"]}
        for k, v in slow.items():
            measured[f"fill.{mode}.{k}"] = {"probe": CLASS_PROBES[k], "median": v}
    return out


def probe_slowdowns(rec: dict, gbps: float, launch_us: float) -> dict:
    """``{slowdown, gemm_slowdown, attention_slowdown, routing_slowdown}``
    (those measured) from one fill kernel's interference record
    (``bench.interference``; a chain per kernel class,
    ``interference.CLASS_CHAINS``): each chain's median extra us beside the
    fill, read through the lint's picture of the probe (the fill's
    ``launch_us``, then ``fill bytes / gbps`` of reads, beside the chain's
    alone time; ``device.overlap.slowdown_for_extra``). A chain whose extra
    no slowdown explains gives the value for a read as long as the extra
    (the largest the picture allows: 100, the profile's bound). Units: us,
    GB/s."""
    out = {}
    for prefix, key in CLASS_CHAINS:
        chain = chain_record(rec, prefix)
        if not chain or "extra_us" not in chain:
            continue
        nbytes = chain.get("fill_bytes", rec.get("fill_bytes", 0))
        s = slowdown_for_extra(chain["extra_us"], chain["alone_us"]["median"], launch_us,
                               nbytes / (gbps * 1e3))
        out[key] = 100.0 if s is None else min(100.0, s)
    return out


def default_fill_mode(modes: dict, device_profile: DeviceProfile) -> str:
    """The profile's rule for its default fill kernel: of ``modes`` (kernel
    -> ``{"effect", "slowdown", ...}``), the one with the highest effect
    less its slowdown; ``device_profile.fill_default`` (the base's) without
    measurements."""
    if not modes:
        return device_profile.fill_default
    return max(sorted(modes), key=lambda m: modes[m]["effect"] - modes[m]["slowdown"])


def _op_table(ops: dict) -> dict:
    out: dict = {}
    for kind, per in (ops.get("table") or {}).items():
        for name, rec in per.items():
            out.setdefault(kind, {})[name] = {
                "m": rec["m"], "cold_us": [round(x, 3) for x in rec["cold_us"]],
                "hot_us": [round(x, 3) for x in rec["hot_us"]]}
    return out


def profile_toml(name: str, description: str, provenance: dict, derived: dict,
                 device_profile: DeviceProfile) -> str:
    """The TOML text of the measured profile ``name``."""
    prov = dict(provenance)
    prov["kept_from_base"] = derived["kept"]
    cc = prov.get("compute_capability") or list(device_profile.compute_capability or [])
    lines = [f"# Device profile measured by `{prov.get('command', 'l2sched profile')}`",
             f"# on {prov.get('gpu', '?')} ({prov.get('date', '?')}). Units: bytes (B), "
             "GB/s = 10^9 B/s, microseconds (us).",
             "# Every measured number has its probe (and median/p10/p90) in [measured];",
             f"# provenance.kept_from_base lists the numbers kept from profile "
             f"{device_profile.name} (not measured by the probes); [origin] says where each "
             "came from.",
             *(["# A --quick profile: not for fitting (no step_fill probe; `l2sched fit` "
                "writes no windows from it)."] if prov.get("quick") else []), "",
             f"name = {toml_value(name)}", f"description = {toml_value(description)}",
             f"compute_capability = {toml_value(cc)}", "",
             # what the driver reported: the plugin installs only on such a GPU
             "[gpu]", f"names = {toml_value([prov.get('gpu', '')])}",
             f"sm_count = {toml_value(prov.get('sms'))}"]
    # the driver's limit, in [gpu] only; the fill kernels' shapes are fitted
    # to it (runtime.kernel.fit_spec)
    smem = prov.pop("smem_per_block_optin_bytes", None)
    if smem:
        lines.append(f"smem_per_block_optin_bytes = {toml_value(int(smem))}")
    lines += ["", "[provenance]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in prov.items() if v is not None]
    for s in ("l2", "bandwidth", "latency"):
        lines += ["", f"[{s}]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in derived["sections"][s].items()]
    lines += ["", "[fill]", f"default = {toml_value(derived['fill_default'])}"]
    for mode, tab in derived["fill"].items():
        lines += [f"[fill.{mode}]"] + [f"{k} = {toml_value(v)}" for k, v in tab.items()]
    lines += ["", "[allreduce]", 'model = "latency_plus_bandwidth"']
    tables = derived.get("allreduce") or {
        d: (m.latency_us, m.busbw_gbps, m.measured, m.source)
        for d, m in device_profile.allreduce.items()}
    for deg, (lat, bw, when, src) in sorted(tables.items()):
        lines += [f"[allreduce.tp{deg}]", f"latency_us = {lat!r}", f"busbw_gbps = {bw!r}"]
        if when:
            lines.append(f'measured = "{when}"')
        if src:
            lines.append(f"source = {toml_value(src)}")
    for kind, per in derived["ops"].items():
        lines += ["", f'[ops.{MODEL}."{kind}"]']
        lines += [f'"{op}" = {toml_value(v)}' for op, v in per.items()]
    lines += ["", "[measured]"]
    lines += [f'"{k}" = {toml_value(v)}' for k, v in derived["measured"].items()]
    text = "\n".join(lines) + "\n"
    return text + "\n".join(origin_table(text, f"{name}.toml", derived)) + "\n"


def profile_markdown(provenance: dict, res: dict, derived: dict) -> str:
    """The markdown report of every probe of a profile run."""
    p = provenance
    md = [f"# `l2sched profile` on {p.get('gpu')} ({p.get('date')})", "",
          f"Command: `{p.get('command')}`. torch {p.get('torch')}, CUDA {p.get('cuda')}, "
          f"driver {p.get('driver')}, nvidia-cutlass-dsl {p.get('cutlass_dsl')}, "
          f"{p.get('sms')} SMs, L2 {p.get('l2_bytes')} B, quick={p.get('quick')}. "
          "Medians (p10-p90). MB = 10^6 B.", ""]
    if p.get("probe_seconds"):
        md += ["Probe wall time, s: " + ", ".join(
            f"{k} {v:.0f}" for k, v in p["probe_seconds"].items())
            + f" (total {sum(p['probe_seconds'].values()):.0f}).", ""]
    l2 = res.get("l2")
    if l2:
        md += ["## L2: re-read sweep", "", f"Effective L2 (re-read hit >= 90% in both "
               f"orders): {l2['effective_bytes'] / MB:.0f} MB; device-memory read "
               f"{l2['dram_read_gbps']:.0f} GB/s (256 MB cold read).", "",
               "| MB | cold us | re-read us (hit) | reverse re-read us (hit) |",
               "|---|---|---|---|"]
        for r in l2["rows"]:
            md.append(f"| {r['mb']} | {r['cold_us']['median']:.1f} | "
                      f"{r['reread_us']['median']:.1f} ({r['reread_hit']:.2f}) | "
                      f"{r['reread_reverse_us']['median']:.1f} "
                      f"({r['reread_reverse_hit']:.2f}) |")
        md.append("")
    ops = res.get("ops")
    if ops:
        md += ops_markdown(ops)
    fill = res.get("fill")
    if fill:
        md += ["## Fill kernels: landed fraction of an M=8 GEMM's cold->hot gap", "",
               "| kernel | MB | launch-to-exit us | wait us: landed fraction (p10..p90) |",
               "|---|---|---|---|"]
        for mode, rec in fill.items():
            for r in rec.get("rows", []):
                waits = "; ".join(
                    f"{w}: {_n(v['landed'])} ({_n(v['landed_p10_p90'][0])}.."
                    f"{_n(v['landed_p10_p90'][1])})" for w, v in r["waits"].items())
                md.append(f"| {mode} | {r['mb']} | {r['launch_to_exit_us']['median']:.1f}"
                          f" | {waits} |")
        md.append("")
    surv = res.get("survival")
    if surv:
        md += [f"## Survival of a {surv['weight_bytes'] / MB:.1f} MB {surv['fill_mode']} "
               "fill under streaming reads", "", "| policy | stream MB | GEMM us | hot "
               "fraction |", "|---|---|---|---|"]
        for pol, rows in surv["policies"].items():
            for r in rows:
                md.append(f"| {pol} | {r['stream_mb']} | {r['us']['median']:.2f} | "
                          f"{_n(r['hot_fraction'])} |")
        md.append("")
    md += _interference_markdown(res.get("interference"), derived)
    g = res.get("graph")
    if g:
        md += ["## Graph", "", f"200 tiny kernels replayed: {g['chain_200_us']['median']:.1f}"
               f" us ({g['kernel_gap_us']:.2f} us each); one fork + empty fill + join: "
               f"{g['fork_join_us']:+.1f} us.", ""]
    md += _set_aside_markdown(res.get("set_aside")) + step_fill_markdown(res.get("step_fill"))
    md += fill_fork_markdown(res.get("fill_fork"))
    md += step_gap_markdown(derived)
    md += ["## The profile", "", f"Default fill kernel: {derived['fill_default']}. "
           f"Kept from the base profile: {', '.join(derived['kept'])}.", ""]
    return "\n".join(md) + "\n"


def _interference_markdown(inter: dict | None, derived: dict) -> list[str]:
    """The report section of the interference probe (none without it): per
    fill kernel, each chain's extra us beside the fill and the slowdown it
    gives its kernel class (``interference.CLASS_CHAINS``; ``-``: not in
    this run)."""
    if not inter:
        return []
    md = ["## Interference: a fill beside a chain, per kernel class", "", "A 50 MB fill "
          "beside the latency, memory and routing chains, a 24 MB fill beside the chains of "
          "GEMMs over an L2-resident weight and of decode attention over an L2-resident KV "
          "cache (`bench.interference`). Each class's slowdown is its chain's extra read as "
          "the lint's slowdown (`device.overlap`: the fill's launch, then its bytes at its "
          "gbps, beside the chain).", "",
          "| kernel | memory chain extra us | " + " | ".join(
              f"{p.rstrip('_').replace('_', ' ')} extra us | {k}" for p, k in CLASS_CHAINS)
          + " |", "|---|---|" + "---|---|" * len(CLASS_CHAINS)]
    for mode, r in inter.items():
        fm = derived.get("fill", {}).get(mode, {})
        cells = []
        for prefix, key in CLASS_CHAINS:
            chain = chain_record(r, prefix)
            cells += ["-" if chain is None else format(chain["extra_us"], ".1f"),
                      _n(fm.get(key), ".3f")]
        md.append(f"| {mode} | {r['memory_chain_256MiB_read']['extra_us']:.1f} | "
                  + " | ".join(cells) + " |")
    md.append("")
    return md


def _set_aside_markdown(sa: dict | None) -> list[str]:
    """The set_aside probe's section of the report (none without it)."""
    if not sa or not sa.get("rows"):
        return []
    md = ["## Set-aside: the routed-expert stream with the maximum persisting-L2 set-aside",
          "", f"Layer {sa['layer']}, after a {sa['fill_bytes'] / MB:.0f} MB evict_last "
          f"{sa['fill_mode']} fill elsewhere; reserved {sa.get('set_aside_bytes') or '-'} B. "
          "Means of interleaved rounds.", "",
          "| M | no set-aside us | maximum us | slowdown |", "|---|---|---|---|"]
    for r in sa["rows"]:
        md.append(f"| {r['M']} | {r['none_us']['mean']:.1f} | {r['max_us']['mean']:.1f} | "
                  f"{r['slowdown']:+.3f} |")
    return md + ["", f"Median slowdown: {_n(sa.get('median'))}.", ""]


def _n(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)
