"""``l2sched profile`` on CPU: a synthetic probe result written as a profile
and read back; the profile's measured terms, each changing the lint's
prediction in the right direction; bad values are errors at their key."""

from __future__ import annotations

import dataclasses
import json

import pytest
from extras import TORCH_MISSING

from l2sched.profile.write import derive, profile_markdown, profile_toml
from l2sched.errors import L2sInputError
from l2sched.lint import lint_path, run_lint
from l2sched.model.config import default_config
from l2sched.device import FillMode, OpTimes, load_device, parse_device
from l2sched.model.inventory import analytical_inventory

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

H200 = "schedules/glm53-flash-h200-tp4.l2s"


def _stat(x):
    return {"median": x, "p10": x * 0.95, "p90": x * 1.05, "n": 10}


def synthetic_results():
    """What the probes return, in their shapes, with round numbers."""
    table = {"kda+moe": {
        "kda.in_proj": {"m": [1, 4, 16], "cold_us": [19.5, 19.8, 20.5],
                        "hot_us": [18.1, 18.3, 19.0]},
        "attn.o_proj": {"m": [1, 4, 16], "cold_us": [10.4, 10.5, 10.9],
                        "hot_us": [7.5, 7.6, 8.0]}},
        "mla+moe": {"attn.o_proj": {"m": [1, 4, 16], "cold_us": [14.9, 15.0, 15.4],
                                    "hot_us": [11.3, 11.4, 11.8]}}}
    fill_row = lambda mb, f: {"mb": mb, "cold_us": _stat(10), "hot_us": _stat(8),  # noqa
                              "launch_to_exit_us": _stat(mb / 3.2),
                              "waits": {"0": {"us": _stat(9), "landed": f - 0.1,
                                              "landed_p10_p90": [f - 0.2, f]},
                                        "40": {"us": _stat(8.2), "landed": f,
                                               "landed_p10_p90": [f - 0.1, f + 0.05]}}}
    return {
        "l2": {"rows": [{"mb": 4, "cold_us": _stat(2), "reread_us": _stat(1),
                         "reread_reverse_us": _stat(1), "reread_hit": 1.0,
                         "reread_reverse_hit": 1.0}],
               "read_kernel": "triton", "effective_bytes": 40_000_000,
               "dram_read_gbps": 4000.0, "dram_read_gbps_p10_p90": [3900.0, 4100.0]},
        "ops": {"tokens": [1, 4, 16], "table": table},
        "fill": {"copy": {"shape": {"mode": "copy", "grid": 66, "threads": 32,
                                    "chunk": 32768, "stages": 4}, "ffi": True,
                          "rows": [fill_row(16, 0.9), fill_row(32, 0.8)]},
                 "bulk": {"shape": {"mode": "bulk", "grid": 264, "threads": 32,
                                    "chunk": 16384, "stages": 1}, "ffi": True,
                          "rows": [fill_row(16, 0.3), fill_row(32, 0.2)]}},
        "survival": {"fill_mode": "copy", "weight_bytes": 16_777_216,
                     "cold_us": _stat(10), "hot_us": _stat(8),
                     # survival relative to what landed: 0.72 / 0.9 = 0.8
                     "policies": {"evict_last": [{"stream_mb": 0, "us": _stat(8.2),
                                                  "hot_fraction": 0.9},
                                                 {"stream_mb": 200, "us": _stat(8.4),
                                                  "hot_fraction": 0.72}],
                                  "evict_normal": [{"stream_mb": 0, "us": _stat(8.2),
                                                    "hot_fraction": 0.9},
                                                   {"stream_mb": 200, "us": _stat(9.6),
                                                    "hot_fraction": 0.18}]}},
        "interference": {"copy": {"fill_bytes": 50_000_000,
                                  "latency_chain_200_kernels": {"extra_us": 6.0,
                                                                "alone_us": _stat(260.0)},
                                  "memory_chain_256MiB_read": {"extra_us": 12.0},
                                  "gemm_chain_24_hot": {"extra_us": 2.0, "fill_bytes": 24_000_000,
                                                        "alone_us": _stat(92.0)},
                                  "attention_chain_24_hot": {"extra_us": 4.0,
                                                             "fill_bytes": 24_000_000,
                                                             "alone_us": _stat(150.0)},
                                  "routing_chain_40_rounds": {"extra_us": 1.0,
                                                              "fill_bytes": 50_000_000,
                                                              "alone_us": _stat(300.0)}},
                         "bulk": {"fill_bytes": 50_000_000,
                                  "latency_chain_200_kernels": {"extra_us": 3.0,
                                                                "alone_us": _stat(260.0)},
                                  "memory_chain_256MiB_read": {"extra_us": 14.0}}},
        "graph": {"chain_200_us": _stat(270.0), "chain_200_with_fork_us": _stat(275.0),
                  "kernel_gap_us": 1.35, "fork_join_us": 5.0},
        "set_aside": {"layer": 3, "fill_mode": "copy", "fill_bytes": 48_000_000,
                      "set_aside_bytes": 39_321_600, "median": 0.12, "p10_p90": [0.09, 0.15],
                      "rows": [{"M": m, "none_us": {"mean": 100.0}, "max_us": {"mean": x},
                                "slowdown": x / 100.0 - 1} for m, x in
                               ((1, 109.0), (4, 112.0), (16, 115.0))]},
    }


PROV = {"gpu": "NVIDIA H200", "compute_capability": [9, 0], "sms": 132,
        "l2_bytes": 62_914_560, "date": "2026-12-01", "command": "l2sched profile "
        "--out x.toml", "quick": False, "set_aside_max_bytes": 39_321_600}


def _written(tmp_path):
    base = load_device("h200")
    inv = analytical_inventory(default_config("glm5next"), tp=4, ep=False)
    res = synthetic_results()
    derived = derive(res, base, inv, PROV)
    text = profile_toml("h200-measured", "test", PROV, derived, base)
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    return load_device(str(path)), derived, res


def test_synthetic_profile_round_trip(tmp_path):
    dev, derived, res = _written(tmp_path)
    assert dev.is_measured and dev.provenance["gpu"] == "NVIDIA H200"
    assert dev.capacity_bytes == 40_000_000
    assert dev.dram_read_gbps == 4000.0
    assert dev.kernel_gap_us == pytest.approx(1.35)
    # each chain's extra read through the lint's picture of the probe: a 5 us
    # launch, then 50 MB at 3200 GB/s (copy; bulk keeps the base's 2300 GB/s)
    # = 15.625 us of reads beside the 260 us chain: extra = read x s / (1 + s)
    assert dev.fill_mode("copy").slowdown == pytest.approx(6.0 / (15.625 - 6.0), abs=5e-4)
    assert dev.fill_mode("bulk").slowdown == pytest.approx(3.0 / (50e6 / 2300e3 - 3.0),
                                                           abs=5e-4)
    # 24 MB at 3200 GB/s = 7.5 us beside the GEMM chain; bulk measured none
    assert dev.fill_mode("copy").gemm_slowdown == pytest.approx(2.0 / 5.5, abs=5e-4)
    assert dev.fill_mode("bulk").gemm_slowdown is None
    assert "device.overlap" in dev.measured["fill.copy.slowdown"]["probe"]
    assert dev.fill_default == "copy"  # effect 0.85 - slowdown 0.62 > 0.25 - 0.16
    copy = dev.fill_mode("copy")
    assert (copy.grid, copy.stages, copy.chunk) == (66, 4, 32768)
    assert copy.landed == ((16.0, 0.9), (32.0, 0.8))
    assert copy.effect_at(24_000_000) == pytest.approx(0.85)
    assert dev.op_times("glm5next")[("kda+moe", "kda.in_proj")].at(4) == (19.8, 18.3)
    assert dev.measured["l2.effective_bytes"]["probe"] == "l2"
    assert "latency.small_kernel_us" in dev.provenance["kept_from_base"]
    assert dev.evict_last_protected_bytes == int(0.8 * 16_777_216)
    md = profile_markdown(PROV, res, derived)
    assert "Effective L2" in md and "| copy | 16 |" in md
    # the set-aside cost from its probe, with its spread; the decode-step
    # fitted fill-slowdown scale is kept from the base and says so
    assert dev.set_aside_stream_slowdown == pytest.approx(0.12)
    assert dev.measured["l2.set_aside_stream_slowdown"]["probe"].startswith("set_aside")
    assert "l2.set_aside_stream_slowdown" not in dev.provenance["kept_from_base"]
    assert dev.fill_slowdown_scale == load_device("h200").fill_slowdown_scale
    assert "latency.fill_slowdown_scale" in dev.provenance["kept_from_base"]
    assert "| 16 | 100.0 | 115.0 | +0.150 |" in md


def test_each_kernel_class_gets_the_slowdown_its_own_chain_measured(tmp_path):
    """Issue 45 item 1: the attention-core and routing chains give their own
    terms, with their probes in [measured]; a kernel whose record has no such
    chain (an older state) leaves the class on ``slowdown`` and unmeasured."""
    dev, derived, res = _written(tmp_path)
    copy, bulk = dev.fill_mode("copy"), dev.fill_mode("bulk")
    # 24 MB at 3200 GB/s = 7.5 us beside the attention chain; 50 MB = 15.625 us
    # beside the routing chain: extra = read x s / (1 + s)
    assert copy.attention_slowdown == pytest.approx(4.0 / 3.5, abs=5e-4)
    assert copy.routing_slowdown == pytest.approx(1.0 / 14.625, abs=5e-4)
    assert copy.class_slowdown("attention") == copy.attention_slowdown
    assert copy.class_slowdown("routing") < copy.class_slowdown("small")
    for key in ("attention_slowdown", "routing_slowdown"):
        assert "device.overlap" in dev.measured[f"fill.copy.{key}"]["probe"]
        assert f"fill.bulk.{key}" not in dev.measured
        assert getattr(bulk, key) is None
    assert bulk.class_slowdown("attention") == bulk.slowdown
    md = profile_markdown(PROV, res, derived).split("## Interference")[1].split("\n## ")[0]
    row = next(line for line in md.splitlines() if line.startswith("| copy |"))
    assert "| 4.0 | 1.143 |" in row and "| 1.0 | 0.068 |" in row
    bulk_row = next(line for line in md.splitlines() if line.startswith("| bulk |"))
    assert bulk_row.count("| - |") >= 3  # no GEMM, attention or routing chain in its record


def test_set_aside_cost_is_kept_from_the_base_without_its_probe(tmp_path):
    base = load_device("h200")
    res = synthetic_results()
    del res["set_aside"]
    derived = derive(res, base, None, PROV)
    assert derived["sections"]["l2"]["set_aside_stream_slowdown"] == \
        base.set_aside_stream_slowdown
    assert "l2.set_aside_stream_slowdown" in derived["kept"]


def test_bad_measured_values_are_errors_at_their_key(tmp_path):
    _, derived, _ = _written(tmp_path)
    text = (tmp_path / "p.toml").read_text()
    bad = text.replace('landed = [[16, 0.9], [32, 0.8]]', 'landed = [[16, 1.9], [8, 0.8]]')
    bad = bad.replace("effective_bytes = 40000000", "effective_bytes = -3", 1)
    bad = bad.replace('"kda.in_proj" = { m = [1, 4, 16]', '"kda.in_proj" = { m = [4, 1, 16]')
    with pytest.raises(L2sInputError) as e:
        parse_device(tomllib.loads(bad), "p.toml", bad)
    text_err = str(e.value)
    assert "fill.copy.landed" in text_err
    assert "l2.effective_bytes" in text_err
    assert "ops.glm5next.kda+moe.kda.in_proj" in text_err
    assert all(line.startswith("p.toml:") for line in text_err.splitlines()
               if "expected" in line or "must" in line)


# -- each term moves the prediction the right way -----------------------------

def _gain(device, overrides=()):
    run = lint_path(H200, list(overrides))
    r = run_lint(run.schedule, run.inventory, device_profile=device)
    return r.step_period("base") - r.step_period("sim")


def _h200():
    return load_device("h200")


def _with_mode(dev, **changes):
    """``dev`` with its default fill kernel's numbers changed (the kernel
    the shipped H200 schedule's windows use)."""
    mode = dev.fill_default
    fm = dataclasses.replace(dev.fill_mode(mode), **changes)
    return dataclasses.replace(dev, fill_modes={**dev.fill_modes, mode: fm})


def test_op_table_decides_what_a_hit_buys():
    dev = _h200()
    ops_gain = {("kda+moe", "attn.o_proj"): OpTimes((1,), (10.4,), (7.5,)),
                ("mla+moe", "attn.o_proj"): OpTimes((1,), (14.9,), (11.3,))}
    ops_none = {k: OpTimes((1,), (v.cold_us[0],), (v.cold_us[0],))
                for k, v in ops_gain.items()}
    g_gain = _gain(dataclasses.replace(dev, ops={"glm5next": ops_gain}))
    g_none = _gain(dataclasses.replace(dev, ops={"glm5next": ops_none}))
    assert g_gain > g_none  # a measured cold > hot gap is what prefetching buys


def test_landed_fraction_per_size():
    dev = _h200()
    g_good = _gain(_with_mode(dev, landed=((1.0, 0.9), (100.0, 0.9))))
    g_bad = _gain(_with_mode(dev, landed=((1.0, 0.9), (10.0, 0.1), (100.0, 0.1))))
    assert g_good > g_bad  # large fills that land less buy less


def test_effective_capacity_caps_resident_fill_bytes():
    dev = _h200()
    big = _gain(dataclasses.replace(dev, effective_l2_bytes=dev.l2_bytes))
    small = _gain(dataclasses.replace(dev, effective_l2_bytes=8_000_000))
    assert small < big  # fills beyond the effective L2 evict each other


def test_a_fill_beside_an_all_reduce_costs_step_time():
    dev = _h200()
    g0 = _gain(_with_mode(dev, allreduce_slowdown=0.0))
    g1 = _gain(_with_mode(dev, allreduce_slowdown=1.0))
    assert g1 < g0


def test_slowdown_of_latency_bound_kernels_costs_step_time():
    dev = _h200()
    assert _gain(_with_mode(dev, slowdown=0.5)) < _gain(_with_mode(dev, slowdown=0.0))


def test_fill_mode_record_is_complete():
    fm = FillMode("copy", 66, 32, 32768, 4, 3000.0, 0.9, 3.0)
    assert fm.effect_at(10**9) == 0.9 and fm.allreduce_slowdown == 0.0


def test_l2_hits_subtract_the_fixed_cost():
    """The re-read sweep's hit fractions on the numbers of the first quick
    profile of the lent H200 (2026-12-01): a 40 MB re-read took the time
    the <= 16 MB line predicts for all hits, a 256 MB re-read the cold
    time; dividing by a small size's rate instead said 0 hits at 8 MB."""
    from l2sched.profile.probes import l2_hits

    def st(x):
        return {"median": x, "p10": x, "p90": x, "n": 1}
    pts = [(4, 5.5, 4.2), (8, 6.1, 4.6), (16, 7.8, 5.8), (24, 9.6, 6.5), (32, 11.3, 7.6),
           (40, 13.2, 9.0), (256, 60.2, 60.6)]
    rows = [{"mb": mb, "cold_us": st(c), "reread_us": st(h), "reread_reverse_us": st(h)}
            for mb, c, h in pts]
    l2_hits(rows)
    hit = {r["mb"]: r["reread_hit"] for r in rows}
    assert hit[8] > 0.9 and hit[32] > 0.9 and hit[40] > 0.8
    assert hit[256] == 0.0
    assert all(0.0 <= r["reread_reverse_hit"] <= 1.0 for r in rows)


def test_a_kept_fill_slowdown_scale_keeps_where_it_came_from():
    """A re-profiled box keeps the base profile's fitted scale and its
    ``[measured]`` record (the decode-step run it was fitted on)."""
    from l2sched.profile.write import _kept_latency
    from l2sched.device import load_device
    base = load_device("h200")
    sec, kept, measured = {"latency": {}}, [], {}
    _kept_latency(base, sec, kept, measured)
    assert sec["latency"]["fill_slowdown_scale"] == base.fill_slowdown_scale
    assert "latency.fill_slowdown_scale" in kept
    assert measured["latency.fill_slowdown_scale"] == \
        base.measured["latency.fill_slowdown_scale"]


def test_report_shows_cold_with_and_without_the_activations(tmp_path):
    """A run of the ops probe that timed the cold op with its inputs read
    back also reports the cold time with them flushed, per M."""
    dev, derived, res = _written(tmp_path)
    for per in res["ops"]["table"].values():
        for rec in per.values():
            rec["cold_all_us"] = [c + 1.0 for c in rec["cold_us"]]
    res["ops"]["layers_per_kind"] = 3
    md = profile_markdown(PROV, res, derived)
    assert "| kda+moe | kda.in_proj | 19.5 / 18.1 (20.5) |" in md
    assert "median over 3 layers per kind" in md
    # an op whose weights exceed the effective L2 is marked, with its re-read
    rec = res["ops"]["table"]["kda+moe"]["kda.in_proj"]
    rec["extrapolated"], rec["hot_reread_us"] = True, [19.4, 19.7, 20.3]
    res["ops"]["effective_bytes"] = 40_000_000
    md = profile_markdown(PROV, res, derived)
    assert "| kda+moe | kda.in_proj * | 19.5 / 18.1 (20.5) |" in md
    assert "effective L2 (40 MB)" in md and "kda+moe kda.in_proj 19.4 / 19.7 / 20.3 us" in md
    del rec["extrapolated"]
    # a state from before (no cold_all_us) keeps the two-column table
    for per in res["ops"]["table"].values():
        for rec in per.values():
            del rec["cold_all_us"]
    md = profile_markdown(PROV, res, derived)
    assert "| kda+moe | kda.in_proj | 19.5 / 18.1 |" in md and "(20.5)" not in md


def test_hot_time_of_weights_larger_than_the_l2_is_extrapolated_from_a_prefix():
    """A 52.6 MB weight re-read right after itself mostly misses an L2 whose
    effective size is 40 MB, so its re-read is no hot time: the probe reads a
    prefix into L2 and scales the prefix's gap to cold to all the bytes."""
    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    from l2sched.profile.ops import HOT_PREFIX_SHARE, _time_op

    w = torch.ones((100, 100), dtype=torch.bfloat16)  # 20,000 B
    x = torch.ones((4, 100), dtype=torch.bfloat16)

    class Runner:
        def matrix_reads(self, i, op):
            return [("w", w, x)]

        def run_op(self, i, op):
            pass

    class Bench:
        """Times by what the setup read: the flush alone (cold_all), the
        flush and the input's 800 bytes (cold), those and a 7,500-byte
        weight prefix (prefix), nothing (the op right after itself)."""
        def flush(self):
            self.flushed = True

        def timed(self, setup, body):
            self.flushed, sums = False, []
            before = torch.Tensor.sum
            torch.Tensor.sum = lambda t, *a, **k: sums.append(t.numel()) or before(t, *a, **k)
            try:
                setup()
            finally:
                torch.Tensor.sum = before
            us = {(True, ()): 10.2, (True, (800,)): 10.0, (True, (800, 7500)): 8.5,
                  (False, ()): 9.9}[(self.flushed, tuple(sums))]
            return [0.0] * 3, [us] * 3

    fit = 10_000
    got = _time_op(Bench(), torch, Runner(), 0, None, fit)
    prefix = int(HOT_PREFIX_SHARE * fit)
    assert got["prefix_bytes"] == prefix
    assert got["cold_us"] == 10.0 and got["cold_all_us"] == 10.2
    assert got["hot_reread_us"] == 9.9 and got["prefix_us"] == 8.5
    assert got["hot_us"] == pytest.approx(10.0 - 1.5 * 20_000 / prefix)
    # weights that fit: the re-read is the hot time, no prefix run
    got = _time_op(Bench(), torch, Runner(), 0, None, 40_000)
    assert got["prefix_bytes"] is None and got["prefix"] is None
    assert got["hot_us"] == 9.9


def test_a_recorded_profile_is_read_from_the_result_and_its_errors_located_there():
    """Every report lints a bench result with the copy of the device
    profile the run recorded; a bad copy is an error at the result's key,
    line and column (not at a temporary file)."""
    from l2sched.bench import recorded_profile
    from lab.bench.tp_validation import lint_profile
    with open(load_device("h200").path, encoding="utf-8") as f:
        text = f.read()
    d = {"device_profile_toml": text, "device_profile": "h200"}
    assert recorded_profile(d, "r.json").sm_count == load_device("h200").sm_count
    assert lint_profile(d, "r.json")[1] == "the copy of h200 recorded in the result"
    assert recorded_profile({}, "r.json") is None
    bad = {"device_profile_toml": text.replace("sm_count = 132", "sm_count = -1"),
           "device_profile": "h200"}
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("sm_count"))
    for read in (lambda: recorded_profile(bad, "r.json"), lambda: lint_profile(bad, "r.json")):
        with pytest.raises(L2sInputError, match=rf"^r\.json: device_profile_toml:{line}:1: "
                                                r"gpu\.sm_count: must be > 0"):
            read()


def test_cold_op_runs_after_the_same_op_on_another_layer():
    """The flush evicts an op's code and workspace too, which no weight fill
    brings back but which are hot in a decode step: cold is timed after the
    same op ran on another layer of the kind (its weights stay cold)."""
    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    from l2sched.profile.ops import _time_op, other_layer

    w, x = torch.ones((10, 10), dtype=torch.bfloat16), torch.ones((4, 10), dtype=torch.bfloat16)
    ran = []

    class Runner:
        def matrix_reads(self, i, op):
            return [("w", w, x)]

        def run_op(self, i, op):
            ran.append(i)

    class Bench:
        def flush(self):
            self.flushed = True

        def timed(self, setup, body):
            self.flushed = False
            del ran[:]
            setup()
            us = {(True, (7,)): 10.0, (True, ()): 11.0, (False, (3,)): 9.0}[
                (self.flushed, tuple(ran))]
            return [0.0] * 3, [us] * 3

    got = _time_op(Bench(), torch, Runner(), 3, None, 1e9, warm_on=7)
    assert (got["cold_us"], got["cold_all_us"], got["hot_us"]) == (10.0, 11.0, 9.0)
    assert got["warm_on"] == 7
    assert other_layer([3, 7, 11], 7) == 11 and other_layer([3, 7, 11], 11) == 3
    assert other_layer([5], 5) is None


def _step_result(per_m: dict) -> dict:
    """A ``bench run`` result whose arms take ``per_m[M][arm]`` us."""
    return {"per_m": {str(m): {"arms": {name: {"graph_step_us_all": [us - 1, us, us + 1]}
                                        for name, us in steps.items()}}
                      for m, steps in per_m.items()}}


def test_step_fill_ratio_is_each_kernels_hits_over_copys():
    from l2sched.profile.step_fill import step_fill_summary
    got = step_fill_summary(_step_result({
        16: {"compiled": 1000.0, "ctl-compiled": 1080.0,         # copy buys 80 us
             "kernel-bulk": 1010.0, "ctl-kernel-bulk": 1050.0},  # bulk 40 us
        64: {"compiled": 2000.0, "ctl-compiled": 2120.0,         # 120 us
             "kernel-bulk": 2000.0, "ctl-kernel-bulk": 2080.0}}),  # 80 us
        ["bulk"])
    assert got["tokens"] == [16, 64] and got["reference"] == "copy"
    assert got["hits_us"] == {"copy": 100.0, "bulk": 60.0}  # means over M
    assert got["per_m"][64]["hits_us"]["bulk"] == 80.0
    assert got["ratio"] == {"copy": 1.0, "bulk": pytest.approx(0.6)}
    # reference hits inside the noise: no ratio is formed
    small = step_fill_summary(_step_result({16: {
        "compiled": 1000.0, "ctl-compiled": 1040.0,
        "kernel-bulk": 1000.0, "ctl-kernel-bulk": 1020.0}}), ["bulk"])
    assert small["hits_us"]["copy"] == 40.0 and small["ratio"]["bulk"] is None
    with pytest.raises(ValueError, match="ctl-kernel-load"):
        step_fill_summary(_step_result({16: {"compiled": 1.0, "ctl-compiled": 2.0,
                                             "kernel-load": 1.0}}), ["load"])


def test_step_fill_scales_a_kernels_landed_fractions_and_says_so(tmp_path):
    base = load_device("h200")
    res = synthetic_results()
    steps = {"compiled": 1000.0, "ctl-compiled": 1100.0,
             "kernel-bulk": 1010.0, "ctl-kernel-bulk": 1100.0}
    res["step_fill"] = {"tokens": [16], "reference": "copy",
                        "hits_us": {"copy": 100.0, "bulk": 90.0},
                        "per_m": {16: {"hits_us": {"copy": 100.0, "bulk": 90.0},
                                       "step_us": steps}},
                        "ratio": {"copy": 1.0, "bulk": 0.9}}
    derived = derive(res, base, None, PROV)
    path = tmp_path / "p.toml"
    path.write_text(profile_toml("h200-measured", "test", PROV, derived, base),
                    encoding="utf-8")
    dev = load_device(str(path))
    # copy's own table stays; bulk's is copy's x 0.9 (the fill probe said 0.3 / 0.2)
    assert dev.fill_mode("copy").landed == ((16.0, 0.9), (32.0, 0.8))
    assert dev.fill_mode("bulk").landed == ((16.0, 0.81), (32.0, 0.72))
    assert dev.fill_mode("bulk").effect == pytest.approx(0.765)
    assert dev.measured["fill.bulk.step_ratio"]["median"] == pytest.approx(0.9)
    assert "step_fill" in dev.measured["fill.bulk.effect"]["probe"]
    md = profile_markdown(PROV, res, derived)
    assert "| bulk | 1010.0 / 1100.0, +90.0 | +90.0 | 0.90 |" in md
    # the lint credits the bulk kernel's fills more with it
    before = _written(tmp_path)[0]
    assert (dev.fill_mode("bulk").effect_at(24_000_000)
            > before.fill_mode("bulk").effect_at(24_000_000))


def test_step_fill_schedule_is_a_valid_schedule(tmp_path):
    from l2sched.profile.step_fill import step_fill_schedule
    from l2sched.lang.resolve import load_schedule
    path = tmp_path / "s.l2s"
    path.write_text(step_fill_schedule("h200", 4, "bulk"), encoding="utf-8")
    sched = load_schedule(str(path), [])
    shipped = load_schedule(H200, [])
    # the probe's windows are the shipped h200 schedule's (names, hooks, budgets, targets)
    assert sched.kernel == "bulk"
    def key(w):
        return (w.name, w.hook, w.budget, w.layers, w.carry, w.targets)
    assert [key(w) for w in sched.windows] == [key(w) for w in shipped.windows]
    assert [w.name for w in sched.windows] == ["A", "A_MLA", "B", "C"]


def test_step_fill_probe_runs_the_bench_step_with_each_kernel_and_its_decoy():
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from types import SimpleNamespace

    from l2sched.profile.step_fill import probe_step_fill
    ctx = SimpleNamespace(quick=False, dry=True, device_name="h200", tp=4,
                          fill_shapes={"copy": {}, "bulk": {}, "load": {}})
    got = probe_step_fill(ctx)
    assert {"none", "compiled", "ctl-compiled", "kernel-bulk", "ctl-kernel-bulk",
            "kernel-load", "ctl-kernel-load", "lone-A", "ctl-lone-A", "lone-A_MLA",
            "ctl-lone-A_MLA", "lone-B", "ctl-lone-B"} <= set(got["arms"])
    assert "kernel copy" in got["schedule"]
    assert probe_step_fill(SimpleNamespace(quick=True)) == {"skipped": "--quick"}
    assert "TP4" in probe_step_fill(SimpleNamespace(quick=False, tp=8))["skipped"]


@pytest.mark.parametrize("text, want", [
    ('{"resul', "state.json:1:2: the state is not JSON"),
    ("[1, 2]", "not an l2sched profile state"),
    ('{"results": {"foo": {}}}', "results.foo: not a probe of this version"),
    ('{"results": {"l2": 3}}', "results.l2: want an object, got int"),
    ('{"results": {"step_fill": {"ratio": 5}}}', "results.step_fill.reference:"),
    ('{"results": {"step_fill": {"reference": "copy", "ratio": {"bulk": "x"}, '
     '"hits_us": {"copy": 1, "bulk": 1}, "tokens": [16]}}}',
     "results.step_fill.ratio.bulk: want a number, got 'x'"),
    ('{"results": {"step_fill": {"reference": "copy", "ratio": {"bulk": 0.9}, '
     '"hits_us": {"copy": 1}, "tokens": [16]}}}', "results.step_fill.hits_us: no 'bulk'"),
    ('{"results": {"step_fill": {"reference": "copy", "ratio": {"copy": 1.0}, '
     '"hits_us": {"copy": 60}, "tokens": 16}}}', "results.step_fill.tokens: want a list"),
])
def test_a_bad_state_is_an_error_naming_its_key_before_any_probe(tmp_path, capsys, text, want):
    from l2sched.cli.main import main
    state = tmp_path / "state.json"
    state.write_text(text, encoding="utf-8")
    out = tmp_path / "p.toml"
    assert main(["profile", "--out", str(out), "--state", str(state)]) == 1
    err = capsys.readouterr().err
    assert f"{state}" in err and want in err and "Traceback" not in err
    assert not out.exists()


def test_a_good_state_with_a_step_fill_record_reads_back(tmp_path):
    from l2sched.profile.probes import STATE_KEYS
    from l2sched.profile.state import load_state
    res = synthetic_results()
    res["step_fill"] = {"tokens": [16, 64], "reference": "copy",
                        "hits_us": {"copy": 50.0, "bulk": 49.0},
                        "ratio": {"copy": 1.0, "bulk": 0.98},
                        "per_m": {"16": {"hits_us": {"copy": 50.0, "bulk": 49.0}},
                                  "64": {"hits_us": {"copy": 50.0, "bulk": 49.0}}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"provenance": PROV, "results": res}), encoding="utf-8")
    assert load_state(str(path), STATE_KEYS)["results"]["step_fill"]["ratio"]["bulk"] == 0.98
    assert load_state(str(tmp_path / "none.json"), STATE_KEYS) == {}


def test_probe_wall_times_are_kept_in_provenance_and_shown_in_the_report(tmp_path):
    base = load_device("h200")
    inv = analytical_inventory(default_config("glm5next"), tp=4, ep=False)
    res = synthetic_results()
    prov = dict(PROV, probe_seconds={"l2": 11.96, "step_fill": 104.2, "fill_fork": 61.0})
    derived = derive(res, base, inv, prov)
    path = tmp_path / "p.toml"
    path.write_text(profile_toml("h200-measured", "test", prov, derived, base), encoding="utf-8")
    dev = load_device(str(path))
    assert dev.provenance["probe_seconds"] == {"l2": 11.96, "step_fill": 104.2, "fill_fork": 61.0}
    md = profile_markdown(prov, res, derived)
    assert "Probe wall time, s: l2 12, step_fill 104, fill_fork 61 (total 177)." in md
    bad = path.read_text(encoding="utf-8").replace("fill_fork = 61.0", "fill_fork = -1")
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(L2sInputError, match="probe_seconds.*numbers >= 0"):
        load_device(str(path))
