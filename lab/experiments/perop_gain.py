"""Where a schedule's step gain comes from, per op: measured vs the lint's.

For one arm of a ``bench run`` result that kept its per-op records (the
untrimmed JSON), per M: the saving of every main-stream op name summed over
the layers, measured (``none``'s op durations minus the arm's, us) and
predicted (the lint's no-prefetch simulation minus its prefetch simulation,
the same op durations, with the run's idle-interval all-reduces and the
profile given), sorted by the size of the miss::

    python lab/experiments/perop_gain.py RESULT.json[.gz] --profile P.toml \\
        [--arm compiled] [--tokens 1,64] [--top 14] -o OUT.json --md-output OUT.md

Prints the markdown. Units: us per decode step, + = the arm is faster. An
op's measured saving includes whatever moves inside its span (a fork's cost
landing on the op after a hook, an aux-stream join); the lint's only what
its simulation moves there.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from l2sched.bench import read_json_file  # noqa: E402
from l2sched.bench.arms import spin_collectives  # noqa: E402
from l2sched.device import load_device  # noqa: E402
from l2sched.errors import L2sError, L2sInputError  # noqa: E402
from l2sched.files import check_output_path  # noqa: E402
from l2sched.lint.run import run_lint  # noqa: E402
from lab.bench.calibrate_model import lint_setup  # noqa: E402
from lab.experiments.probe_output import write_probe  # noqa: E402


def measured_savings(none: dict, arm: dict) -> collections.Counter:
    """Per op name: sum over layers of ``none``'s minus ``arm``'s main-stream
    op durations (``ops`` records ``"layer:op" -> {dur_us, stream}``), us."""
    out = collections.Counter()
    for key, rec in none.items():
        if key in arm and rec.get("stream") == "main":
            out[key.split(":", 1)[1]] += rec["dur_us"] - arm[key]["dur_us"]
    return out


def predicted_savings(run) -> collections.Counter:
    """Per op name: sum over layers of the lint's no-prefetch minus prefetch
    simulated durations of the main-stream ops of ``run`` (a ``LintRun``), us."""
    out = collections.Counter()
    for sg, sim, sign in ((run.base_sg, run.base, 1), (run.sg, run.sim, -1)):
        for nid in sg.main:
            node = sg.nodes[nid]
            if node.get("op") is None or node.get("layer") is None:
                continue
            t = sim.timing[nid]
            out[node["op"]] += sign * (t.finish - t.start)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", help="an untrimmed `bench run` result (.json or .json.gz) "
                                   "that kept its per-op records")
    ap.add_argument("--profile", required=True, help="device profile the lint uses")
    ap.add_argument("--arm", default="compiled", help="the schedule arm (default compiled)")
    ap.add_argument("--tokens", default="1,64", help="the M to compare, comma-separated")
    ap.add_argument("--top", type=int, default=14, help="rows per M in the markdown")
    ap.add_argument("-o", "--output", required=True, help="JSON with every op")
    ap.add_argument("--md-output", default="", help="the markdown printed")
    a = ap.parse_args(argv)
    inputs = [a.result] + ([a.profile] if os.path.exists(a.profile) else [])
    try:
        for out in filter(None, (a.output, a.md_output)):
            check_output_path(out, protect=inputs)
        rows, md = compare(read_json_file(a.result), a.result, load_device(a.profile),
                           a.profile, a.arm, a.tokens.split(","), a.top)
        write_probe({"result": a.result, "profile": a.profile, "arm": a.arm, "rows": rows},
                    md, a.output, a.md_output)
    except L2sError as e:
        print(f"perop_gain: {e}", file=sys.stderr)
        return 1
    return 0


def compare(d: dict, where: str, device_profile, profile_name: str, arm: str, tokens: list,
            top: int) -> tuple[list, list]:
    """The per-M rows and markdown lines of ``main`` for result ``d`` (read
    from ``where``). Raises ``L2sInputError`` naming ``where`` for an M or
    an arm the result lacks, a schedule arm the lint cannot read, or a
    result without per-op records."""
    prof = spin_collectives(device_profile)  # the run's all-reduces are idle spins
    if not isinstance(d.get("per_m"), dict):
        raise L2sInputError(f"{where}: not a `bench run` result (no per_m)")
    cfg, inv, scheds = lint_setup(d)
    if arm not in scheds:
        raise L2sInputError(f"{where}: no schedule arm {arm!r} (schedule arms: "
                            f"{', '.join(sorted(scheds))})")
    rows, md = [], [f"# Per-op saving of `{arm}`: measured vs the lint's ({profile_name})", ""]
    for M in tokens:
        if M not in d["per_m"]:
            raise L2sInputError(f"{where}: no M={M!r} (it has M = {', '.join(d['per_m'])})")
        arms = d["per_m"][M]["arms"]
        if "ops" not in arms.get("none", {}) or "ops" not in arms.get(arm, {}):
            raise L2sInputError(f"{where}: M={M} has no per-op records (a trimmed result)")
        meas = measured_savings(arms["none"]["ops"], arms[arm]["ops"])
        run = run_lint(scheds[arm], inv, device_profile=prof, tokens=int(M), model_config=cfg)
        pred = predicted_savings(run)
        step_meas = arms["none"]["graph_step_us"]["median"] - arms[arm]["graph_step_us"]["median"]
        step_pred = run.step_period("base") - run.step_period("sim")
        names = sorted(set(meas) | set(pred), key=lambda k: -abs(meas[k] - pred[k]))
        rows.append({"M": int(M), "step_measured_us": step_meas, "step_predicted_us": step_pred,
                     "ops_measured_us": sum(meas.values()), "ops_predicted_us": sum(pred.values()),
                     "per_op": [{"op": k, "measured_us": meas[k], "predicted_us": pred[k]}
                                for k in names]})
        md += [f"## M={M}: step {step_meas:+.1f} measured, {step_pred:+.1f} predicted; "
               f"main-stream ops {sum(meas.values()):+.1f} / {sum(pred.values()):+.1f}", "",
               "| op (summed over layers) | measured | predicted |", "|---|---|---|"]
        md += [f"| {k} | {meas[k]:+.1f} | {pred[k]:+.1f} |" for k in names[:top]] + [""]
    return rows, md


if __name__ == "__main__":
    sys.exit(main())
