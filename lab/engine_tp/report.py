"""The TP-emulation run's report (``session report DIR``): the start-up A/B
lines of ``serve.log`` (or ``serve-verify.log``), and per M the engine's
gain (``verify.json``), the bench step's gain for the same schedule
(``bench.json``) and their ratio, judged against ``session.THRESHOLDS``.
Writes ``DIR/report.json`` and ``DIR/report.md`` and prints the markdown.
Units: us per decode step, gain = no prefetch minus prefetch (+ = faster)."""

from __future__ import annotations

import json
import re
from pathlib import Path

#: The plugin's log lines kept in the report (auto's choice, the start-up
#: A/B, any prefetch OFF, the emulation plugin's own lines).
LOG_LINE = re.compile(r"(l2sched: .*|l2sched_lab_engine_tp: .*)$")


def log_lines(path: Path) -> list[str]:
    """The ``l2sched:`` / ``l2sched_lab_engine_tp:`` lines of a log (empty
    when the file is missing), each once, in order."""
    if not path.exists():
        return []
    seen, out = set(), []
    for line in path.read_text(errors="replace").splitlines():
        m = LOG_LINE.search(line)
        if m and m.group(1) not in seen:
            seen.add(m.group(1))
            out.append(m.group(1))
    return out


def _median(stats) -> float | None:
    return None if not stats else stats.get("median")


def bench_gains(bench: dict) -> dict:
    """``{M: {gain_us, aa_us}}`` of a ``bench run`` result: the ``none``
    arm's median graph step minus the ``compiled`` arm's, and minus the
    A/A arm's (``none-aa``)."""
    out = {}
    for m, rec in (bench.get("per_m") or {}).items():
        arms = rec.get("arms", {})
        none = _median(arms.get("none", {}).get("graph_step_us"))
        arm = _median(arms.get("compiled", {}).get("graph_step_us"))
        aa = _median(arms.get("none-aa", {}).get("graph_step_us"))
        out[int(m)] = {"gain_us": None if none is None or arm is None else none - arm,
                       "aa_us": None if none is None or aa is None else none - aa,
                       "none_us": none}
    return out


def rows(verify: dict, bench: dict, ratio_min: float) -> list[dict]:
    """One row per M of the verify report: engine gain and noise, bench gain
    and A/A, ratio engine / bench, and whether the ratio meets ``ratio_min``
    (None where a gain is missing or the bench gain is not positive)."""
    bg = bench_gains(bench)
    out = []
    for b in verify.get("batches", []):
        m = int(b["batch"])
        eng = _median(b.get("gain_us"))
        bench_m = bg.get(m, {})
        bgain = bench_m.get("gain_us")
        ratio = eng / bgain if eng is not None and bgain and bgain > 0 else None
        out.append({"M": m, "engine_gain_us": eng, "engine_noise_us": b.get("noise_us"),
                    "engine_off_us": _median(b.get("off_us")),
                    "verdict": b.get("verdict"), "tokens_equal": b.get("tokens_equal"),
                    "bench_gain_us": bgain, "bench_aa_us": bench_m.get("aa_us"),
                    "bench_none_us": bench_m.get("none_us"), "ratio": ratio,
                    "meets": None if ratio is None else ratio >= ratio_min})
    return out


def _f(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def write_report(d: Path) -> int:
    """Write ``d/report.json`` and ``d/report.md`` from what the steps left
    in ``d``; returns 0 when every threshold was met, 1 otherwise (and 1,
    writing nothing, when no step measured anything yet)."""
    from lab.engine_tp.session import THRESHOLDS

    def load(name):
        p = d / name
        return json.loads(p.read_text()) if p.exists() else {}

    if not (d / "verify.json").exists() and not (d / "bench.json").exists():
        print(f"session report: {d} has no verify.json nor bench.json: run the serve-verify "
              "(or verify) and bench steps first; nothing written")
        return 1
    verify, bench = load("verify.json"), load("bench.json")
    # serve-verify starts one engine for both steps: its log has both
    one = d / "serve-verify.log"
    startup = log_lines(one if one.exists() else d / "serve.log")
    verify_lines = log_lines(one if one.exists() else d / "verify.log")
    table = rows(verify, bench, THRESHOLDS["engine_vs_bench"])
    kept_on = any("prefetch ON: measured gain" in ln for ln in startup)
    turned_off = any("prefetch OFF" in ln for ln in startup)
    tokens = bool(table) and all(r["tokens_equal"] for r in table)
    ratio_ok = bool(table) and all(r["meets"] for r in table)
    verdicts = {"startup_keeps_on": kept_on and not turned_off,
                "engine_vs_bench": ratio_ok, "tokens_equal": tokens}
    summary = {"thresholds": THRESHOLDS, "verdicts": verdicts, "startup_lines": startup,
               "verify_lines": verify_lines, "rows": table,
               "spec": load("spec.json").get("layers"), "spin_fill": load("spin-fill.json")}
    (d / "report.json").write_text(json.dumps(summary, indent=1))
    md = ["# TP emulation in vLLM's engine: engine gain vs bench gain", "",
          "Gain = no prefetch - prefetch, us per decode step (+ = faster). Engine: "
          "`l2sched verify` (graph replays, prefetch switched in one engine). Bench: "
          "`l2sched bench run`, the same schedule and profile.", "",
          "| M | engine gain | engine noise | verdict | tokens equal | bench gain | bench A/A "
          "| ratio | >= {:.0%} |".format(THRESHOLDS["engine_vs_bench"]),
          "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        md.append(f"| {r['M']} | {_f(r['engine_gain_us'])} | {_f(r['engine_noise_us'])} | "
                  f"{r['verdict']} | {r['tokens_equal']} | {_f(r['bench_gain_us'])} | "
                  f"{_f(r['bench_aa_us'])} | {_f(r['ratio'], '.2f')} | {r['meets']} |")
    md += ["", "## Thresholds (written before the runs)", ""]
    md += [f"- {k}: {THRESHOLDS[k]} -> **{'met' if v else 'missed'}**"
           for k, v in verdicts.items()]
    md += ["", "## Start-up lines", ""] + [f"    {ln}" for ln in startup]
    (d / "report.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if all(verdicts.values()) else 1
