"""How far can any prediction agree with one validation run on this box?
Each run's schedule arms predicted by the mean of their measured gains in the
other runs ("leave one run out"), scored by the validation rules
(docs/lint.md#validation).

    python benchmarks/agreement_ceiling.py RUN.json.gz RUN.json.gz ... \\
        [--json-out OUT.json] [--md-out OUT.md]   (from the repository root)

RUN: `l2sched bench run --validation` results of the same arms on the same
box, each from its own process (at least 3). Why: the three-way verdict's
noise floor is an A/A comparison inside one run, but an arm's gain also moves
between runs (each process captures its CUDA graphs anew). A predictor that
knew each arm's mean gain over the other runs still misses where this run's
gain is off that mean by more than the floor; its agreement is the ceiling
the pass marks are read against. Also printed: per arm and M the spread
(sample standard deviation, us) of the measured gain over the runs.
Dispatch-control arms (``ctl-``) are left out, as in the validation.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, ".")
from l2sched.bench import read_json_file  # noqa: E402
from l2sched.bench.controls import is_control  # noqa: E402
from l2sched.bench.calibrate_model import measured_gain_rows, none_rounds  # noqa: E402
from l2sched.bench.validation import validate  # noqa: E402
from l2sched.bench.verdicts import is_schedule_arm  # noqa: E402
from l2sched.errors import L2sError  # noqa: E402
from l2sched.files import check_output_path  # noqa: E402
from probe_output import write_probe  # noqa: E402


def measured_rows(d, path: str) -> list[dict]:
    """``[{arm, M, floor_us, meas_gain_us}]`` of result ``d``'s schedule arms
    (no controls): gain = median untimed step of ``none`` minus the arm's
    (us), floor = the A/A floor of the same M. Raises ``L2sError`` naming
    ``path`` for anything but a `bench run --validation` result with GPU
    step times (a --dry one, no A/A arm, a field missing or mistyped, a
    gain that is not a finite number)."""
    if not isinstance(d, dict) or not isinstance(d.get("per_m"), dict):
        raise L2sError(f"{path}: not an `l2sched bench run` result")
    if d.get("dry"):
        raise L2sError(f"{path}: a --dry result has no CUDA-graph step times")
    try:
        names = [a["name"] for a in d.get("arms", []) if is_schedule_arm(a)
                 and not is_control(a["name"])]
        rows = measured_gain_rows(d, names)
    except L2sError as e:
        raise L2sError(f"{path}: {e}") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        raise L2sError(f"{path}: not a usable `bench run --validation` result ({why})") from None
    bad = next((r for r in rows if not math.isfinite(r["meas_gain_us"])), None)
    if bad is not None:
        raise L2sError(f"{path}: {bad['arm']} at M={bad['M']}: the gain is not a number")
    if not rows:
        raise L2sError(f"{path}: no schedule arm with step times")
    return rows


def check_same_arms(runs: dict[str, list[dict]], rounds: dict[str, tuple]) -> None:
    """Raise ``L2sError`` unless the runs are different runs (not one file
    under two names, not the same no-prefetch rounds) of the same (arm, M)
    pairs: a run counted twice, or arms only some runs have, would bias the
    ceiling."""
    seen: dict = {}
    for name, key in rounds.items():
        if key in seen:
            raise L2sError(f"{name}: the same run as {seen[key]} (the same no-prefetch rounds)")
        seen[key] = name
    first, want = None, None
    for name, rows in runs.items():
        got = {(r["arm"], r["M"]) for r in rows}
        if want is None:
            first, want = name, got
        elif got != want:
            arm, M = sorted(got ^ want)[0]
            raise L2sError(f"{name}: other arms or M than {first} (first: {arm} at M={M}, "
                           "which one of them lacks): compare runs of the same arms")


def ceiling(runs: dict[str, list[dict]]) -> dict:
    """Per run (``{name: measured_rows}``), the validation figures of the
    leave-one-run-out prediction, and per (arm, M) the spread of the
    measured gain over all runs."""
    gains: dict = {}
    for name, rows in runs.items():
        for r in rows:
            gains.setdefault((r["arm"], r["M"]), {})[name] = r["meas_gain_us"]
    out = {}
    for name, rows in runs.items():
        pred = []
        for r in rows:
            others = [g for o, g in gains[(r["arm"], r["M"])].items() if o != name]
            if others:
                pred.append({**r, "pred_gain_us": statistics.fmean(others)})
        out[name] = validate(pred)
    spread = {f"{a}@{M}": statistics.stdev(g.values()) for (a, M), g in gains.items()
              if len(g) >= 2}
    floors = [r["floor_us"] for rows in runs.values() for r in rows]
    return {"runs": out, "spread_us": spread,
            "median_spread_us": statistics.median(spread.values()) if spread else None,
            "median_floor_us": statistics.median(floors) if floors else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json-out", default="/dev/null")
    ap.add_argument("--md-out", default="")
    args = ap.parse_args(argv)
    if len({os.path.realpath(p) for p in args.runs}) < 3:
        ap.error("give at least 3 different runs (each is predicted from the others)")
    try:
        for out in (args.json_out, args.md_out):  # before any work; never onto an input
            if out and out != "/dev/null":
                check_output_path(out, protect=args.runs)
        runs, rounds = {}, {}
        for p in args.runs:
            d = read_json_file(p)
            runs[p] = measured_rows(d, p)
            rounds[p] = none_rounds(d)
        check_same_arms(runs, rounds)
        got = ceiling(runs)
    except L2sError as e:
        sys.exit(f"agreement_ceiling: {e}")
    command = " ".join(["python", "benchmarks/agreement_ceiling.py",
                        *(sys.argv[1:] if argv is None else argv)])
    lines = ["# Leave-one-run-out ceiling of the three-way verdict agreement", "",
             f"Command: `{command}`", "",
             "Each run's arms predicted by the mean of their measured gains in the other runs; "
             "the validation rules (A/A floor of the run itself). Median spread of an arm's gain "
             f"over the runs: {got['median_spread_us']:.1f} us; median A/A floor "
             f"{got['median_floor_us']:.1f} us.", "",
             "| run | rows | agreement | median \\|error\\| us | Spearman |", "|---|---|---|---|---|"]
    for name, v in got["runs"].items():
        sp = "-" if v["spearman"] is None else f"{v['spearman']:.3f}"
        lines.append(f"| {os.path.basename(name)} | {v['n']} | {v['verdict_agreement']:.0%} | "
                     f"{v['median_abs_gain_err_us']:.1f} | {sp} |")
    worst = sorted(got["spread_us"].items(), key=lambda kv: -kv[1])[:8]
    lines += ["", "Largest spreads (us): " + ", ".join(f"{k} {s:.1f}" for k, s in worst) + "."]
    try:
        write_probe({"runs": {k: {x: y for x, y in v.items() if x != "rows"}
                              for k, v in got["runs"].items()},
                     "spread_us": got["spread_us"], "median_spread_us": got["median_spread_us"],
                     "median_floor_us": got["median_floor_us"], "command": command},
                    lines, args.json_out, args.md_out)
    except L2sError as e:
        sys.exit(f"agreement_ceiling: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
