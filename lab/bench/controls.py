"""The research half of the dispatch controls (``l2sched.bench.controls``
runs them): the residuals of a controls run and the predicted gains they
correct in a validation (docs/bench.md#dispatch-controls)."""

from __future__ import annotations

from l2sched.errors import L2sError
from l2sched.bench.controls import CONTROL_BUDGET, CONTROL_PREFIX, control_of, is_control


class Residuals(dict):
    """``{(arm, M): residual, us}`` of a controls run (``residuals``), with
    ``kind``, the kind of its controls (``CONTROL_KINDS``)."""

    def __init__(self, items=(), kind: str = "head"):
        super().__init__(items)
        self.kind = kind


def residuals(rows: list[dict], kind: str = "head") -> Residuals:
    """``{(arm, M): measured - predicted gain of its control, us}`` from the
    gain rows (``validation.validate``'s input) of a controls run whose
    controls are of ``kind``: one entry per control row, keyed by the arm it
    stands for."""
    return Residuals({(control_of(r["arm"]), int(r["M"])): r["meas_gain_us"]
                      - r["pred_gain_us"] for r in rows if is_control(r["arm"])}, kind)


def kind_of(res) -> str:
    """The kind of controls of residuals ``res`` (head for a plain dict)."""
    return getattr(res, "kind", "head")


def run_control_kind(d: dict) -> str:
    """The kind of the controls of a bench result ``d``: decoy when its arms
    record decoys (``bench run --controls decoy``), else head."""
    return "decoy" if any(isinstance(a, dict) and a.get("decoy")
                          for a in d.get("arms", [])) else "head"


def with_controls(rows: list[dict], res: dict[tuple[str, int], float],
                  source: str) -> list[dict]:
    """The validation rows of ``rows`` (control arms left out) with each
    predicted gain plus its arm's control residual from ``res``
    (``residuals`` of the controls run ``source``); the row keeps the
    uncorrected prediction as ``lint_gain_us`` and the residual as
    ``control_us``. Raises ``L2sError`` naming ``source`` and every (arm, M)
    without a control there: a partial correction would mix two models in
    one figure."""
    out, missing = [], []
    for r in rows:
        if is_control(r["arm"]):
            continue
        key = (r["arm"], int(r["M"]))
        if key not in res:
            missing.append(f"{r['arm']} at M={r['M']}")
            continue
        out.append({**r, "lint_gain_us": r["pred_gain_us"], "control_us": res[key],
                    "pred_gain_us": r["pred_gain_us"] + res[key]})
    if missing:
        raise L2sError(f"{source}: no control for {', '.join(missing[:6])}"
                       f"{' ...' if len(missing) > 6 else ''} (run the same arms with "
                       f"--controls)")
    return out


def status_note(path: str, kind: str = "head") -> str:
    """What a validation's status line adds when it used the controls run
    ``path`` whose controls are of ``kind``."""
    what = "decoy-control" if kind == "decoy" else "dispatch-control (4 KiB head)"
    return f"; predictions include the {what} residuals of {path}, another run"


def validation_rows(rows: list[dict]) -> list[dict]:
    """``rows`` without the control arms: the pairs the validation scores."""
    return [r for r in rows if not is_control(r["arm"])]


def control_lines(v: dict) -> list[str]:
    """Markdown lines on the dispatch controls a validation ``v`` used
    (``v["controls"]``: the controls run's path): what was added, and per
    (arm, M) the lint's gain, the control's residual and their sum (us);
    no lines when ``v`` used none."""
    if not v.get("controls"):
        return []
    what = ("the same fills reading a scratch buffer: their cost without their hits"
            if v.get("control_kind") == "decoy" else
            f"every fill cut to a {CONTROL_BUDGET.replace('KiB', ' KiB')} head")
    out = [f"Predicted gain = the lint's gain + the residual (measured - predicted gain) "
           f"of the arm's control ({CONTROL_PREFIX}NAME, {what}) in {v['controls']}, a "
           "separate run (docs/bench.md#dispatch-controls).", "",
           "| arm | M | lint gain us | control residual us | predicted gain us |",
           "|---|---|---|---|---|"]
    for r in v["rows"]:
        out.append(f"| {r['arm']} | {r['M']} | {r['lint_gain_us']:+.1f} | "
                   f"{r['control_us']:+.1f} | {r['pred_gain_us']:+.1f} |")
    return out + [""]
