"""The collective part of ``l2sched profile`` (``--collectives N``,
``bench.profile_collectives``) on the CPU: the real ``bench tp`` ranks
(gloo, dry) with the all-reduce measurements only, the refusal to write a CPU
measurement into a profile, the write of ``[allreduce.tpN]`` and
``fill.MODE.allreduce_slowdown`` into the profile text (every other byte
kept), and the CLI's option checks."""

import copy

import pytest

from l2sched.profile.collectives import (collective_args, collectives_markdown,
                                               run_collectives)
from l2sched.profile.collective_terms import collective_terms_text as apply_collectives
from l2sched.cli import main
from l2sched.device import DEVICES_DIR, parse_device

H200 = DEVICES_DIR / "h200.toml"


@pytest.fixture(scope="module")
def dry_result():
    # the dry ranks are torch.distributed processes over gloo
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    return run_collectives(2, tp=4, tokens=[1, 16], base="h200", iters=3, dry=True)


def test_only_the_all_reduce_is_measured(dry_result):
    d = dry_result
    assert d["kind"] == "l2sched bench tp" and d["collectives_only"] is True
    assert d["world_size"] == 2 and d["dry"] and d["backend"] == "gloo"
    for r in d["ranks"]:
        assert r["per_m"] == {}
        sizes = [row["bytes"] for row in r["allreduce"]]
        # the op table's M and bench tp's extra sizes (128..4096 tokens), hidden 4096 bf16
        assert sizes == [t * 4096 * 2 for t in (1, 16, 128, 256, 1024, 4096)]
        rows = r["allreduce_fill"]["rows"]
        assert [row["tokens"] for row in rows] == [1, 16]
        assert all(set(row["modes"]) == {"bulk", "copy", "load"} for row in rows)


def test_options_are_bench_tp_defaults():
    a = collective_args(2, tp=4, tokens=[1, 4], base="h200", iters=7)
    assert a.collectives_only and a.no_spin_arms and not hasattr(a, "validation")
    assert a.ar_iters == 7 and a.tokens == [1, 4] and a.ar_fill_mb == 30.0
    assert a.p2p == "on" and a.device_profile == "h200"


def test_a_cpu_measurement_is_not_written(dry_result):
    with pytest.raises(ValueError, match="CPU"):
        apply_collectives(dry_result, H200.read_text(encoding="utf-8"), "state.json")


def test_the_collective_terms_are_written_into_the_profile_text(dry_result):
    d = copy.deepcopy(dry_result)
    d.update(dry=False, backend="nccl", date="2026-12-03")  # as a GPU run records it
    # GPU-like numbers in place of the CPU's host timings: 14 us + bytes / 100 GB/s,
    # the all-reduce 16 us alone and 5 us longer beside a copy fill, not beside the others
    for r in d["ranks"]:
        for row in r["allreduce"]:
            t = 14.0 + row["bytes"] / 100e3
            row["graph_us"] = row["eager_us"] = {"median": t, "p10": t, "p90": t, "n": 1}
        for row in r["allreduce_fill"]["rows"]:
            row["alone_us"]["median"] = 16.0
            for m, x in row["modes"].items():
                x["extra_us"]["median"] = 5.0 if m == "copy" else 0.0
    orig = H200.read_text(encoding="utf-8")
    text, lines = apply_collectives(d, orig, "l2sched profile --collectives (s.json)")
    prof = parse_device(__import__("tomllib").loads(text), "new.toml", text)
    assert prof.allreduce[2].measured == "2026-12-03"
    assert prof.allreduce[2].source == "l2sched profile --collectives (s.json)"
    assert lines[0] == "[allreduce.tp2] latency_us = 14.00, busbw_gbps = 100.0 (measured 2026-12-03)"
    copy_fill = prof.fill_modes["copy"]
    read = 30e6 / (copy_fill.gbps * 1e3)  # the fill's read ends before the all-reduce
    assert copy_fill.allreduce_slowdown == pytest.approx(5.0 / (read - 5.0), abs=5e-4)
    assert prof.fill_modes["bulk"].allreduce_slowdown == 0.0
    # every fill kernel is reported: its slowdown written, or why not
    assert {ln.split("]")[0] for ln in lines[1:]} == {"[fill.bulk", "[fill.copy", "[fill.load"}
    # outside the [allreduce.tp2] table and the allreduce_slowdown lines, nothing changed
    keep = [ln for ln in orig.splitlines() if not ln.startswith("allreduce_slowdown")]
    new = [ln for ln in text.splitlines() if not ln.startswith("allreduce_slowdown")]
    tp2 = keep.index("[allreduce.tp2]")
    assert keep[:tp2] == new[:tp2]
    assert keep[keep.index("[allreduce.tp4]"):] == new[new.index("[allreduce.tp4]"):]
    md = "\n".join(collectives_markdown(d))
    assert "## Collectives (2 GPUs" in md and f"| {1 * 4096 * 2} |" in md


@pytest.mark.parametrize("argv, why", [
    (["--collectives", "1"], "--collectives takes 2..--tp (4) GPUs, got 1"),
    (["--collectives", "8"], "--collectives takes 2..--tp (4) GPUs, got 8"),
    (["--collectives", "4", "--tp", "2"], "--collectives takes 2..--tp (2) GPUs, got 4"),
])
def test_bad_collectives_option_is_a_usage_error(argv, why, tmp_path, capsys):
    assert main(["profile", "--out", str(tmp_path / "p.toml")] + argv) == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_output_paths_are_checked_before_any_probe(tmp_path, capsys):
    # a directory as --out / --state: one line, exit 1, before torch or a GPU is asked for
    assert main(["profile", "--out", str(tmp_path)]) == 1
    assert f"{tmp_path}:1:1: cannot write: is a directory" in capsys.readouterr().err
    assert main(["profile", "--out", str(tmp_path / "p.toml"), "--state", str(tmp_path)]) == 1
    assert list(tmp_path.iterdir()) == []
