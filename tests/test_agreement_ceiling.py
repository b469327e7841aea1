"""lab/experiments/agreement_ceiling.py on committed validation runs: each run's
arms predicted by their mean gain in the other runs, and the inputs it refuses."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = [f"tests/data/results/h200-2026-12-01-E{i}.json.gz" for i in (12, 13, 14)]


def _ceiling(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "lab/experiments/agreement_ceiling.py", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_each_run_is_scored_against_the_mean_of_the_others(tmp_path):
    out = tmp_path / "c.json"
    p = _ceiling(*RUNS, "--json-out", str(out), "--md-out", str(tmp_path / "c.md"))
    assert p.returncode == 0, p.stderr
    got = json.loads(out.read_text())
    assert set(got["runs"]) == set(RUNS)
    for v in got["runs"].values():
        assert v["n"] == 56 and 0.5 <= v["verdict_agreement"] <= 1.0
    # the spread of one arm's gain over the three runs, from the runs themselves
    gains = []
    for r in RUNS:
        with gzip.open(ROOT / r, "rt") as f:
            m = json.load(f)["per_m"]["16"]["arms"]
        gains.append(m["none"]["graph_step_us"]["median"] - m["compiled"]["graph_step_us"]["median"])
    mean = sum(gains) / 3
    sd = (sum((g - mean) ** 2 for g in gains) / 2) ** 0.5
    assert abs(got["spread_us"]["compiled@16"] - sd) < 1e-6
    assert "| h200-2026-12-01-E12.json.gz | 56 |" in (tmp_path / "c.md").read_text()


def test_a_run_counted_twice_or_other_arms_are_refused(tmp_path):
    copy = tmp_path / "E12-copy.json.gz"
    copy.write_bytes((ROOT / RUNS[0]).read_bytes())
    p = _ceiling(RUNS[0], str(copy), RUNS[1])
    assert p.returncode == 1 and "the same run as" in p.stderr
    with gzip.open(ROOT / RUNS[2], "rt") as f:
        d = json.load(f)
    del d["per_m"]["64"]
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps(d))
    p = _ceiling(RUNS[0], RUNS[1], str(fewer))
    assert p.returncode == 1 and "fewer.json: other arms or M than" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_it_never_writes_onto_an_input_and_refuses_a_dry_result(tmp_path):
    local = [tmp_path / f"r{i}.json.gz" for i in range(3)]
    for src, dst in zip(RUNS, local):
        dst.write_bytes((ROOT / src).read_bytes())
    before = local[0].read_bytes()
    p = _ceiling(*map(str, local), "--json-out", str(local[0]))
    assert p.returncode == 1 and "refusing to overwrite" in p.stderr
    assert local[0].read_bytes() == before
    with gzip.open(local[1], "rt") as f:
        d = json.load(f)
    d["dry"] = True
    dry = tmp_path / "dry.json"
    dry.write_text(json.dumps(d))
    p = _ceiling(str(local[0]), str(dry), str(local[2]))
    assert p.returncode == 1 and "dry.json: a --dry result" in p.stderr


def _module():
    sys.path.insert(0, str(ROOT / "lab" / "experiments"))
    import agreement_ceiling
    return agreement_ceiling


def _runs(cells, n_runs=5):
    """Synthetic runs: per (arm, M, gains over the runs, floor) rows."""
    return {f"r{i}": [{"arm": a, "M": M, "floor_us": fl, "meas_gain_us": g[i]}
                      for a, M, g, fl in cells] for i in range(n_runs)}


def test_the_simulated_ceiling_is_certain_far_from_the_floor_and_rises_with_replays():
    ac = _module()
    far = _runs([("a", 1, [100.0, 101.0, 99.0, 100.5, 99.5], 5.0),
                 ("b", 1, [-80.0, -81.0, -79.0, -80.5, -79.5], 5.0)])
    s = ac.simulated_ceiling(far, 25, 25, draws=100)
    assert s["perfect"]["mean"] == 1.0 and s["perfect"]["p_mark"] == 1.0
    assert s["floor_us"] == {"1": 5.0}
    # gains near the floor: the verdicts flip with a run's noise, less so with more replays
    near = _runs([(f"x{i}", 4, [6.0 + d for d in (-4, 4, -2, 2, 0)], 6.0) for i in range(20)])
    few, many = (ac.simulated_ceiling(near, 25, n, draws=200)["perfect"]["mean"]
                 for n in (25, 400))
    assert few < 0.8 and many > few + 0.1
    assert ac.simulated_ceiling(near, 25, 100, draws=10)["floor_us"] == {"4": 3.0}


def test_the_simulated_ceiling_needs_two_runs_and_a_positive_replay_count():
    ac = _module()
    one = _runs([("a", 1, [1.0], 5.0)], n_runs=1)
    for runs, n in ((one, 25), (_runs([("a", 1, [1.0, 2.0], 5.0)], n_runs=2), 0)):
        try:
            ac.simulated_ceiling(runs, 25, n)
        except ac.L2sError as e:
            assert "at least 2 runs" in str(e)
        else:
            raise AssertionError("accepted")


def test_replays_writes_the_simulation_and_bad_counts_are_usage_errors(tmp_path):
    out = tmp_path / "c.json"
    p = _ceiling(*RUNS, "--replays", "25,100", "--json-out", str(out),
                 "--md-out", str(tmp_path / "c.md"))
    assert p.returncode == 0, p.stderr
    sims = json.loads(out.read_text())["simulated"]
    assert [s["replays"] for s in sims] == [25, 100] and sims[0]["run_replays"] == 25
    for M, fl in sims[0]["floor_us"].items():
        assert abs(sims[1]["floor_us"][M] - max(1.0, fl / 2)) < 1e-9
    assert "## Expected agreement in a run of N replays" in (tmp_path / "c.md").read_text()
    for bad in ("0", "x", "25,", "", "25,25", "1000000000", " 25", "+25", "2_5", "\u0662\u0665",
                "9" * 5000):
        p = _ceiling(*RUNS, "--replays", bad)
        assert p.returncode == 2 and "expected distinct replay counts in 1..100000" in p.stderr
        assert len(p.stderr) < 400


def test_runs_of_other_replay_counts_are_not_simulated_together(tmp_path):
    with gzip.open(ROOT / RUNS[2], "rt") as f:
        d = json.load(f)
    d["replays"] = 40
    other = tmp_path / "forty.json"
    other.write_text(json.dumps(d))
    p = _ceiling(RUNS[0], RUNS[1], str(other), "--replays", "80")
    assert p.returncode == 1 and "forty.json: 40 replays" in p.stderr


def test_a_run_given_twice_or_one_file_for_both_outputs_is_refused_before_any_work(tmp_path):
    p = _ceiling(*RUNS, RUNS[0])
    assert p.returncode == 1 and f"{RUNS[0]}: given twice" in p.stderr
    out = tmp_path / "same"
    p = _ceiling(*RUNS, "--json-out", str(out), "--md-out", str(out))
    assert p.returncode == 1 and "--json-out and --md-out are the same file" in p.stderr
    assert p.stdout == "" and not out.exists()
    p = _ceiling(*RUNS, "--json-out", "")
    assert p.returncode == 1 and "the output path is empty" in p.stderr and p.stdout == ""


def test_runs_that_share_a_file_name_are_told_apart_in_the_table(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "run.json.gz").write_bytes((ROOT / RUNS[0 if d == "a" else 1]).read_bytes())
    md = tmp_path / "c.md"
    p = _ceiling(str(tmp_path / "a" / "run.json.gz"), str(tmp_path / "b" / "run.json.gz"),
                 RUNS[2], "--md-out", str(md))
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert f"| {tmp_path / 'a' / 'run.json.gz'} | 56 |" in text
    assert "| h200-2026-12-01-E14.json.gz | 56 |" in text
