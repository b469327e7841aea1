"""The recalibrated model terms (docs/lint.md#validation): a fill slows every
main-stream op by ``fill_slowdown_scale x slowdown``, an all-reduce by
``allreduce_slowdown``; a set-aside slows the expert stream by
``set_aside_stream_slowdown``. Tiny hand-built step graphs with exact
numbers."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from l2sched.errors import L2sInputError
from l2sched.lint.graph import StepGraph
from l2sched.lint.simulate import simulate
from l2sched.device import load_device, parse_device

STREAM = {"delay": 0.0, "kind": "stream"}


def _device(**kw):
    """h200 with round numbers: no gaps, no fixed GEMM cost, a 1000 GB/s
    copy fill with no launch and slowdown 0.5, the 10 us small kernel."""
    dev = load_device("h200")
    copy = dataclasses.replace(dev.fill_modes["copy"], gbps=1000.0, launch_us=0.0,
                               slowdown=0.5, landed=(), effect=1.0,
                               allreduce_slowdown=0.0)
    base = dict(kernel_gap_us=0.0, small_kernel_us=10.0, gemm_fixed_us=0.0,
                gemm_dram_gbps=1000.0, ops={}, fill_modes={"copy": copy},
                fill_default="copy")
    base.update(kw)
    return dataclasses.replace(dev, **base)


def _node(cls, **kw):
    d = {"cls": cls, "kind": "x", "op": cls, "active": True, "reads": [], "pos": 0}
    d.update(kw)
    return d


def _small_beside_fill() -> StepGraph:
    """A 10 us small kernel on the main stream and a 4 MB fill beside it."""
    sg = StepGraph(nodes={}, adj={}, main=["a"], fills=["f"])
    sg.add_node("a", _node("small"))
    sg.add_node("f", _node("fill", fill=SimpleNamespace(nbytes=4_000_000, kernel="copy")))
    sg.add_node("join", _node("join"))
    sg.add_edge("a", "join", STREAM)
    sg.add_edge("f", "join", {"delay": 0.0, "kind": "join"})
    return sg


def _expert_stream() -> StepGraph:
    """One 8 MB routed-expert stream read."""
    sg = StepGraph(nodes={}, adj={}, main=["e"], fills=[])
    sg.add_node("e", _node("expert_stream", reads=[SimpleNamespace(lo=0, hi=8_000_000)]))
    sg.add_node("join", _node("join"))
    sg.add_edge("e", "join", STREAM)
    return sg


def _run(sg, dev, **kw):
    return simulate(sg, dev, tp=1, tokens=1, hidden=16, **kw)


@pytest.mark.parametrize("scale, finish", [
    (0.0, 10.0),        # not slowed
    (1.0, 4 + 10 - 4 / 1.5),  # the probe's slowdown: 4 us at 1/1.5
    (2.0, 12.0),        # 4 us at 1/2 = 2 us of work, 8 us after the fill
])
def test_a_fill_slows_the_concurrent_main_stream_kernel_by_scale_x_slowdown(scale, finish):
    # the fill reads 4 MB at 1000 GB/s = 4 us beside the 10 us kernel
    sim = _run(_small_beside_fill(), _device(fill_slowdown_scale=scale))
    assert sim.timing["f"].finish == pytest.approx(4.0)
    assert sim.timing["a"].finish == pytest.approx(finish)


def test_the_h200_scale_is_fitted_on_the_two_gpu_calibration_run():
    dev = load_device("h200")
    # session 7: 1 on the grid, fitted on 2-GPU run T1 with the probe-consistent
    # slowdowns (before: 4.5 on fit-proof-2a with extra / fill us)
    assert dev.fill_slowdown_scale == 1.0
    assert "h200x2-2026-12-01-T1" in dev.measured["latency.fill_slowdown_scale"]["probe"]
    slow = _run(_small_beside_fill(), _device(fill_slowdown_scale=4.5))
    now = _run(_small_beside_fill(), _device(fill_slowdown_scale=dev.fill_slowdown_scale))
    # 4 us at 1 / (1 + 4.5 x 0.5) = 4 / 3.25 us of work; at 1 / 1.5 = 4 / 1.5
    assert slow.end == pytest.approx(4 + 10 - 4 / 3.25)
    assert now.end == pytest.approx(4 + 10 - 4 / 1.5) and now.end < slow.end


@pytest.mark.parametrize("set_aside, finish", [
    (0, 8.0),            # 8 MB at 1000 GB/s
    (-1, 8.0 * 1.25),    # the maximum: 25% slower
])
def test_a_set_aside_slows_the_expert_stream(set_aside, finish):
    sim = _run(_expert_stream(), _device(set_aside_stream_slowdown=0.25),
               set_aside=set_aside)
    assert sim.end == pytest.approx(finish)


def test_the_set_aside_cost_is_linear_in_the_reserved_bytes():
    dev = _device(set_aside_stream_slowdown=0.25)
    half = dev.set_aside_max_bytes // 2
    assert dev.set_aside_stream_factor(half) == pytest.approx(1 + 0.25 * half
                                                              / dev.set_aside_max_bytes)
    sim = _run(_expert_stream(), dev, set_aside=half)
    assert sim.end == pytest.approx(8.0 * dev.set_aside_stream_factor(half))


def test_the_lint_charges_set_aside_max_against_a_baseline_without_one():
    from l2sched.lint import lint_path
    gains = {}
    for v in ("0", "max"):
        run = lint_path("schedules/glm53-flash-h200-tp4.l2s", [f"set_aside={v}"], tokens=16)
        gains[v] = run.step_period("base") - run.step_period("sim")
        base = run.step_period("base")
    # the expert stream is most of the step: 13.8% of it is hundreds of us
    assert gains["max"] < gains["0"] - 0.05 * base


def _raw_profile(extra=None):
    import tomllib
    from l2sched.device import profile_path
    raw = tomllib.loads(profile_path("h200").read_text())
    for (sec, key), v in (extra or {}).items():
        raw[sec][key] = v
    return raw


def test_the_new_fields_are_optional_and_checked():
    raw = _raw_profile()
    del raw["latency"]["fill_slowdown_scale"]
    del raw["l2"]["set_aside_stream_slowdown"]
    dev = parse_device(raw)
    assert (dev.fill_slowdown_scale, dev.set_aside_stream_slowdown) == (1.0, 0.0)
    with pytest.raises(L2sInputError, match="fill_slowdown_scale"):
        parse_device(_raw_profile({("latency", "fill_slowdown_scale"): -1.0}))
    with pytest.raises(L2sInputError, match="set_aside_stream_slowdown"):
        parse_device(_raw_profile({("l2", "set_aside_stream_slowdown"): "x"}))


def test_sm120_marks_the_copied_numbers_as_assumptions():
    from l2sched.device import profile_path
    text = profile_path("sm120-rtx-pro-6000-maxq").read_text()
    for key in ("fill_slowdown_scale", "set_aside_stream_slowdown"):
        before = text.split(f"\n{key} =")[0].rsplit("\n", 3)[-3:]
        assert any("ASSUMPTION" in line for line in before), key


def _gemm_beside_fill() -> StepGraph:
    """A GEMM reading 10 MB from device memory (10 us at 1000 GB/s) on the
    main stream and a 4 MB fill (4 us) beside it."""
    sg = StepGraph(nodes={}, adj={}, main=["g"], fills=["f"])
    sg.add_node("g", _node("gemm", reads=[SimpleNamespace(lo=0, hi=10_000_000,
                                                          storage="w")]))
    sg.add_node("f", _node("fill", fill=SimpleNamespace(nbytes=4_000_000, kernel="copy")))
    sg.add_node("join", _node("join"))
    sg.add_edge("g", "join", STREAM)
    sg.add_edge("f", "join", {"delay": 0.0, "kind": "join"})
    return sg


@pytest.mark.parametrize("gemm_slowdown, finish", [
    (None, 4 + 10 - 4 / 1.5),  # not measured: the latency-bound slowdown 0.5
    (0.25, 4 + 10 - 4 / 1.25),  # measured: 4 us at 1 / 1.25
    (0.0, 10.0),  # measured: the fill costs the GEMM only shared bandwidth (none here)
])
def test_a_fill_slows_a_concurrent_gemm_by_its_gemm_slowdown(gemm_slowdown, finish):
    dev = _device(fill_slowdown_scale=1.0)
    copy = dataclasses.replace(dev.fill_modes["copy"], gemm_slowdown=gemm_slowdown)
    dev = dataclasses.replace(dev, fill_modes={"copy": copy})
    sim = _run(_gemm_beside_fill(), dev)
    assert sim.timing["f"].finish == pytest.approx(4.0)
    assert sim.timing["g"].finish == pytest.approx(finish)
    # the latency-bound kernel keeps the latency slowdown either way
    small = _run(_small_beside_fill(), dev)
    assert small.timing["a"].finish == pytest.approx(4 + 10 - 4 / 1.5)


def test_gemm_slowdown_is_optional_and_checked():
    raw = _raw_profile()
    raw["fill"]["copy"].pop("gemm_slowdown", None)
    assert parse_device(raw).fill_modes["copy"].gemm_slowdown is None
    raw["fill"]["copy"]["gemm_slowdown"] = 0.2
    assert parse_device(raw).fill_modes["copy"].gemm_slowdown == 0.2
    for bad in (-0.1, "x"):
        raw["fill"]["copy"]["gemm_slowdown"] = bad
        with pytest.raises(L2sInputError, match=r"fill\.copy.*gemm_slowdown"):
            parse_device(raw)


def _allreduce_beside_fill(nbytes: int) -> StepGraph:
    """An all-reduce on the main stream and a fill of ``nbytes`` forked beside
    it at the same instant (the shape of ``bench tp``'s interference probe)."""
    sg = StepGraph(nodes={}, adj={}, main=["c"], fills=["f"])
    sg.add_node("c", _node("collective"))
    sg.add_node("f", _node("fill", fill=SimpleNamespace(nbytes=nbytes, kernel="copy")))
    sg.add_node("join", _node("join"))
    sg.add_edge("c", "join", STREAM)
    sg.add_edge("f", "join", {"delay": 0.0, "kind": "join"})
    return sg


def _ar_device(slowdown: float, launch_us: float = 0.0):
    """``_device`` with a 15 us all-reduce at TP 2 (any message) and a copy
    fill of ``allreduce_slowdown = slowdown``."""
    from l2sched.device import AllReduceModel
    dev = _device(allreduce={2: AllReduceModel(15.0, 1e12)})
    copy = dataclasses.replace(dev.fill_modes["copy"], allreduce_slowdown=slowdown,
                               launch_us=launch_us)
    return dataclasses.replace(dev, fill_modes={"copy": copy})


@pytest.mark.parametrize("nbytes, slowdown, finish", [
    (4_000_000, 0.0, 15.0),                 # not measured: the all-reduce is not slowed
    (4_000_000, 1.0, 4 + 15 - 4 / 2),       # 4 us read at 1/2: 2 us of work lost
    (40_000_000, 1.0, 30.0),                # the read outlasts it: all 15 us at 1/2
])
def test_a_fill_slows_a_concurrent_all_reduce_in_proportion_to_the_overlap(
        nbytes, slowdown, finish):
    sim = simulate(_allreduce_beside_fill(nbytes), _ar_device(slowdown), tp=2, tokens=1,
                   hidden=16)
    assert sim.timing["c"].finish == pytest.approx(finish)
    # fill_slowdown_scale does not apply: the term is measured on the all-reduce
    scaled = dataclasses.replace(_ar_device(slowdown), fill_slowdown_scale=4.0)
    assert simulate(_allreduce_beside_fill(nbytes), scaled, tp=2, tokens=1,
                    hidden=16).timing["c"].finish == pytest.approx(finish)


@pytest.mark.parametrize("extra", [0.5, 3.0, 6.0, 12.0])
def test_the_derived_slowdown_reproduces_the_measured_extra(extra):
    from l2sched.device import slowdown_for_extra
    # a 16 MB fill: 2 us launch, then 16 us of reads beside a 15 us all-reduce
    s = slowdown_for_extra(extra, 15.0, 2.0, 16.0)
    sim = simulate(_allreduce_beside_fill(16_000_000), _ar_device(s, launch_us=2.0), tp=2,
                   tokens=1, hidden=16)
    assert sim.timing["c"].finish == pytest.approx(15.0 + extra)


def test_slowdown_for_extra_says_when_nothing_explains_the_extra():
    from l2sched.device import slowdown_for_extra
    assert slowdown_for_extra(-1.0, 15.0, 2.0, 16.0) == 0.0
    assert slowdown_for_extra(3.0, 1.5, 2.0, 16.0) is None   # reads start after it ended
    assert slowdown_for_extra(5.0, 15.0, 2.0, 4.0) is None   # a 4 us read cannot add 5 us
    # the two regimes meet where the read just covers the slowed all-reduce
    assert slowdown_for_extra(3.0, 15.0, 2.0, 16.0) == pytest.approx(3.0 / 13.0)
    assert slowdown_for_extra(3.0, 15.0, 2.0, 16.0 - 1e-9) == pytest.approx(3.0 / 13.0)


def test_allreduce_slowdown_is_optional_checked_and_replaces_the_extra():
    raw = _raw_profile()
    for fm in raw["fill"].values():
        if isinstance(fm, dict):
            fm.pop("allreduce_slowdown", None)
    assert parse_device(raw).fill_modes["copy"].allreduce_slowdown == 0.0
    raw["fill"]["copy"]["allreduce_slowdown"] = 1.5
    assert parse_device(raw).fill_modes["copy"].allreduce_slowdown == 1.5
    for bad in (-0.1, "x", 101):
        raw["fill"]["copy"]["allreduce_slowdown"] = bad
        with pytest.raises(L2sInputError, match=r"fill\.copy.*allreduce_slowdown"):
            parse_device(raw)
    raw["fill"]["copy"]["allreduce_slowdown"] = 1.5
    raw["fill"]["copy"]["allreduce_extra_us"] = 5.0
    with pytest.raises(L2sInputError, match=r"allreduce_extra_us: replaced by allreduce_slowdown"):
        parse_device(raw)
