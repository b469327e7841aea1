"""How far can any prediction agree with one validation run on this box?
Each run's schedule arms predicted by the mean of their measured gains in the
other runs ("leave one run out"), scored by the validation rules
(docs/lint.md#validation).

    python lab/experiments/agreement_ceiling.py RUN.json.gz RUN.json.gz ... \\
        [--replays N,N,...] [--json-out OUT.json] [--md-out OUT.md]
        (from the repository root)

RUN: `python -m lab bench run --validation` results of the same arms on the same
box, each from its own process (at least 3). Why: the three-way verdict's
noise floor is an A/A comparison inside one run, but an arm's gain also moves
between runs (each process captures its CUDA graphs anew). A predictor that
knew each arm's mean gain over the other runs still misses where this run's
gain is off that mean by more than the floor; its agreement is the ceiling
the pass marks are read against. Also printed: per arm and M the spread
(sample standard deviation, us) of the measured gain over the runs.
Dispatch-control arms (``ctl-``) are left out, as in the validation.

``--replays N,...``: the agreement to expect in a run of N replays
(``simulated_ceiling``), from each (arm, M)'s mean and spread over the runs,
with the spread and the A/A floor scaled by sqrt(the runs' replays / N): an
upper bound on what more replays buy, right only where the spread between runs
is the sampling noise of their replays (on the lent H200 it is not:
benchmarks/results/h200-2026-12-02-replays.md).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.bench import read_json_file  # noqa: E402
from l2sched.bench.controls import is_control  # noqa: E402
from lab.bench.calibrate_model import measured_gain_rows, none_rounds  # noqa: E402
from lab.bench.validation import (  # noqa: E402
    AA_MIN_FLOOR_US,
    THRESHOLDS,
    three_way,
    validate,
)
from lab.bench.verdicts import is_schedule_arm  # noqa: E402
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


#: Monte-Carlo draws of ``simulated_ceiling`` (fixed seed): its shares are
#: then good to about +-2.5 points.
DRAWS = 400


def simulated_ceiling(runs: dict[str, list[dict]], run_replays: int, replays: int,
                      draws: int = DRAWS, seed: int = 0) -> dict:
    """The three-way agreement to expect in one run of ``replays`` replays,
    from runs (``{name: measured_rows}``) of ``run_replays`` replays each.
    Per (arm, M): the mean gain over the runs is taken as the truth, the
    spread (sample standard deviation over the runs, us) as one run's noise;
    a simulated run measures truth + normal noise of that spread times
    sqrt(run_replays / replays), with each M's floor the median over the runs
    of its A/A floor times the same factor (at least ``AA_MIN_FLOOR_US``, as
    ``validation.aa_noise_floor`` keeps it). Two predictors are scored with
    the validation's ``three_way`` rule: ``perfect`` (the truth) and
    ``runs_mean`` (the mean over the runs, off the truth by spread /
    sqrt(number of runs)). Returns per predictor ``{mean, p10, p_mark,
    median_abs_err_us}`` over ``draws`` draws (``p_mark``: the share of
    draws at or above the agreement mark) and the floors used (us).
    Assumes the spread is sampling noise (it shrinks as 1/sqrt(replays));
    a run-to-run part that does not makes the figures too high (so on the
    H200: an 80-replay run's floors and spread were those of 25 replays,
    benchmarks/results/h200-2026-12-02-replays.md).
    Raises ``L2sError`` for fewer than 2 runs or replays < 1."""
    import random
    if len(runs) < 2 or replays < 1 or run_replays < 1:
        raise L2sError("a simulated ceiling needs at least 2 runs and replays >= 1")
    gains: dict = {}
    floors: dict = {}
    for name, rows in runs.items():
        for r in rows:
            gains.setdefault((r["arm"], r["M"]), []).append(r["meas_gain_us"])
            floors.setdefault(r["M"], {})[name] = r["floor_us"]  # one per run and M
    f = math.sqrt(run_replays / replays)
    floor = {M: max(AA_MIN_FLOOR_US, statistics.median(v.values()) * f)
             for M, v in floors.items()}
    cells = [(statistics.fmean(g), statistics.stdev(g), floor[M])
             for (_, M), g in sorted(gains.items())]
    rng = random.Random(seed)
    n_runs = len(runs)
    got: dict = {"perfect": [], "runs_mean": []}
    errs: dict = {"perfect": [], "runs_mean": []}
    for _ in range(draws):
        ok = {"perfect": 0, "runs_mean": 0}
        err: dict = {"perfect": [], "runs_mean": []}
        for mean, sd, fl in cells:
            meas = mean + rng.gauss(0.0, sd * f)
            for name, pred in (("perfect", mean),
                               ("runs_mean", mean + rng.gauss(0.0, sd / math.sqrt(n_runs)))):
                ok[name] += three_way(pred, fl) == three_way(meas, fl)
                err[name].append(abs(pred - meas))
        for name in got:
            got[name].append(ok[name] / len(cells))
            errs[name].append(statistics.median(err[name]))
    mark = THRESHOLDS["verdict_agreement"]
    out = {}
    for name, acc in got.items():
        acc.sort()
        out[name] = {"mean": statistics.fmean(acc), "p10": acc[len(acc) // 10],
                     "p_mark": sum(a >= mark - 1e-12 for a in acc) / len(acc),
                     "median_abs_err_us": statistics.fmean(errs[name])}
    return {"replays": replays, "run_replays": run_replays, "draws": draws,
            "floor_us": {str(M): v for M, v in sorted(floor.items())}, **out}


def run_replays_of(ds: dict[str, dict]) -> int:
    """The replays of the runs (``{path: result}``), which must be the
    same for all: ``L2sError`` naming the first run that differs."""
    first = None
    for path, d in ds.items():
        n = d.get("replays")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise L2sError(f"{path}: 'replays' is {n!r:.20}, not a replay count")
        if first is None:
            first = (path, n)
        elif n != first[1]:
            raise L2sError(f"{path}: {n} replays, {first[0]} {first[1]}: simulate from runs of "
                           "one replay count")
    return first[1]


#: Largest ``--replays`` count: far above any bench run's (a device call
#: ran 80); a larger one is a typo.
MAX_REPLAYS = 100_000


def _replay_counts(text: str) -> list[int]:
    """``--replays``' value: comma-separated counts 1..``MAX_REPLAYS``
    (ASCII digits), each once."""
    items = text.split(",")
    if not all(re.fullmatch(r"[1-9][0-9]{0,5}", x) and int(x) <= MAX_REPLAYS for x in items) \
            or len(set(items)) < len(items):
        raise argparse.ArgumentTypeError(
            f"expected distinct replay counts in 1..{MAX_REPLAYS} such as 25,80, got "
            f"{text!r:.40}")
    return [int(x) for x in items]


def _table_names(paths: list[str]) -> dict[str, str]:
    """How each run is named in the markdown table: its file name, or its
    path where two runs share a file name; ``|`` and backticks escaped."""
    base = [os.path.basename(p) for p in paths]
    return {p: (b if base.count(b) == 1 else p).replace("|", "\\|").replace("`", "\\`")
            for p, b in zip(paths, base)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--replays", type=_replay_counts, default=[],
                    help="also simulate the ceiling in runs of these replay counts (e.g. 25,80)")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--md-out", default=None)
    args = ap.parse_args(argv)
    real = [os.path.realpath(p) for p in args.runs]
    if len(set(real)) < 3:
        ap.error("give at least 3 different runs (each is predicted from the others)")
    try:
        twice = next((p for i, p in enumerate(args.runs) if real[i] in real[:i]), None)
        if twice is not None:
            raise L2sError(f"{twice}: given twice (each run counts once)")
        targets: dict = {}
        for out in (args.json_out, args.md_out):  # before any work; never onto an input
            if out is not None:
                shown, target = check_output_path(out, protect=args.runs)
                if target in targets:
                    raise L2sError(f"{shown}: --json-out and --md-out are the same file")
                targets[target] = shown
        runs, rounds, ds = {}, {}, {}
        for p in args.runs:
            ds[p] = d = read_json_file(p)
            runs[p] = measured_rows(d, p)
            rounds[p] = none_rounds(d)
        check_same_arms(runs, rounds)
        got = ceiling(runs)
        sims = []
        if args.replays:
            each = run_replays_of(ds)
            sims = [simulated_ceiling(runs, each, n) for n in args.replays]
    except L2sError as e:
        sys.exit(f"agreement_ceiling: {e}")
    command = shlex.join(["python", "lab/experiments/agreement_ceiling.py",
                          *(sys.argv[1:] if argv is None else argv)])
    lines = ["# Leave-one-run-out ceiling of the three-way verdict agreement", "",
             f"Command: `{command}`", "",
             "Each run's arms predicted by the mean of their measured gains in the other runs; "
             "the validation rules (A/A floor of the run itself). Median spread of an arm's gain "
             f"over the runs: {got['median_spread_us']:.1f} us; median A/A floor "
             f"{got['median_floor_us']:.1f} us.", "",
             "| run | rows | agreement | median \\|error\\| us | Spearman |", "|---|---|---|---|---|"]
    names = _table_names(list(got["runs"]))
    for name, v in got["runs"].items():
        sp = "-" if v["spearman"] is None else f"{v['spearman']:.3f}"
        lines.append(f"| {names[name]} | {v['n']} | {v['verdict_agreement']:.0%} | "
                     f"{v['median_abs_gain_err_us']:.1f} | {sp} |")
    worst = sorted(got["spread_us"].items(), key=lambda kv: -kv[1])[:8]
    lines += ["", "Largest spreads (us): " + ", ".join(f"{k} {s:.1f}" for k, s in worst) + "."]
    if sims:
        mark = THRESHOLDS["verdict_agreement"]
        lines += ["", f"## Expected agreement in a run of N replays ({DRAWS} simulated runs)", "",
                  f"Each (arm, M)'s mean gain over these runs as the truth, its spread over them "
                  f"times sqrt({sims[0]['run_replays']} / N) as a run's noise, each M's median A/A "
                  "floor scaled alike (`simulated_ceiling`). `perfect`: a predictor that knows "
                  "the truth; `mean of runs`: the mean over these runs.", "",
                  f"| N | floors us (M = {' / '.join(sims[0]['floor_us'])}) | perfect: mean / "
                  "p10 / share >= "
                  f"{mark:.0%} | mean of runs: mean / p10 / share >= {mark:.0%} | "
                  "mean of runs: median \\|error\\| us |", "|---|---|---|---|---|"]
        for s in sims:
            fl = " / ".join(f"{v:.1f}" for v in s["floor_us"].values())
            cells = [f"{s[k]['mean']:.1%} / {s[k]['p10']:.1%} / {s[k]['p_mark']:.0%}"
                     for k in ("perfect", "runs_mean")]
            lines.append(f"| {s['replays']} | {fl} | {cells[0]} | {cells[1]} | "
                         f"{s['runs_mean']['median_abs_err_us']:.1f} |")
    try:
        write_probe({"runs": {k: {x: y for x, y in v.items() if x != "rows"}
                              for k, v in got["runs"].items()},
                     "spread_us": got["spread_us"], "median_spread_us": got["median_spread_us"],
                     "median_floor_us": got["median_floor_us"], "simulated": sims,
                     "command": command},
                    lines, args.json_out or "/dev/null", args.md_out or "")
    except L2sError as e:
        sys.exit(f"agreement_ceiling: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
