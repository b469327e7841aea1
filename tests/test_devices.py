"""Device profiles: shipped ones load, bad ones name the file and key."""

import pytest

from l2sched.devices import device_names, load_device
from l2sched.errors import L2sInputError


def test_shipped_profiles_load():
    assert {"h200", "sm120-rtx-pro-6000-maxq"} <= set(device_names())
    for name in device_names():
        d = load_device(name)
        assert d.l2_bytes > 0 and d.allreduce_us(4, 8192) > 0
        assert d.protected_bytes(0, "evict_last") <= d.l2_bytes
    sm = load_device("sm120-rtx-pro-6000-maxq")
    assert sm.l2_bytes == 134_217_728 and sm.set_aside_max_bytes == 84_000_000
    assert sm.protected_bytes(-1, "evict_last") == 84_000_000


def test_unknown_name_suggests():
    with pytest.raises(L2sInputError, match="did you mean 'h200'"):
        load_device("h20")


def test_bad_profile_names_file_and_key(tmp_path):
    src = load_device("h200").path
    text = open(src).read().replace("fill_gbps = 2300", 'fill_gbps = "fast"')
    text = text.replace("kernel_gap_us = 1.5", "")
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    assert f"{p}: bandwidth.fill_gbps: expected a number" in msg
    assert f"{p}: latency.kernel_gap_us: missing" in msg
    assert e.value.diagnostics[0].span.line > 1


def test_adding_a_device_is_adding_a_file(tmp_path):
    src = load_device("h200").path
    p = tmp_path / "my-gpu.toml"
    p.write_text(open(src).read().replace('name = "h200"', 'name = "my-gpu"'))
    assert load_device(str(p)).name == "my-gpu"


def test_fit_allreduce_recovers_a_linear_model():
    from l2sched.devices import AllReduceModel, fit_allreduce
    true = AllReduceModel(9.5, 120.0)
    pts = [(b, true.time_us(b)) for b in (8192, 65536, 524288, 2097152)]
    m = fit_allreduce(pts, measured="2026-11-30", source="r.json")
    assert m.latency_us == pytest.approx(9.5) and m.busbw_gbps == pytest.approx(120.0)
    assert (m.measured, m.source) == ("2026-11-30", "r.json")
    with pytest.raises(ValueError, match="two or more"):
        fit_allreduce([(8192, 10.0), (8192, 11.0)])
    with pytest.raises(ValueError, match="does not grow"):
        fit_allreduce([(8192, 12.0), (2097152, 11.0)])


def test_write_allreduce_model_replaces_one_table(tmp_path):
    from l2sched.devices import AllReduceModel, write_allreduce_model
    src = open(load_device("h200").path).read()
    p = tmp_path / "h200.toml"
    p.write_text(src)
    m = AllReduceModel(11.25, 97.5, "2026-11-30", "benchmarks/results/x.json")
    write_allreduce_model(str(p), 2, m, ("measured by a test",))
    d = load_device(str(p))
    assert d.allreduce[2] == AllReduceModel(11.25, 97.5, "2026-11-30",
                                            "benchmarks/results/x.json")
    old = load_device("h200")
    assert d.allreduce[4] == old.allreduce[4] and d.allreduce[8] == old.allreduce[8]
    new = p.read_text()
    # everything outside [allreduce.tp2] is unchanged, byte for byte
    assert new.split("[allreduce.tp2]")[0] == src.split("[allreduce.tp2]")[0]
    assert new.split("[allreduce.tp4]")[1] == src.split("[allreduce.tp4]")[1]
    write_allreduce_model(str(p), 2, m, ("measured by a test",))
    assert p.read_text() == new          # idempotent
    write_allreduce_model(str(p), 16, m)
    assert load_device(str(p)).allreduce[16].latency_us == 11.25
    assert load_device(str(p)).allreduce_us(16, 0) == 11.25


def test_bad_measured_date_is_named(tmp_path):
    src = open(load_device("h200").path).read()
    p = tmp_path / "x.toml"
    # a profile with a measured table gets a bad date; one without gets one added
    if 'measured = "' in src:
        import re
        bad = re.sub(r'measured = "[^"]*"', 'measured = "30.11.2026"', src, count=1)
    else:
        bad = src.replace("[allreduce.tp2]\n", '[allreduce.tp2]\nmeasured = "30.11.2026"\n')
    assert bad != src
    p.write_text(bad)
    with pytest.raises(L2sInputError, match="allreduce.tp2.measured: expected a date"):
        load_device(str(p))


def test_tp_result_fits_into_a_profile(tmp_path):
    """The fit reads its numbers from a `bench tp` result JSON (here a
    synthetic one with a known model) and writes [allreduce.tpW]."""
    import json
    from l2sched.bench.tp_report import load, update_profile
    from l2sched.devices import AllReduceModel
    true = AllReduceModel(14.0, 80.0)
    sizes = [t * 8192 for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)]

    def row(b, skew):
        s = {"median": true.time_us(b) * skew, "p10": 0, "p90": 0, "n": 3}
        return {"bytes": b, "tokens": b // 8192, "model_us": 0, "model_ws_us": 0,
                "eager_us": {"median": 999.0}, "graph_us": s}
    d = {"kind": "l2sched bench tp", "date": "2026-11-30", "world_size": 2, "tp": 4,
         "backend": "nccl", "dry": False,
         "ranks": [{"machine": {"gpu": "NVIDIA H200", "nccl": "2.27.3"},
                    "allreduce": [row(b, k) for b in sizes]} for k in (0.98, 1.02)]}
    r = tmp_path / "r.json"
    r.write_text(json.dumps(d))
    prof = tmp_path / "h200.toml"
    prof.write_text(open(load_device("h200").path).read())
    m, path = update_profile(load(str(r)), "benchmarks/results/r.json", str(prof))
    got = load_device(str(path)).allreduce[2]
    assert got.latency_us == pytest.approx(14.0, abs=0.01)
    assert got.busbw_gbps == pytest.approx(80.0, abs=0.1)
    assert got.measured == "2026-11-30" and got.source == "benchmarks/results/r.json"
    assert "2 x NVIDIA H200" in prof.read_text()
