"""Predicted vs measured gain per arm and M of committed `bench run` or
`bench tp --validation` results,
with the device profile each result recorded (optionally a replacement
profile), scored by the validation rules (docs/lint.md#validation).

    python lab/experiments/model_recal.py RESULT.json.gz [...] [--profile TOML]
        (from the repository root, with l2sched importable: pip install -e .)
        [--terms-from NAME] [--controls CONTROLS_RESULT ...] [--json OUT]

``--terms-from NAME``: the recorded profile with the recalibration's two
numbers (``fill_slowdown_scale``, ``set_aside_stream_slowdown``) taken from
profile NAME (e.g. the shipped ``h200``), everything else as recorded.

``--controls R``: add to each arm's predicted gain the residual of its
dispatch control in result R (another run, made with ``--controls``;
docs/bench.md#dispatch-controls), linted with the same profile. Given more
than once: the mean residual over those runs (``pooled_control_residuals``).

Only the uncalibrated lint (the out-of-sample prediction) is computed; this is
the cheap part of `python -m lab bench report`. `python -m lab bench calibrate` fits the
two terms from one result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

# the lab is not installed: the repository root (two folders up) on sys.path
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from l2sched.bench import read_json_file  # noqa: E402
from lab.bench.calibrate_model import gain_rows, pooled_controls, recorded_profile  # noqa: E402
from lab.bench.validation import validate  # noqa: E402
from l2sched.errors import L2sError, L2sInputError  # noqa: E402
from l2sched.files import check_output_path, write_text_atomically  # noqa: E402
from l2sched.device import load_device  # noqa: E402

TERMS = ("fill_slowdown_scale", "set_aside_stream_slowdown")


def score(result: str, prof=None, terms_from=None, controls: list[str] | None = None) -> dict:
    """Validation figures of ``result`` linted with ``prof`` (default: the
    recorded profile), with the ``TERMS`` of profile ``terms_from`` if
    given, plus the mean dispatch-control residuals of the results
    ``controls`` if given."""
    d = read_json_file(result)
    if isinstance(d, dict) and d.get("dry"):
        raise L2sInputError(f"{result}: a --dry result has no CUDA-graph step times to score")
    if isinstance(d, dict) and d.get("kind") == "l2sched bench tp":
        return _score_tp(d, prof, terms_from, controls, result)
    prof = prof or recorded_profile(d, where=result)
    if terms_from is not None:
        prof = dataclasses.replace(prof, **{t: getattr(terms_from, t) for t in TERMS})
    ctl = pooled_controls(controls or [], prof, d, result)
    return validate(gain_rows(d, prof), ctl)


def _score_tp(d: dict, prof, terms_from, controls: list[str] | None, result: str) -> dict:
    """``score`` of a ``bench tp --validation`` result (``bench.tp_validation``:
    per-round maximum over ranks, the run's world-size all-reduce table)."""
    from lab.bench.tp_validation import lint_profile, run_predictor, validation
    prof = prof or lint_profile(d, result)[0]
    if terms_from is not None:
        prof = dataclasses.replace(prof, **{t: getattr(terms_from, t) for t in TERMS})
    ctl = pooled_controls(controls or [], prof, d, result)
    v = validation(d, run_predictor(d, prof), ctl)
    if "rows" not in v:  # no A/A arm: not a validation run
        raise ValueError(v["status"])
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--profile", default="")
    ap.add_argument("--terms-from", default="")
    ap.add_argument("--controls", action="append", default=[], metavar="RESULT",
                    help="a run made with --controls (another run than each scored one, "
                         "of the same kind): add each arm's dispatch-control residual to its "
                         "predicted gain (docs/bench.md#dispatch-controls); given more than "
                         "once, the mean residual over the runs")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    # never overwritten: the results, the controls and the profiles given as files
    inputs = list(a.results) + list(a.controls) + [p for p in (a.profile, a.terms_from)
                                                     if p and os.path.exists(p)]
    try:
        if a.json is not None:
            check_output_path(a.json, protect=inputs)
        prof = load_device(a.profile) if a.profile else None
        terms = load_device(a.terms_from) if a.terms_from else None
    except L2sError as e:
        print(f"model_recal: {e}", file=sys.stderr)
        return 1
    scores = {}
    for r in a.results:
        try:
            scores[r] = score(r, prof, terms, a.controls)
        except L2sError as e:
            print(f"model_recal: {e}", file=sys.stderr)
            return 1
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            print(f"model_recal: {r}: not a usable `l2sched bench run` or `bench tp "
                  f"--validation` result "
                  f"({type(e).__name__}: {e})", file=sys.stderr)
            return 1
    out = {}
    for r, v in scores.items():
        out[r] = v
        print(f"{r}: agreement {v['verdict_agreement']:.0%}, median |err| "
              f"{v['median_abs_gain_err_us']:.1f} us, Spearman {v['spearman']:.2f}"
              + (f" (with the {v['control_kind']} controls of {v['controls']})"
                 if v.get("controls") else ""))
        for row in v["rows"]:
            print(f"  {row['arm']:32s} M={row['M']:3d} pred {row['pred_gain_us']:+8.1f} "
                  f"meas {row['meas_gain_us']:+8.1f} {'ok' if row['agree'] else 'NO'}")
    if a.json is not None:
        write_text_atomically(a.json, json.dumps(out, indent=1), protect=inputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
