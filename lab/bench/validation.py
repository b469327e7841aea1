"""Out-of-sample validation of the lint's predicted step-time gains.

The rules are written down in docs/lint.md#validation before any validation
run; this module implements them and nothing else:

- The prediction comes from a device profile measured by ``l2sched
  profile`` in a different run than the decode step it predicts; the
  decode step's own arms never feed the model (no calibration on them).
- Gain of an arm at M (us, positive = faster): median step time of the
  no-prefetch arm minus the arm's median (untimed CUDA-graph replays).
- Noise floor at M (us): from the A/A comparison of the same run (the
  no-prefetch step captured twice, ``none`` and ``none-aa``, replayed
  interleaved in the same rounds). The rounds are resampled with
  replacement (``AA_BOOTSTRAP`` samples, fixed seed); the floor is the
  ``AA_QUANTILE`` quantile of |median(none) - median(none-aa)| over the
  resamples, never below ``AA_MIN_FLOOR_US``.
- Three-way verdict of a gain g against the floor f: ``faster`` if g > f,
  ``slower`` if g < -f, else ``same``; the same rule for the predicted and
  the measured gain.
- Figures over all (arm, M) pairs of the schedule arms: the share of
  pairs whose verdicts agree, the median |predicted - measured| gain, and
  Spearman's rank correlation of predicted vs measured gain (ties get the
  mean rank). ``THRESHOLDS`` are the pass marks.

Units: us.
"""

from __future__ import annotations

import statistics

from lab.bench.controls import kind_of, validation_rows, with_controls
# the A/A floor's rule lives with the product's noise floors (the profile's
# fill_fork probe uses it too); re-exported for the lab's reports
from l2sched.lint.noise import (AA_BOOTSTRAP, AA_MIN_FLOOR_US,  # noqa: F401
                                AA_QUANTILE, aa_noise_floor)

#: Pass marks, written down in docs/lint.md#validation before the first
#: validation run (issue 14): verdict agreement share, median |gain error|
#: (us), Spearman rank correlation.
THRESHOLDS = {"verdict_agreement": 0.90, "median_abs_gain_err_us": 25.0, "spearman": 0.8}


def three_way(gain_us: float, floor_us: float) -> str:
    """``faster`` / ``same`` / ``slower`` for a gain (us, positive = the
    step got faster) against the noise floor (us)."""
    if gain_us > floor_us:
        return "faster"
    if gain_us < -floor_us:
        return "slower"
    return "same"


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation of paired values (ties: mean rank);
    None with fewer than 3 pairs or when either side is constant."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(list(xs)), _ranks(list(ys))
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        return None
    return statistics.correlation(rx, ry)


def validate(rows: list[dict], controls: tuple | None = None) -> dict:
    """Score predictions. ``rows``: one dict per (arm, M) with ``arm``,
    ``M``, ``pred_gain_us``, ``meas_gain_us``, ``floor_us``. Adds
    ``pred_verdict``, ``meas_verdict``, ``agree`` and ``gain_err_us``
    (predicted - measured) to each row and returns ``{rows, n,
    verdict_agreement, median_abs_gain_err_us, spearman, spearman_per_m,
    thresholds, met}``; a figure that cannot be computed is None and not
    met. Rows of dispatch-control arms (``controls.is_control``) are left
    out: a control is a reference, not a schedule. ``controls``:
    ``(residuals, path)`` of a controls run, added to every prediction
    first (``controls.with_controls``: raises ``L2sError`` for an arm
    without one); the result's ``controls`` is that path and
    ``control_kind`` the kind of its controls (else None)."""
    rows = validation_rows(rows) if controls is None else with_controls(rows, *controls)
    for r in rows:
        r["pred_verdict"] = three_way(r["pred_gain_us"], r["floor_us"])
        r["meas_verdict"] = three_way(r["meas_gain_us"], r["floor_us"])
        r["agree"] = r["pred_verdict"] == r["meas_verdict"]
        r["gain_err_us"] = r["pred_gain_us"] - r["meas_gain_us"]
    n = len(rows)
    fig = {
        "verdict_agreement": sum(r["agree"] for r in rows) / n if n else None,
        "median_abs_gain_err_us": (statistics.median(abs(r["gain_err_us"]) for r in rows)
                                   if n else None),
        "spearman": spearman([r["pred_gain_us"] for r in rows],
                             [r["meas_gain_us"] for r in rows]),
    }
    met = {
        "verdict_agreement": fig["verdict_agreement"] is not None
        and fig["verdict_agreement"] >= THRESHOLDS["verdict_agreement"],
        "median_abs_gain_err_us": fig["median_abs_gain_err_us"] is not None
        and fig["median_abs_gain_err_us"] <= THRESHOLDS["median_abs_gain_err_us"],
        "spearman": fig["spearman"] is not None and fig["spearman"] >= THRESHOLDS["spearman"],
    }
    per_m: dict = {}
    for r in rows:
        per_m.setdefault(str(r["M"]), ([], []))
        per_m[str(r["M"])][0].append(r["pred_gain_us"])
        per_m[str(r["M"])][1].append(r["meas_gain_us"])
    return {"rows": rows, "n": n, **fig, "controls": controls and controls[1],
            "control_kind": controls and kind_of(controls[0]),
            "spearman_per_m": {M: spearman(p, m) for M, (p, m) in per_m.items()},
            "thresholds": dict(THRESHOLDS), "met": met}
