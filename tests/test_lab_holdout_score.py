"""``lab/experiments/holdout_score.py``: the two groups of a validation run
and the issue-45 marks, from a report's validation rows."""

from __future__ import annotations

import json

from lab.experiments import holdout_score as hs


def _row(arm, m, pred, meas, floor=10.0):
    return {"arm": arm, "M": m, "floor_us": floor, "pred_gain_us": pred, "meas_gain_us": meas}


def test_wrong_way_pairs_are_counted_per_group_and_judged_against_the_marks(tmp_path):
    rows = [_row("compiled", 1, 50, 40), _row("budgets+25%", 1, 30, -25),  # fitted: 1 wrong way
            _row("bench/ho1-post-all-reduce", 1, -40, -60),
            _row("bench/ho4-small-windows", 1, 20, -15),  # held out: 1 wrong way of 2
            _row("bench/ho6-first-projection", 4, 5, -30)]  # predicted same: not the wrong way
    s = hs.score({"validation": {"rows": rows}})
    assert s["fitted"]["n"] == 2 and s["fitted"]["wrong_way"] == [["budgets+25%", 1]]
    assert s["held_out"]["n"] == 3
    assert s["held_out"]["wrong_way"] == [["bench/ho4-small-windows", 1]]
    assert s["held_out_allowed"] == 0  # 1 in 10 of 3 pairs, rounded down
    assert s["met"]["fitted_wrong_way"] is False and s["met"]["held_out_wrong_way"] is False
    assert s["all"]["n"] == 5
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"validation": {"rows": rows}}), encoding="utf-8")
    assert hs.main([str(report), "-o", str(tmp_path / "s.json"),
                    "--md-output", str(tmp_path / "s.md")]) == 0
    md = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "| fitted | 2 | 50% |" in md and "fitted_wrong_way MISSED" in md
    assert "| bench/ho4-small-windows | 1 | 10.0 | +20.0 | -15.0 | faster / slower |" in md


def test_a_report_without_validation_rows_is_refused(tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"validation": {"status": "no A/A arm"}}), encoding="utf-8")
    assert hs.main([str(report), "-o", str(tmp_path / "s.json")]) == 1
    assert "no validation rows" in capsys.readouterr().err


def test_a_missing_or_broken_file_is_one_line_not_a_traceback(tmp_path, capsys):
    assert hs.main([str(tmp_path / "none.json"), "-o", str(tmp_path / "s.json")]) == 1
    assert "none.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert hs.main([str(bad), "-o", str(tmp_path / "s.json")]) == 1
    assert "bad.json" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()
