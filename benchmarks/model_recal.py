"""Predicted vs measured gain per arm and M of committed `bench run` results,
with the device profile each result recorded (optionally a replacement
profile), scored by the validation rules (docs/lint.md#validation).

    python benchmarks/model_recal.py RESULT.json.gz [...] [--profile TOML]
        [--terms-from NAME] [--json OUT]

``--terms-from NAME``: the recorded profile with the recalibration's two
numbers (``fill_slowdown_scale``, ``set_aside_stream_slowdown``) taken from
profile NAME (e.g. the shipped ``h200``), everything else as recorded.

Only the uncalibrated lint (the out-of-sample prediction) is computed; this is
the cheap part of `l2sched bench report`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from l2sched.bench import read_json_file
from l2sched.bench.arms import arm_schedule
from l2sched.bench.validation import AA_ARM, aa_noise_floor, validate
from l2sched.bench.verdicts import is_schedule_arm
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.model.devices import load_device
from l2sched.model.inventory import analytical_inventory


def recorded_profile(d: dict):
    """The device profile recorded in result ``d``."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "h200.toml"
        p.write_text(d["device_profile_toml"], encoding="utf-8")
        return load_device(str(p))


TERMS = ("fill_slowdown_scale", "set_aside_stream_slowdown")


def score(result: str, prof=None, terms_from=None) -> dict:
    """Validation figures of ``result`` linted with ``prof`` (default: the
    recorded profile), with the ``TERMS`` of profile ``terms_from`` if
    given."""
    d = read_json_file(result)
    prof = prof or recorded_profile(d)
    if terms_from is not None:
        prof = dataclasses.replace(prof, **{t: getattr(terms_from, t) for t in TERMS})
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    scheds = {a["name"]: arm_schedule(a) for a in d["arms"]
              if a["path"] and is_schedule_arm(a)}
    rows = []
    for M, m in d["per_m"].items():
        arms = m["arms"]
        floor = aa_noise_floor(arms["none"]["graph_step_us_all"],
                               arms[AA_ARM]["graph_step_us_all"])
        none = arms["none"]["graph_step_us"]["median"]
        for name, sched in scheds.items():
            if name not in arms:
                continue
            lr = run_lint(sched, inv, device=prof, tokens=int(M), model_config=cfg)
            pred = lr.step_period("base") - lr.step_period("sim")
            rows.append({"arm": name, "M": int(M), "floor_us": floor,
                         "pred_gain_us": pred,
                         "meas_gain_us": none - arms[name]["graph_step_us"]["median"]})
    return validate(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--profile", default="")
    ap.add_argument("--terms-from", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    prof = load_device(a.profile) if a.profile else None
    out = {}
    for r in a.results:
        v = score(r, prof, load_device(a.terms_from) if a.terms_from else None)
        out[r] = v
        print(f"{r}: agreement {v['verdict_agreement']:.0%}, median |err| "
              f"{v['median_abs_gain_err_us']:.1f} us, Spearman {v['spearman']:.2f}")
        for row in v["rows"]:
            print(f"  {row['arm']:32s} M={row['M']:3d} pred {row['pred_gain_us']:+8.1f} "
                  f"meas {row['meas_gain_us']:+8.1f} {'ok' if row['agree'] else 'NO'}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
