"""benchmarks/agreement_ceiling.py on committed validation runs: each run's
arms predicted by their mean gain in the other runs, and the inputs it refuses."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = [f"benchmarks/results/h200-2026-12-01-E{i}.json.gz" for i in (12, 13, 14)]


def _ceiling(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmarks/agreement_ceiling.py", *args],
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
