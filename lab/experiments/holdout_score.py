"""Issue 45, item 5: score one validation run's predictions in two groups.

Reads the validation rows of one run: one per scored arm and M, each with
``pred_gain_us``, ``meas_gain_us`` and ``floor_us`` (the A/A floor of that
M), all us, from the JSON of ``python -m lab bench report`` or of
``lab/experiments/model_recal.py --json`` (a run linted with another profile
than the one it recorded). It splits the rows into
the fitted schedule with its perturbations and the held-out shapes (arms
``bench/<file>`` of ``--bench-dir benchmarks/holdout45``). Per group and
overall: pairs, three-way agreement, median |predicted - measured| gain,
Spearman, and the pairs *predicted faster and measured slower beyond the
floor*, the issue's marks (benchmarks/holdout45/README.md, written before
the run)::

    python -m lab.experiments.holdout_score report.json -o score.json --md-output score.md

Writes JSON and markdown (``probe_output.write_probe``) and prints the
markdown.
"""

from __future__ import annotations

import argparse
import json
import sys

from lab.bench.validation import validate
from lab.experiments.probe_output import write_probe

#: Arms of ``--bench-dir benchmarks/holdout45`` start with this.
HELD_OUT_PREFIX = "bench/ho"
#: The marks written before the run (benchmarks/holdout45/README.md): the
#: most "predicted faster, measured slower" pairs allowed per group (the
#: held-out group: 1 in 10 of its pairs, rounded down), and ours over all
#: pairs.
MARKS = {"fitted_wrong_way": 0, "held_out_wrong_way_share": 0.1,
         "median_abs_err_us": 40.0, "spearman": 0.8}


def wrong_way(row: dict) -> bool:
    """True if ``row`` was predicted faster and measured slower, each beyond
    its floor (``validation.three_way``'s verdicts)."""
    return row["pred_verdict"] == "faster" and row["meas_verdict"] == "slower"


def group_figures(rows: list[dict]) -> dict:
    """``validation.validate``'s figures of ``rows`` plus ``wrong_way``: the
    ``(arm, M)`` pairs predicted faster and measured slower."""
    v = validate([dict(r) for r in rows])
    return {"n": v["n"], "verdict_agreement": v["verdict_agreement"],
            "median_abs_gain_err_us": v["median_abs_gain_err_us"],
            "spearman": v["spearman"],
            "wrong_way": [[r["arm"], r["M"]] for r in v["rows"] if wrong_way(r)],
            "rows": v["rows"]}


def rows_of(scored: dict) -> list[dict]:
    """The validation rows of ``python -m lab bench report``'s JSON
    (``validation.rows``) or of ``lab/experiments/model_recal.py --json``
    (one result: ``{RESULT: {rows, ...}}``). Raises ``KeyError`` for
    neither, ``ValueError`` for a model_recal file of several results."""
    if "validation" in scored:
        return scored["validation"]["rows"]
    if len(scored) != 1:
        raise ValueError(f"{len(scored)} results in one model_recal file: score one")
    return next(iter(scored.values()))["rows"]


def score(report: dict) -> dict:
    """The two groups and all rows of a ``bench report`` JSON ``report``,
    and which marks are met. Raises ``KeyError`` for a report without
    ``validation.rows`` (a run with no A/A arm)."""
    rows = rows_of(report)
    held = [r for r in rows if r["arm"].startswith(HELD_OUT_PREFIX)]
    fitted = [r for r in rows if not r["arm"].startswith(HELD_OUT_PREFIX)]
    out = {"fitted": group_figures(fitted), "held_out": group_figures(held),
           "all": group_figures(rows), "marks": dict(MARKS)}
    allowed = int(MARKS["held_out_wrong_way_share"] * out["held_out"]["n"])
    a = out["all"]
    out["met"] = {
        "fitted_wrong_way": len(out["fitted"]["wrong_way"]) <= MARKS["fitted_wrong_way"],
        "held_out_wrong_way": len(out["held_out"]["wrong_way"]) <= allowed,
        "median_abs_err_us": a["median_abs_gain_err_us"] is not None
        and a["median_abs_gain_err_us"] <= MARKS["median_abs_err_us"],
        "spearman": a["spearman"] is not None and a["spearman"] >= MARKS["spearman"]}
    out["held_out_allowed"] = allowed
    return out


def markdown(s: dict) -> list[str]:
    """Markdown lines: one row per group, then every scored pair."""
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    lines = ["| group | pairs | agreement | median abs error, us | Spearman | predicted faster, "
             "measured slower |", "|---|---|---|---|---|---|"]
    for g in ("fitted", "held_out", "all"):
        f = s[g]
        ww = ", ".join(f"{a} M={m}" for a, m in f["wrong_way"]) or "none"
        lines.append(f"| {g} | {f['n']} | {num(f['verdict_agreement'], '.0%')} | "
                     f"{num(f['median_abs_gain_err_us'], '.1f')} | {num(f['spearman'], '.2f')} | "
                     f"{len(f['wrong_way'])}: {ww} |")
    lines += ["", "Marks: " + ", ".join(f"{k} {'met' if v else 'MISSED'}"
                                        for k, v in s["met"].items())
              + f" (held-out pairs allowed the wrong way: {s['held_out_allowed']})", "",
              "| arm | M | floor, us | predicted, us | measured, us | verdicts |",
              "|---|---|---|---|---|---|"]
    for r in sorted(s["all"]["rows"], key=lambda r: (r["arm"], r["M"])):
        lines.append(f"| {r['arm']} | {r['M']} | {r['floor_us']:.1f} | {r['pred_gain_us']:+.1f} "
                     f"| {r['meas_gain_us']:+.1f} | {r['pred_verdict']} / {r['meas_verdict']} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="`python -m lab bench report` JSON (--json-out) or "
                                   "`model_recal.py --json` of one result")
    ap.add_argument("-o", "--output", default="holdout-score.json", help="JSON written")
    ap.add_argument("--md-output", default="", help="markdown written (default: none)")
    a = ap.parse_args(argv)
    try:
        with open(a.report, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        print(f"holdout_score: {a.report}: {e}", file=sys.stderr)
        return 1
    try:
        s = score(report)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        print(f"{a.report}: no validation rows ({type(e).__name__}: {e}): score one run "
              f"with an A/A arm", file=sys.stderr)
        return 1
    write_probe(s, markdown(s), a.output, a.md_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
