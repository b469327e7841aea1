"""Issue 36: the fork cost of a fill in the captured decode step
(``latency.fill_fork_m`` / ``latency.fill_fork_us``): read and checked at
file:line:col, named where it came from, charged by the simulation at the
hook op per fill forked there, and measured by the profile's ``fill_fork``
probe (its arithmetic on a synthetic ``bench run`` result; the probe's arms
through ``bench run --dry``)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from extras import TORCH_MISSING
from test_profile import PROV, synthetic_results

from l2sched.device import load_device, load_device_text
from l2sched.device.provenance import conservative_value, field_origins, unmeasured_terms
from l2sched.errors import L2sInputError
from l2sched.lint import lint_path
from l2sched.lint.graph import StepGraph
from l2sched.lint.noise import aa_noise_floor
from l2sched.lint.simulate import simulate
from l2sched.bench.arms import spin_collectives
from l2sched.profile.fill_fork import (check_fill_fork, fill_fork_markdown,
                                       fill_fork_summary, probe_fill_fork)
from l2sched.profile.write import derive, profile_markdown, profile_toml

SHIPPED = load_device("h200")
#: A profile `l2sched profile` measured on the lent H200 with the fill_fork probe
#: (capture launch fork; benchmarks/results/h200-2026-12-03-full-profiles/).
FULL_PROFILE = (Path(__file__).resolve().parent.parent / "benchmarks" / "results"
                / "h200-2026-12-03-full-profiles" / "full1.toml")
#: The fork cost of the lent H200 as the fill_fork rule reads diag-fork run 1
#: (window C alone at 0.5 MB: 95.5 / 42 and 177.2 / 42 us; docs/lint.md,
#: "Fork cost"), which the shipped profile does not carry.
FORK_LINES = "fill_fork_m = [4, 16]\nfill_fork_us = [2.274, 4.219]\n"
AFTER = "fill_slowdown_scale = 1\n"


def _with_lines(lines: str) -> str:
    """The shipped h200 profile with ``lines`` in its ``[latency]`` table."""
    assert SHIPPED.source_text.count(AFTER) == 1
    return SHIPPED.source_text.replace(AFTER, AFTER + lines)


H200 = load_device_text(_with_lines(FORK_LINES), "h200-fork.toml")


def test_the_term_reads_back_and_is_interpolated_in_log_m():
    dev = load_device_text(_with_lines("fill_fork_m = [4, 16]\nfill_fork_us = [2.0, 4.0]\n"),
                           "p.toml")
    assert dev.fill_fork_m == (4, 16) and dev.fill_fork_us == (2.0, 4.0)
    # flat outside the measured M, linear in log M between them (8 is halfway)
    assert [dev.fill_fork_at(m) for m in (1, 4, 8, 16, 256)] == pytest.approx(
        [2.0, 2.0, 3.0, 4.0, 4.0])
    none = load_device_text(_with_lines(""), "p.toml")
    assert none.fill_fork_m == () and none.fill_fork_at(16) == 0.0


@pytest.mark.parametrize("lines, key, msg", [
    ("fill_fork_us = [2.0]\n", "fill_fork_us", "fill_fork_m and fill_fork_us go together"),
    ("fill_fork_m = [16, 4]\nfill_fork_us = [2.0, 4.0]\n", "fill_fork_m",
     "token counts must increase"),
    ("fill_fork_m = [4, 16]\nfill_fork_us = [2.0, -1]\n", "fill_fork_us",
     "-1 is not a time in 0..1e+06 us"),
    ("fill_fork_m = [4, 16]\nfill_fork_us = [2.0]\n", "fill_fork_us",
     "fill_fork_us has 1 values, fill_fork_m has 2"),
    ("fill_fork_m = 4\nfill_fork_us = [2.0]\n", "fill_fork_m", "expected a non-empty list"),
    ("fill_fork_m = [0]\nfill_fork_us = [2.0]\n", "fill_fork_m", "0 is not a token count"),
])
def test_a_bad_fork_cost_is_an_error_at_its_key(lines, key, msg):
    text = _with_lines(lines)
    with pytest.raises(L2sInputError) as e:
        load_device_text(text, "bad.toml")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(key + " ="))
    assert f"bad.toml:{line}:1: latency.{key}: " in str(e.value)
    assert msg in str(e.value)


def test_a_missing_term_is_not_free_and_a_given_one_is_measured():
    # a measured profile's term (no [origin] entry: its [measured] record decides)
    assert field_origins(H200)["latency.fill_fork_us"].kind == "measured"
    assert not any(t.startswith("latency.fill_fork_us") for t in unmeasured_terms(H200, 4))
    # a profile without the term (the shipped ones) charges 0 us per fork and
    # says that it was not measured
    for dev in (load_device("sm120-rtx-pro-6000-maxq"), SHIPPED):
        assert dev.fill_fork_at(16) == 0.0
        assert "latency.fill_fork_us (not measured)" in unmeasured_terms(dev, 4)
    # a base of another GPU gives every M the conservative value
    assert conservative_value("latency.fill_fork_us", [2.274, 4.219])[0] == [7.0, 7.0]


def test_a_fork_cost_measured_with_another_capture_launch_is_named_first():
    """Issue 36: the fork cost differs by capture launch (with `deferred`, windows A
    and C lost 5-9% of what they lost with `fork` at M=16 on the H200), so a profile
    measured with `fork` does not hold the cost of an engine that runs `deferred`; the
    plugin's summary names it."""
    from l2sched.device.provenance import fill_fork_launch
    from l2sched.vllm.config import PluginConfig
    from l2sched.vllm.summary import unmeasured_note
    measured = load_device(str(FULL_PROFILE))
    assert fill_fork_launch(measured) == "fork"
    same = unmeasured_terms(measured, 1, capture_launch="fork")
    other = unmeasured_terms(measured, 1, capture_launch="deferred")
    assert other == ["latency.fill_fork_us (measured with capture launch fork, "
                     "not deferred)"] + same
    assert unmeasured_terms(measured, 1) == same  # launch not known: nothing to compare
    # no term, or a term without the record of its launch: nothing to compare either
    assert fill_fork_launch(SHIPPED) is None and fill_fork_launch(H200) is None
    assert unmeasured_terms(H200, 4, capture_launch="leaf") == unmeasured_terms(H200, 4)
    # the plugin's summary: its capture launch, else the runtime's default (fork)
    plan = SimpleNamespace(issues=[SimpleNamespace(kernel="copy")])
    sched = SimpleNamespace(kernel=None)
    note = unmeasured_note(measured, 1, plan, sched, PluginConfig("s.l2s", capture_launch="deferred"))
    assert note.startswith("; 4 unmeasured profile terms: latency.fill_fork_us (measured "
                           "with capture launch fork, not deferred), "), note
    assert "fill_fork" not in unmeasured_note(measured, 1, plan, sched, PluginConfig("s.l2s"))


def _small(pos: int, op: str) -> dict:
    return {"pos": pos, "layer": pos, "kind": "k", "op": op, "cls": "small",
            "stream": "main", "active": True, "reads": [], "state_bytes": 0,
            "eager_break": False, "fill": None}


def _fill(window: str, nbytes: int) -> dict:
    return {"pos": 0, "layer": 0, "kind": "k", "op": f"fill {window}", "cls": "fill",
            "stream": "side", "active": True, "reads": [], "eager_break": False,
            "fill": SimpleNamespace(nbytes=nbytes, kernel="copy", window=window)}


def _three_ops_two_forks() -> StepGraph:
    """Main ops a -> b -> c; fills A and B (1 MB each) forked at a, fill Z
    (no bytes: the runtime forks nothing for it) at b; one join."""
    sg = StepGraph({}, {}, ["0:a", "0:b", "0:c"], ["0:fill:A", "0:fill:B", "0:fill:Z"])
    for v in ("a", "b", "c"):
        sg.add_node(f"0:{v}", _small(0, v))
    for w, n in (("A", 1 << 20), ("B", 1 << 20), ("Z", 0)):
        sg.add_node(f"0:fill:{w}", _fill(w, n))
    sg.add_node("join", {**_small(0, "join"), "cls": "join", "stream": "side"})
    stream, fork = {"delay": 0.0, "kind": "stream"}, {"delay": 0.0, "kind": "fork"}
    for u, v, e in (("0:a", "0:b", stream), ("0:b", "0:c", stream), ("0:c", "join", stream),
                    ("0:a", "0:fill:A", fork), ("0:a", "0:fill:B", fork),
                    ("0:b", "0:fill:Z", fork),
                    ("0:fill:A", "0:fill:B", {"delay": 0.0, "kind": "side"}),
                    ("0:fill:B", "0:fill:Z", {"delay": 0.0, "kind": "side"}),
                    ("0:fill:Z", "join", {"delay": 0.0, "kind": "join"})):
        sg.add_edge(u, v, e)
    return sg


def test_the_main_stream_waits_the_fork_cost_once_per_fill_forked_at_the_hook():
    gap = H200.kernel_gap_us
    with_term = dataclasses.replace(H200, fill_fork_m=(4, 16), fill_fork_us=(2.0, 4.0))
    without = dataclasses.replace(H200, fill_fork_m=(), fill_fork_us=())
    for dev, per_fill in ((with_term, 3.0), (without, 0.0)):  # M=8: 3 us per fill
        t = simulate(_three_ops_two_forks(), dev, tp=1, tokens=8, hidden=64).timing
        # two fills with bytes forked at a: b starts 2 x the fork cost later
        assert t["0:b"].start - t["0:a"].finish == pytest.approx(gap + 2 * per_fill)
        # the fill without bytes forks nothing: no cost after b
        assert t["0:c"].start - t["0:b"].finish == pytest.approx(gap)


def test_the_lint_charges_a_lone_window_its_measured_loss():
    """Window C alone at 0.5 MB (42 fills) in the bench's idle-interval
    picture: without the term the lint sees about nothing, with it the
    shipped profile's per-fill cost times the fills."""
    prof = spin_collectives(H200)
    off = dataclasses.replace(prof, fill_fork_m=(), fill_fork_us=())
    alone = ["window.A.budget=0MB", "window.A_MLA.budget=0MB", "window.B.budget=0MB",
             "window.C.budget=0.5MB"]
    for m in (4, 16):
        got = {}
        for name, dev in (("with", prof), ("without", off)):
            run = lint_path("schedules/glm53-flash-h200-tp4.l2s", alone, device_profile=dev,
                            tokens=m)
            got[name] = run.step_period("base") - run.step_period("sim")
            fills = sum(1 for i in run.plan.issues if i.nbytes > 0)
        assert fills == 42 and abs(got["without"]) < 1.0
        assert got["with"] - got["without"] == pytest.approx(-42 * H200.fill_fork_at(m),
                                                             abs=1.0)


def _arm(us: float, fills: int = 0) -> dict:
    """A ``bench run`` arm: untimed replays around ``us``, its timed graph's
    fills split over two hook ops."""
    arm = {"graph_step_us_all": [us - 2, us, us + 1, us - 1, us + 2]}
    if fills:
        arm["fills"] = {"3:attn.o_proj": {"fills": fills // 2},
                        "7:attn.o_proj": {"fills": fills - fills // 2}}
    return arm


def _bench(per_m: dict) -> dict:
    return {"per_m": {str(m): {"arms": {"none": _arm(none), "none-aa": _arm(none + 0.5),
                                        **{f"fork-{w}": _arm(none + d, n)
                                           for w, (d, n) in lone.items()}}}
                      for m, (none, lone) in per_m.items()}}


def test_the_probe_takes_the_median_window_per_fill_and_the_aa_floor_per_fill():
    res = _bench({4: (11000.0, {"A": (73.8, 31), "B": (10.0, 42), "C": (95.5, 42)}),
                  16: (20000.0, {"A": (162.1, 31), "B": (23.7, 42), "C": (177.2, 42)}),
                  64: (30000.0, {"A": (-40.0, 31), "B": (-30.0, 42), "C": (-20.0, 42)})})
    got = fill_fork_summary(res, "fork")
    assert got["tokens"] == [4, 16, 64] and got["capture_launch"] == "fork"
    # per fill: A 2.38 / B 0.24 / C 2.27 us at M=4; the median is C's
    assert got["fork_us"][:2] == pytest.approx([95.5 / 42, 177.2 / 42])
    assert got["per_m"][16]["per_fill_us"]["A"] == pytest.approx(162.1 / 31)
    assert got["per_m"][4]["fills"] == {"A": 31, "B": 42, "C": 42}
    # windows that gain give no negative cost
    assert got["fork_us"][2] == 0.0
    floor = aa_noise_floor(res["per_m"]["4"]["arms"]["none"]["graph_step_us_all"],
                           res["per_m"]["4"]["arms"]["none-aa"]["graph_step_us_all"])
    assert got["spread_us"][0] == pytest.approx(statistics.median(
        [floor / 31, floor / 42, floor / 42]))
    check_fill_fork(json.loads(json.dumps(got)))  # what a state file holds reads back
    md = "\n".join(fill_fork_markdown(json.loads(json.dumps(got))))
    assert "| 16 | 20000.0 |" in md and "20177.2, 42, +4.22" in md
    del res["per_m"]["4"]["arms"]["none-aa"]
    with pytest.raises(ValueError, match="no replays of arm 'none-aa' at M=4"):
        fill_fork_summary(res, "fork")
    res = _bench({4: (11000.0, {"A": (73.8, 31), "B": (10.0, 42), "C": (95.5, 0)})})
    with pytest.raises(ValueError, match="window C alone forked no fill"):
        fill_fork_summary(res, "fork")


def test_the_profile_writes_the_measured_term_or_keeps_the_base_one(tmp_path):
    res = synthetic_results()
    res["fill_fork"] = fill_fork_summary(_bench({
        4: (11000.0, {"A": (73.8, 31), "B": (10.0, 42), "C": (95.5, 42)}),
        16: (20000.0, {"A": (162.1, 31), "B": (23.7, 42), "C": (177.2, 42)})}), "leaf")
    derived = derive(res, H200, None, PROV)
    text = profile_toml("h200-measured", "test", PROV, derived, H200)
    dev = load_device_text(text, "p.toml")
    assert dev.fill_fork_m == (4, 16)
    assert dev.fill_fork_us == pytest.approx((2.274, 4.219), abs=1e-3)
    rec = dev.measured["latency.fill_fork_us"]
    assert rec["capture_launch"] == "leaf" and "capture launch leaf" in rec["probe"]
    assert len(rec["spread_us"]) == 2
    o = field_origins(dev)["latency.fill_fork_us"]
    assert o.kind == "measured" and o.probe.startswith("fill_fork")
    assert "## Fork cost in the decode step" in profile_markdown(PROV, res, derived)
    # --quick (or another TP): the probe is skipped; the base's term is kept
    # and named so on this GPU, and is conservative for another GPU
    res["fill_fork"] = {"skipped": "--quick"}
    kept = load_device_text(profile_toml("q", "t", PROV, derive(res, H200, None, PROV), H200),
                            "q.toml")
    assert kept.fill_fork_us == H200.fill_fork_us
    assert field_origins(kept)["latency.fill_fork_us"].kind == "base"
    other = {**PROV, "gpu": "NVIDIA RTX PRO 6000 Blackwell Max-Q", "sms": 188,
             "l2_bytes": 134_217_728, "compute_capability": [12, 0]}
    far = load_device_text(profile_toml("o", "t", other, derive(res, H200, None, other), H200),
                           "o.toml")
    assert far.fill_fork_us == (7.0, 7.0)
    assert field_origins(far)["latency.fill_fork_us"].kind == "conservative"
    # a base without the term: nothing is written, and it is named not measured
    bare = dataclasses.replace(H200, fill_fork_m=(), fill_fork_us=())
    none = load_device_text(profile_toml("n", "t", PROV, derive(res, bare, None, PROV), bare),
                            "n.toml")
    assert none.fill_fork_us == ()
    assert field_origins(none)["latency.fill_fork_us"].kind == "default"


@pytest.mark.parametrize("rec, want", [
    ({"tokens": [4], "fork_us": [-1.0], "spread_us": [0.1], "capture_launch": "fork"},
     "results.fill_fork.fork_us: -1.0 is not a time"),
    ({"tokens": [4, 16], "fork_us": [1.0], "spread_us": [0.1, 0.1], "capture_launch": "fork"},
     "results.fill_fork.fork_us: want one number per token count"),
    ({"tokens": [16, 4], "fork_us": [1.0, 1.0], "spread_us": [0.1, 0.1]},
     "results.fill_fork.tokens: want increasing token counts"),
    ({"tokens": [4], "fork_us": [1.0], "spread_us": [0.1]},
     "results.fill_fork.capture_launch: want the capture launch"),
])
def test_a_bad_fill_fork_record_in_the_state_is_an_error_naming_its_key(tmp_path, rec, want):
    from l2sched.profile.probes import STATE_KEYS
    from l2sched.profile.state import load_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"results": {"fill_fork": rec}}), encoding="utf-8")
    with pytest.raises(L2sInputError, match=want):
        load_state(str(path), STATE_KEYS)


def test_the_probe_runs_the_lone_windows_beside_none_and_its_aa_arm():
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES
    got = probe_fill_fork(SimpleNamespace(quick=False, dry=True, tp=4, fill_fork=True))
    assert {"none", "none-aa", "fork-A", "fork-B", "fork-C"} <= set(got["arms"])
    # the runtime's default capture launch, recorded with the result
    assert got["capture_launch"] in CAPTURE_LAUNCHES
    assert probe_fill_fork(SimpleNamespace(quick=True)) == {"skipped": "--quick"}
    assert "TP4" in probe_fill_fork(SimpleNamespace(quick=False, tp=8))["skipped"]
    # l2sched profile runs it only when asked (--fill-fork): the term is not additive
    assert probe_fill_fork(SimpleNamespace(quick=False, tp=4, fill_fork=False)) == {
        "skipped": "not asked (l2sched profile --fill-fork)"}


def test_the_profile_cli_asks_for_the_fork_probe_only_with_its_flag():
    from l2sched.cli.main import build_parser
    args = build_parser().parse_args(["profile", "-o", "x.toml"])
    assert args.fill_fork is False
    assert build_parser().parse_args(["profile", "-o", "x.toml", "--fill-fork"]).fill_fork


def test_a_resumed_state_runs_the_fork_probe_once_asked():
    from l2sched.profile.fill_fork import forget_unasked_fill_fork
    unasked = {"l2": {}, "fill_fork": {"skipped": "not asked (l2sched profile --fill-fork)"}}
    forget_unasked_fill_fork(unasked, asked=False)
    assert "fill_fork" in unasked  # still not asked: the record stays
    forget_unasked_fill_fork(unasked, asked=True)
    assert "fill_fork" not in unasked and "l2" in unasked  # asked now: it runs
    quick = {"fill_fork": {"skipped": "--quick"}}
    forget_unasked_fill_fork(quick, asked=True)
    assert quick == {"fill_fork": {"skipped": "--quick"}}  # other skips are kept


@pytest.mark.parametrize("extra,want", [(["--quick"], "which --quick skips: drop --quick"),
                                        (["--tp", "8"], "--fill-fork needs --tp 4")])
def test_asking_for_the_fork_probe_where_it_cannot_run_is_a_usage_error(tmp_path, capsys,
                                                                        extra, want):
    from l2sched.cli.main import main
    rc = main(["profile", "-o", str(tmp_path / "p.toml"), "--fill-fork"] + extra)
    assert rc == 2 and want in capsys.readouterr().err
    assert not (tmp_path / "p.toml").exists()
