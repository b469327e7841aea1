"""The bench's measurement side on CPU: the timed-graph code path in dry mode
(meta device, fake clock), the in-graph record reduction with exact values,
and the report's errors and verdicts from a synthetic result."""
import argparse
import json
import statistics

import pytest

torch = pytest.importorskip("torch")

from l2sched.adapters import glm5next as ad
from l2sched.bench import add_arguments, main
from l2sched.bench.report import (lint_verdict, measured_verdict, noise_us,
                                  report)
from l2sched.bench.run import TimedGraph, _collect, _summarize, run
from l2sched.bench.step import FakeEvent
from l2sched.devices import load_device
from l2sched.inventory import analytical_inventory, load_model_config
from l2sched.lint import run_lint
from l2sched.semantic import load_schedule

SCHED = "schedules/glm53-flash-h200-tp4.l2s"
BAD = "schedules/bench/fill-over-experts.l2s"


@pytest.fixture(scope="module")
def inv():
    return analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)


def _active_ops(inv):
    n = len(inv.layers)
    return {f"{i}:{op.name}" for i, kind in enumerate(inv.kinds)
            for op in ad.decode_timeline(kind)
            if ad.condition_holds(op.condition, i, n, inv.tp, inv.ep)}


def test_dry_timed_graph(tmp_path, inv):
    out = tmp_path / "r.json"
    assert main(["run", "--dry", "--tokens", "1", "--replays", "3", "--warmup", "1",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert "errors" not in d and d["per_op"] == "graph"
    issues = {a["name"]: a["plan_issues"] for a in d["arms"]}
    want_ops = _active_ops(inv)
    n_moe = sum(1 for k in inv.kinds if k.mlp == "moe")
    arms = d["per_m"]["1"]["arms"]
    assert set(arms) == set(issues)
    for name, a in arms.items():
        assert a["per_op_source"] == "graph"
        assert a["in_graph_step_us"]["n"] == 3
        assert set(a["ops"]) == want_ops
        # fake clock: +1 us per event; before/after of one op are adjacent
        assert all(v["dur_us"] == pytest.approx(1.0) for v in a["ops"].values())
        assert a["expert_stream_us"]["median"] == pytest.approx(2.0 * n_moe)
        assert a["main_gap_us"]["median"] == pytest.approx(1.0)
        # one side event per op at which fills were issued, all fills counted
        assert all(f["fills"] >= 1 for f in a["fills"].values())
        assert sum(f["fills"] for f in a["fills"].values()) == issues[name]
        for i in range(len(inv.layers)):
            fin = [a["ops"][f"{i}:{op.name}"]["finish_us"]
                   for op in ad.decode_timeline(inv.kinds[i])
                   if f"{i}:{op.name}" in a["ops"] and a["ops"][f"{i}:{op.name}"]["stream"] == "main"]
            assert fin == sorted(fin)
    assert issues["none"] == 0 and issues["compiled"] > 0


def test_dry_eager_fallback():
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--dry", "--tokens", "4", "--replays", "1", "--warmup", "0",
                         "--eager-reps", "2"])
    args.per_op = "eager"
    d = run(args)
    a = d["per_m"]["4"]["arms"]["compiled"]
    assert a["per_op_source"] == "eager" and a["eager_step_us"]["n"] == 2
    assert "in_graph_step_us" not in a
    issues = next(x["plan_issues"] for x in d["arms"] if x["name"] == "compiled")
    assert sum(f["fills"] for f in a["fills"].values()) == issues


def test_collect_exact():
    E = FakeEvent
    recs = [(3, "attn.o_proj", "main", E(10), E(20)), (3, "moe.w13", "main", E(30), E(50)),
            (3, "moe.w2", "main", E(52), E(60)), (4, "attn.o_proj", "main", E(70), E(80)),
            (4, "moe.shared.gate_up_proj", "aux", E(71), E(75)),
            (4, "moe.w13", "main", E(90), E(95)), (4, "moe.w2", "main", E(96), E(99))]
    side = [(3, "attn.o_proj", 1, E(25)), (4, "attn.o_proj", 2, E(93)),
            (4, "moe.w2", 1, E(101)), (4, "step_end", 3, E(102))]
    acc = {}
    for shift in (0.0, 0.0, 4.0):   # three replays; the last one 4 us longer
        tg = TimedGraph(None, recs, side, E(0), E(100 + shift))
        _collect(tg, acc)
    s = _summarize(acc, "graph")
    assert s["in_graph_step_us"]["median"] == 100
    assert s["in_graph_step_us"]["p90"] == pytest.approx(103.2)
    assert s["expert_stream_us"]["median"] == 20 + 8 + 5 + 3
    assert s["main_gap_us"]["median"] == statistics.median([10, 2, 10, 10, 1])
    assert s["ops"]["4:moe.shared.gate_up_proj"] == {"dur_us": 4, "start_us": 71,
                                                     "finish_us": 75, "stream": "aux"}
    f = s["fills"]
    assert f["3:attn.o_proj"] == {"fills": 1, "fill_exit_us": 25, "expert_start_us": 30,
                                  "exit_before_experts_us": 5}
    assert f["4:attn.o_proj"]["exit_before_experts_us"] == 90 - 93
    assert f["4:attn.o_proj"]["fills"] == 2
    # after the last MoE layer's experts: no expert stream to finish before
    assert f["4:moe.w2"]["expert_start_us"] is None
    assert f["4:moe.w2"]["exit_before_experts_us"] is None
    assert f["4:step_end"] == {"fills": 3, "fill_exit_us": 102, "expert_start_us": None,
                               "exit_before_experts_us": None}


def test_verdict_rules():
    assert noise_us({"p10": 975, "p90": 985}, {"p10": 990, "p90": 1010}) == 10
    assert measured_verdict(-10.0, 10.0) == "ok"
    assert measured_verdict(-10.5, 10.0) == "bad"
    assert measured_verdict(+50.0, 10.0) == "ok"
    assert lint_verdict(["L2S101"], +50.0, 10.0) == ("bad", "error L2S101")
    assert lint_verdict([], -25.0, 10.0) == ("bad", "predicted slowdown 25 us > noise 10 us")
    assert lint_verdict([], -9.0, 10.0) == ("ok", "")
    assert lint_verdict([], +300.0, 10.0) == ("ok", "")


def _ops_from(sg, sim, dur_scale, time_scale):
    n = sg.num_layers
    out = {}
    for v in sg.graph.nodes:
        d = sg.graph.nodes[v]
        if d["pos"] >= n or not d["active"] or d["stream"] not in ("main", "aux"):
            continue
        t = sim.timing[v]
        out[f"{d['layer']}:{d['op']}"] = {"dur_us": dur_scale * (t.finish - t.start),
                                          "start_us": time_scale * t.start,
                                          "finish_us": time_scale * t.finish,
                                          "stream": d["stream"]}
    return out


def _st(med, p10, p90, n=25):
    return {"median": med, "p10": p10, "p90": p90, "n": n}


def test_report_synthetic(tmp_path, inv):
    cfg = load_model_config(None)
    prof = load_device("h200")
    sched = {"compiled": load_schedule(SCHED, []), "bench/fill-over-experts": load_schedule(BAD, [])}
    lint = {k: run_lint(s, inv, device=prof, tokens=1, model_config=cfg) for k, s in sched.items()}
    base = lint["compiled"]
    # none: durations twice the lint's modeled ones, finish times 1.25 x its baseline's
    none_ops = _ops_from(base.base_sg, base.base, 2.0, 1.25)
    arms = {
        "none": {"per_op_source": "graph", "ops": none_ops, "fills": {},
                 "graph_step_us": _st(1000, 990, 1010), "timed_graph_step_us": _st(1050, 1040, 1060),
                 "expert_stream_us": _st(200.0, 199, 201)},
        "compiled": {"per_op_source": "graph",
                     "ops": _ops_from(lint["compiled"].sg, lint["compiled"].sim, 1.0, 1.25),
                     "fills": {"3:attn.o_proj": {"fills": 1, "exit_before_experts_us": 20.0},
                               "3:moe.all_reduce": {"fills": 1, "exit_before_experts_us": 35.0}},
                     "graph_step_us": _st(980, 975, 985), "timed_graph_step_us": _st(1029, 1020, 1040),
                     "expert_stream_us": _st(203.0, 202, 204)},
        "bench/fill-over-experts": {
            "per_op_source": "graph",
            "ops": _ops_from(lint["bench/fill-over-experts"].sg, lint["bench/fill-over-experts"].sim,
                             1.0, 1.25),
            "fills": {f"{i}:moe.align": {"fills": 1, "exit_before_experts_us": m}
                      for i, m in ((3, -4.0), (4, -2.0), (5, 6.0))},
            "graph_step_us": _st(1030, 1020, 1040), "expert_stream_us": _st(210.0, 209, 211)},
    }
    res = {"arms": [{"name": "none", "path": None, "overrides": []},
                    {"name": "compiled", "path": SCHED, "overrides": []},
                    {"name": "bench/fill-over-experts", "path": BAD, "overrides": []}],
           "machine": {"gpu": "synthetic"}, "replays": 25,
           "per_m": {"1": {"arms": arms, "distinct_experts": 8,
                           "ideal": {"ideal_gain_us": 200.0, "consumers": []}}}}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(res))
    s = report(str(src), str(tmp_path / "s.json"), str(tmp_path / "s.md"), "cmd")
    m = s["per_m"]["1"]
    c, b = m["arms"]["compiled"], m["arms"]["bench/fill-over-experts"]
    # measured side
    assert (c["gain_us"], c["noise_us"], c["measured_verdict"]) == (20, 10, "ok")
    assert (b["gain_us"], b["noise_us"], b["measured_verdict"]) == (-30, 10, "bad")
    assert c["gain_of_ideal"] == pytest.approx(0.1)
    assert c["timing_overhead_pct"] == pytest.approx(5.0)
    assert c["expert_slowdown_pct"] == pytest.approx(1.5)
    assert b["expert_slowdown_pct"] == pytest.approx(5.0)
    assert (c["fill_points"], c["exits_after_expert_start"], c["min_margin_us"],
            c["median_margin_us"]) == (2, 0, 20.0, 27.5)
    assert (b["exits_after_expert_start"], b["min_margin_us"], b["median_margin_us"]) == (2, -4.0, -2.0)
    # uncalibrated finish-time error: measured = 1.25 x predicted -> 0.25/1.25
    for r in (c, b):
        assert r["uncalibrated"]["finish_err"]["median"] == pytest.approx(0.2)
        assert r["uncalibrated"]["finish_err"]["p90"] == pytest.approx(0.2)
    assert m["none_finish_err"]["uncalibrated"]["median"] == pytest.approx(0.2)
    assert s["finish_err_median"]["uncalibrated"] == pytest.approx(0.2)
    # calibration = the none arm's durations per (kind, op): 2 x the modeled ones
    g, n = base.base_sg.graph, base.base_sg.num_layers
    want = {}
    for v in g.nodes:
        d = g.nodes[v]
        if d["pos"] < n and d["active"] and d["stream"] in ("main", "aux"):
            t = base.base.timing[v]
            want[(d["kind"], d["op"])] = 2.0 * (t.finish - t.start)
    assert m["calibration_us"] == pytest.approx({f"{k}|{o}": v for (k, o), v in want.items()})
    agree = 0
    for name, r in (("compiled", c), ("bench/fill-over-experts", b)):
        for label, meas in (("uncalibrated", None), ("calibrated", want)):
            lr = run_lint(sched[name], inv, device=prof, tokens=1, model_config=cfg, measured=meas)
            pred = lr.step_period("base") - lr.step_period("sim")
            errs = sorted({f.code for f in lr.findings if f.severity == "error"})
            assert r[label]["pred_gain_us"] == pytest.approx(pred, abs=1e-6)
            assert r[label]["errors"] == errs
            assert (r[label]["verdict"], r[label]["reason"]) == lint_verdict(errs, pred, 10)
        assert r["agree"] == (r["calibrated"]["verdict"] == r["measured_verdict"])
        agree += r["agree"]
    assert s["verdict_agreement"] == {"agree": agree, "total": 2}
    md = (tmp_path / "s.md").read_text()
    assert "Per-op times: graph (in-graph" in md
    assert f"Lint verdict agreement (calibrated): {agree}/2" in md
    assert "| bench/fill-over-experts | 1 | 210.0 | +5.00% | 3 | 2 | -4.0 / -2.0 |" in md
    assert "| compiled | 980 / 1029 / - (+5.0%) |" in md


def test_report_refuses_dry_result(tmp_path):
    out = tmp_path / "r.json"
    main(["run", "--dry", "--tokens", "1", "--replays", "1", "--out", str(out)])
    with pytest.raises(ValueError, match="no CUDA-graph step times"):
        report(str(out), str(tmp_path / "s.json"), str(tmp_path / "s.md"))
