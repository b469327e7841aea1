"""``python -m lab bench tp-report``: the markdown of a ``bench tp`` result, and the
measured collective model.

First, for a ``--validation`` result, the out-of-sample validation of the
lint's predicted gains (``tp_validation``, docs/lint.md#validation). Then
tables: step time per rank and M (CUDA-graph replays, median and p10-p90)
with and without the compiled schedule, with real all-reduces and with the
single-GPU bench's idle intervals (``/spin`` arms); whether the idle-interval
model predicted the gain measured with real all-reduces (the ``/spin`` arms
on the same GPUs and the lint's predicted gain at the modelled TP); every
all-reduce message measured vs the device profile's model; fill finish vs
expert-stream start per window.

Verdicts of those tables (a diagnostic, not the validation): a gain is
``faster``/``slower`` when it exceeds the larger p10-p90 half-spread of the
two arms compared, else ``same``. Then the all-reduce with a concurrent
fill of each fill kernel (``tp_interference``).

``--update-profile NAME_OR_PATH`` fits ``latency_us + bytes / bandwidth``
(``devices.fit_allreduce``) to the measured all-reduces of the result
(median over ranks of each message's per-call median; graph-captured when
present, else eager; messages up to ``--fit-max-bytes``) and writes it as
``[allreduce.tpW]`` (W = the result's world size) with the result's date and
path, and the measured collective interference as ``allreduce_slowdown``
in each ``[fill.MODE]`` table (``tp_profile``: both applied to a copy,
the profile written once or not at all). Units: us, bytes.
"""

from __future__ import annotations

import json
import statistics
import sys

from l2sched.bench import read_json_file, shipped_path
from l2sched.bench.options import FIT_MAX_BYTES
from lab.bench.calibrate_model import pooled_controls
from l2sched.profile.tp_interference import fill_lines
from l2sched.profile.tp_interference import median_present as _med
from l2sched.profile.collective_terms import collective_terms_text, fit
from lab.bench.tp_validation import lint_profile, validation, validation_lines
from l2sched.errors import L2sInputError
from l2sched.files import check_output_path, write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.device import profile_path, read_profile_text
from l2sched.model.inventory import analytical_inventory
from l2sched.units import format_signed


def cmd(args) -> int:
    """``bench tp-report``: write the markdown; update the profile if asked.
    Returns the exit code (1 when the fit is impossible)."""
    if args.controls and args.no_lint:
        raise L2sInputError("--controls adds to the lint's predictions: it cannot go with "
                            "--no-lint")
    if args.md_out:  # before the lint: a clash is no reason to wait
        check_output_path(args.md_out, protect=list(args.result) + list(args.controls))
    results = [load(p) for p in args.result]
    source_path = " + ".join(args.result)
    try:
        d = merge(results)
        ctl = None
        if args.controls and not args.no_lint:
            prof = lint_profile(d, source_path)[0]
            ctl = pooled_controls(args.controls, prof, d, source_path)
        text = markdown(d, command=args.command, lint=not args.no_lint,
                        fit_max_bytes=args.fit_max_bytes, fit_source=args.fit_source,
                        caveats=tuple(args.caveat), controls=ctl)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        # a result JSON with missing or mistyped fields, or runs that do not merge
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        raise L2sInputError(f"{source_path}: not a usable `l2sched bench tp` result "
                            f"({why})") from None
    if args.md_out:
        protect = list(args.result) + list(args.controls)
        if args.update_profile:
            try:
                protect.append(str(profile_path(args.update_profile)))
            except Exception:
                pass  # update_profile reports an unknown profile below
        write_text_atomically(args.md_out, text, protect=protect)
    else:
        print(text, end="")
    if args.update_profile:
        path = profile_path(args.update_profile)
        try:
            new, lines = collective_terms_text(d, read_profile_text(path), source_path,
                                               max_bytes=args.fit_max_bytes,
                                               source=args.fit_source)
        except (ValueError, KeyError, TypeError) as e:
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            print(f"python -m lab bench tp-report: {path}: not updated: {why}", file=sys.stderr)
            return 1
        write_text_atomically(path, new, protect=list(args.result), in_place=True)
        for line in lines:
            print(f"{path}: {line}")
    return 0


def load(path: str) -> dict:
    """Read a ``bench tp`` result; raises ``L2sInputError`` (a subclass of
    ``L2sError``, one line naming the file) when it cannot be read, is not
    UTF-8 JSON or is not such a result."""
    d = read_json_file(path)
    if not isinstance(d, dict) or d.get("kind") != "l2sched bench tp":
        raise L2sInputError(f"{path}: not a `l2sched bench tp` result")
    return d


def merge(results: list[dict]) -> dict:
    """One result from ``bench tp`` results of runs with different
    ``--tokens`` (same world size, TP, backend, schedule, replays): per rank,
    the per-M records of all runs; the standalone all-reduce messages of the
    first run that measured each size; ``tokens`` sorted; ``argv`` becomes
    the list of every run's argv (``runs``). Raises ``ValueError`` when the
    runs differ in anything but ``--tokens`` or measure an M twice."""
    if len(results) == 1:
        return results[0]
    base = json.loads(json.dumps(results[0]))
    keys = ("world_size", "tp", "backend", "dry", "schedule", "overrides",
            "device_profile", "replays", "warmup", "hidden", "p2p", "validation",
            "arms", "ar_fill_bytes")
    for r in results[1:]:
        diff = [k for k in keys if r.get(k) != base.get(k)]
        if diff:
            raise ValueError(f"cannot merge bench tp results that differ in {', '.join(diff)}")
    base["runs"] = [r.get("argv") for r in results]
    base["note"] = base.get("note", "") + (
        f" Merged from {len(results)} runs (one process group per run, "
        f"tokens {' | '.join(','.join(map(str, r['tokens'])) for r in results)})")
    for r in results[1:]:
        for rank, rr in zip(base["ranks"], r["ranks"]):
            dup = set(rank["per_m"]) & set(rr["per_m"])
            if dup:
                raise ValueError(f"M={','.join(sorted(dup))} measured in two runs")
            rank["per_m"].update(rr["per_m"])
            have = {a["bytes"] for a in rank["allreduce"]}
            rank["allreduce"] += [a for a in rr["allreduce"] if a["bytes"] not in have]
            rank["allreduce"].sort(key=lambda a: a["bytes"])
            if rr.get("allreduce_fill"):
                fill = rank.setdefault("allreduce_fill", rr["allreduce_fill"])
                if fill is not rr["allreduce_fill"]:
                    have = {a["bytes"] for a in fill["rows"]}
                    fill["rows"] = sorted(fill["rows"] + [a for a in rr["allreduce_fill"]["rows"]
                                                          if a["bytes"] not in have],
                                          key=lambda a: a["bytes"])
            rank["total_s"] = rank.get("total_s", 0) + rr.get("total_s", 0)
        base["total_s"] = base.get("total_s", 0) + r.get("total_s", 0)
    base["tokens"] = sorted({t for r in results for t in r["tokens"]})
    for rank in base["ranks"]:
        rank["per_m"] = dict(sorted(rank["per_m"].items(), key=lambda kv: int(kv[0])))
    return base


def step_stats(a: dict) -> dict | None:
    """An arm's replay step-time stats: ``graph_step_us`` (results since
    the validation arms), ``step_us`` in older results."""
    return a.get("graph_step_us") or a.get("step_us")


def _fmt(s) -> str:
    if not s or s.get("median") is None:
        return "-"
    return f"{s['median']:.0f} ({s['p10']:.0f}-{s['p90']:.0f})"


def _half(s) -> float:
    return (s["p90"] - s["p10"]) / 2 if s and s.get("p90") is not None else 0.0


def verdict(gain: float | None, noise: float) -> str:
    """``faster`` / ``slower`` / ``same`` for a gain (us) against a noise
    level (us); ``-`` without a gain."""
    if gain is None:
        return "-"
    return "faster" if gain > noise else "slower" if gain < -noise else "same"


def _gain(arms: dict, base: str, arm: str):
    a, b = step_stats(arms.get(arm, {})), step_stats(arms.get(base, {}))
    if not a or not b or a.get("median") is None:
        return None, 0.0
    return b["median"] - a["median"], max(_half(a), _half(b))


def _lint_gains(d: dict) -> dict:
    """M -> the lint's predicted gain (us) of the schedule at the modelled TP
    (its all-reduces: the device profile's model, as the single-GPU bench)."""
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=d["tp"], ep=False, tp_rank=0)
    prof, _ = lint_profile(d)
    sched = load_schedule(shipped_path(d["schedule"]), d["overrides"])
    out = {}
    for M in d["tokens"]:
        lr = run_lint(sched, inv, device_profile=prof, tokens=int(M), model_config=cfg)
        out[str(M)] = lr.step_period("base") - lr.step_period("sim")
    return out


def markdown(d: dict, *, command: str = "", lint: bool = True,
             fit_max_bytes: int | None = FIT_MAX_BYTES,
             fit_source: str = "graph", caveats: tuple[str, ...] = (),
             controls: tuple | None = None) -> str:
    """The report of result ``d`` (see the module docstring); ``caveats``
    are printed as a list right after the machine lines; ``controls``:
    ``(residuals, path)`` of a ``bench tp --controls`` run of another run
    (``calibrate_model.control_residuals``), added to the validation's
    predictions (``L2sError`` for an arm without a control there)."""
    out = _front(d, command, caveats)
    if d.get("validation"):
        out += (validation_lines(validation(d, controls=controls), d["tp"], d["world_size"])
                if lint else
                ["## Validation (out of sample)", "", "Not computed (--no-lint).", ""])
    out += _step_table(d)
    out += _prediction_table(d, lint)
    out += _allreduce_tables(d)
    out += _fit_lines(d, fit_max_bytes, fit_source)
    out += fill_lines(d)
    out += _fill_table(d)
    return "\n".join(out) + "\n"


def _front(d: dict, command: str, caveats: tuple[str, ...]) -> list[str]:
    """Title, command, machine and run lines, caveats, the all-reduce check."""
    ranks = d["ranks"]
    g = ranks[0]["machine"]
    ws, tp = d["world_size"], d["tp"]
    out = [f"# l2sched bench tp: {ws} ranks, modelled TP{tp}, {d['date']}", ""]
    if command:
        out += ["```sh", command, "```", ""]
    out += [f"- machine: {ws} x {g.get('gpu', 'CPU (dry run)')}, torch {g['torch']}, "
            f"CUDA {g.get('cuda', '-')}, NCCL {g.get('nccl', '-')}, backend "
            f"{d['backend']}{' (dry: meta tree, dry-run runtime, host wall times)' if d['dry'] else ''}",
            f"- world_size {ws}: the all-reduces run across {ws} processes; the weights, "
            f"inventory and plan are TP{tp}'s per-GPU shapes (TP rank = rank % {tp}).",
            f"- schedule {d['schedule']} {' '.join(d['overrides'])}; device profile "
            f"{d['device_profile']}; multicast off: "
            + ", ".join(f"{k}={v}" for k, v in d["multicast_env"].items()),
            f"- all-reduce: {d.get('allreduce_impl', 'torch.distributed.all_reduce')}; "
            f"NCCL P2P {d.get('p2p', 'not recorded (NCCL default: on)')}; NCCL "
            f"environment of the ranks: "
            + (", ".join(f"{k}={v}" for k, v in d["nccl_env"].items())
               if d.get("nccl_env") else "not recorded"),
            f"- {d['replays']} timed replays per graph after {d['warmup']} warm-up "
            f"rounds, interleaved, barrier before each; {d['note']}.", ""]
    if d.get("incomplete"):
        out += [f"**Incomplete result** ({d['incomplete']}): a rank failed or the run "
                "was stopped after this checkpoint.", ""]
    if caveats:
        out += ["Caveats:", ""] + [f"- {c}" for c in caveats] + [""]
    bad = [(r["rank"], M, a, c) for r in ranks for M, m in r["per_m"].items()
           for a, v in m["arms"].items() if (c := v.get("allreduce_check"))
           and c["passed"] != c["calls"]]
    out.append("All-reduce check (eager forward, every result = sum over ranks): "
               + ("passed on every rank, M and arm." if not bad else
                  f"FAILED: {bad}"))
    out.append("")
    return out


def _step_table(d: dict) -> list[str]:
    """Step times per M and rank, with and without the schedule, real
    all-reduces and idle intervals (``/spin``), and the gains."""
    ranks = d["ranks"]
    out = ["## Step time (CUDA-graph replay), us: median (p10-p90)", "",
           "| M | rank | none | compiled | gain | none/spin | compiled/spin | spin gain |",
           "|---|---|---|---|---|---|---|---|"]
    for M in map(str, d["tokens"]):
        for r in ranks:
            arms = r["per_m"][M]["arms"]
            cells = []
            for base, arm in (("none", "compiled"), ("none/spin", "compiled/spin")):
                gn, _ = _gain(arms, base, arm)
                pct = (f" ({format_signed(100 * gn / step_stats(arms[base])['median'], '+.2f')}%)"
                       if gn is not None else "")
                cells += [_fmt(step_stats(arms.get(base, {}))),
                          _fmt(step_stats(arms.get(arm, {}))),
                          f"{format_signed(gn, '+.1f')}{pct}" if gn is not None else "-"]
            out.append(f"| {M} | {r['rank']} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def _prediction_table(d: dict, lint: bool) -> list[str]:
    """The real gain per M vs the idle-interval (``/spin``) gain and the
    lint's predicted gain (``lint``: run it), with verdicts and agreement."""
    ranks = d["ranks"]
    tp = d["tp"]
    lg = _lint_gains(d) if lint and not d["dry"] else {}
    out = ["## Did the single-GPU idle-interval model predict it?", "",
           "Gains (us) of `compiled` over `none`, median over ranks. `spin`: the same "
           f"step on the same GPUs with the all-reduces replaced by idle intervals of "
           f"the {d['device_profile']} profile's TP{tp} collective model (what "
           "`l2sched bench run` does); lint: `run_lint` at the modelled TP.", "",
           "| M | none step, real / spin | real gain | verdict | spin gain | verdict | "
           "lint gain | verdict | agree (real vs spin, lint) |",
           "|---|---|---|---|---|---|---|---|---|"]
    agree = total = 0
    for M in map(str, d["tokens"]):
        real = [_gain(r["per_m"][M]["arms"], "none", "compiled") for r in ranks]
        spin = [_gain(r["per_m"][M]["arms"], "none/spin", "compiled/spin") for r in ranks]
        rg, rn = _med([x for x, _ in real]), _med([n for _, n in real]) or 0.0
        sg, sn = _med([x for x, _ in spin]), _med([n for _, n in spin]) or 0.0
        vr, vs = verdict(rg, rn), verdict(sg, max(rn, sn))
        lgm = lg.get(M)
        vl = verdict(lgm, rn) if lgm is not None else "-"
        base_r = _med([(step_stats(r["per_m"][M]["arms"]["none"]) or {}).get("median")
                       for r in ranks])
        base_s = _med([(step_stats(r["per_m"][M]["arms"].get("none/spin", {})) or {})
                       .get("median") for r in ranks])
        a1 = "-" if vs == "-" else ("yes" if vs == vr else "NO")
        a2 = "-" if vl == "-" else ("yes" if vl == vr else "NO")
        for a in (a1, a2):
            if a != "-":
                total += 1
                agree += a == "yes"
        out.append(f"| {M} | {_n(base_r)} / {_n(base_s)} | {_n(rg, '+.1f')} | {vr} | "
                   f"{_n(sg, '+.1f')} | {vs} | {_n(lgm, '+.1f')} | {vl} | {a1}, {a2} |")
    out += ["", f"Verdicts agree in {agree} of {total} comparisons (a diagnostic of the "
            "idle-interval model, p10-p90 rule; the validation is the section above "
            "when the run had --validation).", ""]
    return out


def _allreduce_tables(d: dict) -> list[str]:
    """Every standalone all-reduce message measured vs the model, and the
    in-step all-reduce durations per M."""
    ranks = d["ranks"]
    ws, tp = d["world_size"], d["tp"]
    out = ["## All-reduce per message (standalone, sum, bf16), us", "",
           f"Model: the {d['device_profile']} profile's `allreduce_us` at TP{tp} (the "
           f"idle interval of the single-GPU bench) and at TP{ws}. Measured: per-call "
           "median, median over ranks (max over ranks in brackets).", "",
           f"| bytes | tokens | model TP{tp} | model TP{ws} | eager | in graph | "
           f"graph / model TP{tp} |", "|---|---|---|---|---|---|---|"]
    rows: dict[int, list] = {}
    for r in ranks:
        for row in r["allreduce"]:
            rows.setdefault(row["bytes"], []).append(row)
    for b, rs in sorted(rows.items()):
        ea = [x["eager_us"]["median"] for x in rs]
        gr = [x["graph_us"]["median"] for x in rs if x.get("graph_us")]
        ratio = _med(gr) / rs[0]["model_us"] if gr and rs[0]["model_us"] else None
        out.append(f"| {b} | {rs[0]['tokens']} | {rs[0]['model_us']:.1f} | "
                   f"{rs[0]['model_ws_us']:.1f} | {_n(_med(ea))} [{_n(max(ea))}] | "
                   f"{_n(_med(gr))} [{_n(max(gr) if gr else None)}] | "
                   f"{_n(ratio, '.2f')} |")
    out += ["", "In-step all-reduce durations (timed graph, median over layers, "
            "median over ranks), us:", "",
            "| M | model TP" + str(tp) + " | none: attn / moe | compiled: attn / moe |",
            "|---|---|---|---|"]
    for M in map(str, d["tokens"]):
        cells = []
        for arm in ("none", "compiled"):
            v = [r["per_m"][M]["arms"][arm].get("timed", {}).get("collective_us", {})
                 for r in ranks]
            cells.append(" / ".join(
                _n(_med([(x.get(op) or {}).get("median") for x in v]))
                for op in ("attn.all_reduce", "moe.all_reduce")))
        out.append(f"| {M} | {ranks[0]['per_m'][M]['allreduce_model_us']:.1f} | "
                   + " | ".join(cells) + " |")
    out.append("")
    return out


def _fit_lines(d: dict, fit_max_bytes: int | None, fit_source: str) -> list[str]:
    """The collective-model fit of the measured all-reduces (not for a dry
    result), or why there is none."""
    if d["dry"]:
        return []
    try:
        m, pts, err = fit(d, "", max_bytes=fit_max_bytes, source=fit_source)
        return [f"Fit ({fit_source}, {len(pts)} messages up to "
                f"{pts[-1][0]} B): latency {m.latency_us:.2f} us + bytes / "
                f"{m.busbw_gbps:.1f} GB/s, max error {err:.1%} "
                f"(`--update-profile {d['device_profile']}` writes it as "
                f"[allreduce.tp{d['world_size']}]).", ""]
    except ValueError as e:
        return [f"No collective-model fit: {e}", ""]


def _fill_table(d: dict) -> list[str]:
    """Fill finish vs expert-stream start per M, rank and window (the
    compiled arm's timed graph)."""
    ranks = d["ranks"]
    out = ["## Fill finish vs expert-stream start (compiled arm, timed graph)", "",
           "Per window: fills, mean fill time (fork to fill-kernel exit, us), "
           "slack = the same layer's expert-stream start - fill exit (us; min / "
           "median; negative = the fill still ran when the experts began), fills "
           "that overlapped the experts.", "",
           "| M | rank | window | fills | fill us | slack min / median | overlapped |",
           "|---|---|---|---|---|---|---|"]
    for M in map(str, d["tokens"]):
        for r in ranks:
            fills = r["per_m"][M]["arms"]["compiled"].get("timed", {}).get("fills", [])
            by: dict[str, list] = {}
            for f in fills:
                by.setdefault(f["window"], []).append(f)
            for w, fs in sorted(by.items()):
                sl = [f["slack_us"] for f in fs if f["slack_us"] is not None]
                dur = statistics.mean(f["exit_us"] - f["fork_us"] for f in fs)
                out.append(f"| {M} | {r['rank']} | {w} | {len(fs)} | {dur:.1f} | "
                           f"{_n(min(sl) if sl else None, '+.1f')} / "
                           f"{_n(_med(sl), '+.1f')} | {sum(s < 0 for s in sl)} |")
    if not any(r["per_m"][M]["arms"]["compiled"].get("timed", {}).get("fills")
               for r in ranks for M in r["per_m"]):
        out.append("| - | - | no in-graph fill timing in this result | | | | |")
    return out


def _n(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)
