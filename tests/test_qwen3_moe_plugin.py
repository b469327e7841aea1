"""The vLLM plugin on vLLM 0.33.0's real ``Qwen3MoeForCausalLM``, CPU, gloo
ranks (issue 33), built and driven with tests/test_qwen3_moe_vllm.py's
config, CPU substitutions and forwards:

- TP2 (two ranks), compilation mode NONE (``enforce_eager``): the plugin's
  post-load step installs the every-hook schedule (routed experts left out
  of its targets) with the dry-run backend
  on each rank (one summary line per rank, naming the device profile's
  unmeasured terms), every fill fires in the adapter's timeline order with
  the real all-reduces, and outputs are bitwise identical with and without
  the plan;
- TP1 under vLLM's default compilation mode (``enforce_eager=False``; on
  the CPU platform DYNAMO_TRACE_ONCE, on CUDA VLLM_COMPILE): one
  ``prefetch OFF: unsupported compilation`` line naming the mode and how to
  serve, nothing installed;
- PP2 (two ranks, vLLM's pipeline-parallel groups on gloo): each rank plans
  only its own layers (no fill of another rank's layer), the join runs on
  its last real layer, before a non-last rank returns its
  ``IntermediateTensors``, and outputs are bitwise identical.

Slow (about a minute per layout); ``-m vllm``.
"""

from __future__ import annotations

import os

import pytest
import test_qwen3_moe_vllm as qv
from test_pp_plan import pp_schedule
from vllm_cpu import plugin_log_records, run_ranks, vllm_available

from l2sched.model.adapters import get_adapter

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]
AD = get_adapter("qwen3_moe")
TOKENS = 3


def plugin_schedule(tp: int) -> str:
    """tests/test_qwen3_moe_vllm.py's every-hook schedule without the routed
    experts among the targets: the plugin's lint gate refuses a fill of
    them (the router picks a data-dependent subset per token)."""
    return qv.every_hook_schedule(tp, False).replace(
        "this mlp.*", "this mlp.* except mlp.experts.*")


def _activate(model, cfg, text: str, tmpdir: str, **section):
    """The plugin's post-load step with ``text`` as the schedule file (dry-run
    backend); returns ``(installed, log records)``."""
    from l2sched.vllm import plugin

    path = os.path.join(tmpdir, "q.l2s")
    with open(path, "w") as f:
        f.write(text)
    cfg.additional_config = {"l2sched": {"schedule": path, "backend": "dry-run",
                                         **section}}
    records = plugin_log_records()
    got = plugin.activate_after_load(model, cfg)
    return got, list(records)


def _tp_rank(ctx) -> dict:
    import tempfile

    from l2sched.vllm import plugin

    model = ctx.build()
    qv.fill_weights(model)
    trace: list = []
    qv._cpu_substitutions(model, trace)
    plain = qv._forward(model, ctx.vllm_config)
    with tempfile.TemporaryDirectory() as d:
        inst, records = _activate(model, ctx.vllm_config,
                                  plugin_schedule(ctx.tp), d)
    assert inst is not None, records
    qv.record_events(inst.runtime, trace)
    trace.clear()
    hooked = qv._forward(model, ctx.vllm_config)
    out = {"records": records, "trace": list(trace), "same": plain == hooked,
           "issues": [(wi.window, wi.hook, wi.layer) for wi in inst.plan.issues]}
    inst.retire()
    plugin.INSTALLED.clear()
    out["same_after"] = qv._forward(model, ctx.vllm_config) == plain
    return out


def _compiled_rank(ctx) -> dict:
    import tempfile

    from vllm.config import CompilationMode

    from l2sched.vllm import plugin

    model = ctx.build()
    cc = ctx.vllm_config.compilation_config
    out = {"mode": cc.mode.name, "do_not_compile": model.model.do_not_compile}
    with tempfile.TemporaryDirectory() as d:
        out["default"] = _activate(model, ctx.vllm_config, plugin_schedule(1),
                                   d)[1]
        cc.mode = CompilationMode.STOCK_TORCH_COMPILE
        out["stock"] = _activate(model, ctx.vllm_config, plugin_schedule(1),
                                 d)[1]
    out["installed"] = len(plugin.INSTALLED)
    return out


def _pp_forward(model, cfg, pp_rank: int) -> tuple[bytes, str]:
    """One decode-shaped forward of this PP rank: rank 0 from token ids, rank
    1 from fixed intermediate tensors; the output's bytes and type."""
    import torch
    from vllm.forward_context import BatchDescriptor, set_forward_context
    from vllm.sequence import IntermediateTensors

    ids = torch.arange(TOKENS) * 7 + 3
    pos = torch.full((TOKENS,), 7, dtype=torch.long)
    inter = None
    if pp_rank > 0:
        g = torch.Generator().manual_seed(5)
        h = qv.TINY["hidden_size"]
        inter = IntermediateTensors({
            "hidden_states": (torch.randn(TOKENS, h, generator=g) * 0.1).bfloat16(),
            "residual": (torch.randn(TOKENS, h, generator=g) * 0.1).bfloat16()})
    bd = BatchDescriptor(num_tokens=TOKENS, num_reqs=TOKENS, uniform=True)
    with torch.inference_mode(), set_forward_context(None, cfg, num_tokens=TOKENS,
                                                     batch_descriptor=bd):
        out = model(ids, pos, intermediate_tensors=inter)
    if isinstance(out, IntermediateTensors):
        t = torch.cat([out["hidden_states"], out["residual"]])
        return t.float().numpy().tobytes(), "IntermediateTensors"
    return out.float().numpy().tobytes(), type(out).__name__


def _pp_rank(ctx) -> dict:
    import tempfile

    from vllm.distributed import get_pp_group

    from l2sched.vllm import plugin

    pp_rank = get_pp_group().rank_in_group
    model = ctx.build()
    qv.fill_weights(model)
    trace: list = []
    qv._cpu_substitutions(model, trace)
    # the model's return, after every hook of its layers (on the top-level
    # model: Qwen3MoeModel's decorated __call__ skips nn.Module hooks)
    model.register_forward_hook(lambda m, a, o: trace.append(
        ("return", type(o).__name__)))
    plain, kind = _pp_forward(model, ctx.vllm_config, pp_rank)
    with tempfile.TemporaryDirectory() as d:
        inst, records = _activate(model, ctx.vllm_config, pp_schedule(1), d)
    assert inst is not None, records
    qv.record_events(inst.runtime, trace)
    trace.clear()
    hooked, _ = _pp_forward(model, ctx.vllm_config, pp_rank)
    out = {"pp_rank": pp_rank, "records": records, "trace": list(trace),
           "same": plain == hooked, "returned": kind,
           "own": [i for i, layer in enumerate(model.model.layers)
                   if type(layer).__name__ != "PPMissingLayer"],
           "plan": [(wi.window, wi.hook, wi.layer, sorted({r.layer for r in wi.ranges}))
                    for wi in inst.plan.issues]}
    inst.retire()
    plugin.INSTALLED.clear()
    return out


_CACHE: dict = {}


def _run(name):
    if name not in _CACHE:
        fn, kw = {"tp2": (_tp_rank, dict(tp=2)),
                  "compiled": (_compiled_rank, dict(tp=1, engine_kw={
                      "enforce_eager": False})),
                  "pp2": (_pp_rank, dict(tp=1, pp=2))}[name]
        _CACHE[name] = run_ranks(fn, qv.TINY, device="cpu", timeout=900,
                                 architecture=qv.ARCH, **kw)
    return _CACHE[name]


def test_tp2_installs_one_summary_line_per_rank():
    for rank, r in enumerate(_run("tp2")):
        lines = [x for x in r["records"] if " installed, backend" in x]
        assert len(lines) == 1, r["records"]
        assert lines[0].startswith(f"INFO l2sched: TP rank {rank}/2: schedule "
                                   "every_hook ("), lines[0]
        assert "backend dry-run, device h200, lint h200: 0 errors" in lines[0]
        assert "gqa+dense: " in lines[0] and "gqa+moe: " in lines[0]
        assert not [x for x in r["records"] if "prefetch OFF" in x]


def test_tp2_summary_names_the_unmeasured_profile_terms():
    """Issue 32/33 item 4: the h200 profile's terms a TP2 lint rests on that
    were not measured on the H200 (``unmeasured_terms``), at the line's
    end."""
    from l2sched.device import load_device
    from l2sched.device.provenance import unmeasured_terms

    h200 = load_device("h200")
    terms = unmeasured_terms(h200, 2, {h200.fill_default})
    assert terms  # the shipped h200 profile keeps estimates
    for r in _run("tp2"):
        line = [x for x in r["records"] if " installed, backend" in x][0]
        shown = ", ".join(terms[:3]) + (f", {len(terms) - 3} more" if len(terms) > 3
                                        else "")
        assert line.endswith(f"; {len(terms)} unmeasured profile terms: {shown}"), line


def test_tp2_every_fill_fires_in_timeline_order_and_outputs_are_identical():
    for rank, r in enumerate(_run("tp2")):
        issued = {(h, layer) for _w, h, layer in r["issues"]}
        want = [e for e in qv.expected_order(AD.layer_kinds(qv.TINY), 2)
                if e[0] != "fork" or (e[1], e[2]) in issued]
        assert len([e for e in want if e[0] == "fork"]) == len(r["issues"]) > 8
        assert qv.observed_order(r["trace"]) == want, f"rank {rank}"
        assert r["same"] and r["same_after"], f"rank {rank}"


def test_compiled_model_is_refused_with_one_line():
    (r,) = _run("compiled")
    assert r["do_not_compile"] is False  # vLLM's decorator compiles Qwen3MoeModel
    for case, what in (("default", "Qwen3MoeModel"), ("stock", "the whole model")):
        mode = r["mode"] if case == "default" else "STOCK_TORCH_COMPILE"
        off = [x for x in r[case] if "l2sched:" in x]
        assert off == [f"ERROR l2sched: TP rank 0/1: prefetch OFF: unsupported "
                       f"compilation: vLLM compiles {what} with torch.compile "
                       f"(compilation_config mode {mode}), which traces l2sched's "
                       "hooks instead of running them at every step; serve with "
                       "--compilation-config '{\"mode\": 0}' (mode NONE; decode keeps "
                       "FULL CUDA graphs) or --enforce-eager"], r[case]
    assert r["mode"] in ("DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
    assert r["installed"] == 0


def test_pp2_each_rank_plans_and_joins_its_own_layers():
    ranks = _run("pp2")
    assert [r["own"] for r in ranks] == [[0, 1], [2, 3]]
    kinds = AD.layer_kinds(qv.TINY)
    for r in ranks:
        p, own = r["pp_rank"], r["own"]
        lines = [x for x in r["records"] if " installed, backend" in x]
        assert len(lines) == 1 and lines[0].startswith(
            f"INFO l2sched: TP rank 0/1, PP rank {p}/2: schedule pp_test"), r["records"]
        # only its own layers, no fill of another rank's layer
        assert r["plan"] and all(layer in own and set(targets) <= set(own)
                                 for _w, _h, layer, targets in r["plan"]), r["plan"]
        # the last layer of the rank has no next-layer window
        assert ("B", own[-1]) not in {(w, layer) for w, _h, layer, _t in r["plan"]}
        assert ("B", "attn.post_all_reduce", own[0], [own[-1]]) in r["plan"]
        # fills in timeline order in its layers, the join on its last real
        # layer, before the model returns (IntermediateTensors on rank 0)
        order = qv.observed_order(r["trace"])
        want = [e for e in qv.expected_order(kinds, 1)
                if e == ("join",) or e[-1] in own]
        issued = {(h, layer) for _w, h, layer, _t in r["plan"]}
        want = [e for e in want if e[0] != "fork" or (e[1], e[2]) in issued]
        assert order == want, (order, want)
        assert r["trace"][-1] == ("return", r["returned"])
        assert [e[1] for e in r["trace"] if e[0] == "l2s"][-1] == "join"
        assert r["same"]
    assert [r["returned"] for r in ranks] == ["IntermediateTensors", "Tensor"]
