"""The TP-emulation instrument (``lab/engine_tp``, issue 44) on CPU.

Pure parts: ``rank_config`` (what is divided, token ids kept inside the
rank's vocabulary, refusals), ``layers_that_fit``, the emulation profile
(its all-reduce model is the source profile's, fills do not slow the idle
intervals, it loads), the report's arithmetic.

On vLLM 0.33.0's real GLM-5.3 module tree (tiny config, gloo ranks, the
CPU substitutions of ``tests/vllm_forward.py``): rank 0 of the TP4 model,
with vLLM's real all-reduces, and the rank config served at TP1 with
``install_idle``, run the same decode-shaped forward; their ordered GEMMs
are identical and every real all-reduce of rank 0 has an idle interval at
the same place (same message bytes), and no idle interval is anywhere
else. Then l2sched's plugin, told by the lab plugin that it runs TP rank
0/4 of the full model, installs the SM120 TP4 schedule on the TP1 rank
tree (its live inventory check passes: the served weights are rank 0's),
and the fills of ``*.pre_all_reduce`` come before the idle interval and
those of ``*.post_all_reduce`` after it. The idle placement is checked on vLLM's
real Qwen3-MoE tree too (``tests/test_qwen3_moe_vllm.py``'s substitutions).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_cpu import TINY_GLM, plugin_log_records, run_ranks, vllm_available  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lab.engine_tp.emulation_profile import emulation_profile_text  # noqa: E402
from lab.engine_tp.report import bench_gains, rows  # noqa: E402
from lab.engine_tp.shapes import layers_that_fit, rank_config  # noqa: E402
from l2sched.device import load_device, load_device_text  # noqa: E402
from l2sched.model.config import load_model_config  # noqa: E402
from l2sched.model.inventory import analytical_inventory  # noqa: E402

SCHEDULE = os.path.join(ROOT, "schedules", "glm53-flash-sm120-tp4.l2s")

#: A tiny GLM-5.3 config whose sharded dimensions divide by 4 (layer 0
#: KDA+dense, 1-2 KDA+MoE, 3 MLA+MoE); the rank's vocabulary (1024) holds
#: ``decode_forward``'s token ids (< 1000).
TINY4 = {**TINY_GLM, "vocab_size": 4096, "pad_token_id": 4000, "num_attention_heads": 8,
         "num_key_value_heads": 8, "linear_num_heads": 8}
TOKENS = 4


# --------------------------------------------------------------------------
# pure parts


def test_rank_config_divides_the_sharded_dimensions_only():
    r = rank_config(TINY4, 4, "glm5next")
    assert (r["linear_num_heads"], r["num_attention_heads"], r["num_key_value_heads"],
            r["intermediate_size"], r["moe_intermediate_size"], r["vocab_size"]) == \
        (2, 2, 2, 128, 16, 1024)
    for key in ("hidden_size", "kv_lora_rank", "q_lora_rank", "index_n_heads",
                "n_routed_experts", "linear_head_dim"):
        assert r[key] == TINY4[key], key
    assert r["pad_token_id"] == 1024 - (4096 - 4000)
    assert TINY4["num_attention_heads"] == 8  # the input is left alone


def test_rank_config_refuses_what_vllm_refuses():
    with pytest.raises(ValueError, match="num_attention_heads = 8 does not divide by TP 3"):
        rank_config({**TINY4, "linear_num_heads": 9}, 3, "glm5next")
    with pytest.raises(ValueError, match="no TP shard table"):
        rank_config(TINY4, 4, "llama")


def test_rank_config_equals_the_tp_inventory_for_the_shipped_models():
    """Analytical inventories: the rank config at TP1 = the full config at
    TP4 rank 0, tensor by tensor (the real-tree test below checks vLLM's)."""
    for model, name in (("glm5next", None), ("qwen3_moe", "qwen3-30b-a3b-config.json")):
        full = load_model_config(None if name is None else
                                 os.path.join(ROOT, "l2sched", "data", name))
        a = analytical_inventory(full, tp=4, ep=False, tp_rank=0)
        b = analytical_inventory(rank_config(full, 4, model), tp=1, ep=False, tp_rank=0)
        assert [[(t.path, t.shape) for t in lay] for lay in a.layers] == \
            [[(t.path, t.shape) for t in lay] for lay in b.layers], model


def test_layers_that_fit_counts_the_first_layers():
    full = load_model_config(None)
    per = [sum(e.nbytes for e in lay if e.owns_memory and not e.lazy)
           for lay in analytical_inventory(full, tp=4, ep=False, tp_rank=0).layers]
    fixed = 2 * (full["vocab_size"] // 4) * full["hidden_size"] * 2
    assert layers_that_fit(full, 4, fixed + sum(per[:5])) == 5
    assert layers_that_fit(full, 4, fixed + sum(per[:5]) - 1) == 4
    assert layers_that_fit(full, 4, 10**15) == full["num_hidden_layers"]
    with pytest.raises(ValueError, match="not one layer fits"):
        layers_that_fit(full, 4, fixed)


def test_emulation_profile_takes_the_source_all_reduce_and_idle_fills():
    text = emulation_profile_text("h200", 4, "h200-emulating-tp4",
                                  source="sm120-rtx-pro-6000-maxq")
    prof, base = load_device_text(text, "emul"), load_device("h200")
    src = load_device("sm120-rtx-pro-6000-maxq")
    assert prof.name == "h200-emulating-tp4"
    for nbytes in (8192, 64 * 4096 * 2):
        assert prof.allreduce_us(4, nbytes) == pytest.approx(src.allreduce_us(4, nbytes),
                                                             abs=0.01)
    assert prof.allreduce_us(2, 8192) == base.allreduce_us(2, 8192)
    assert all(fm.allreduce_slowdown == 0 for fm in prof.fill_modes.values())
    assert prof.l2_bytes == base.l2_bytes and prof.fill_modes.keys() == base.fill_modes.keys()
    fixed = load_device_text(emulation_profile_text("h200", 4, "x", fixed_us=40.0), "f")
    assert fixed.allreduce_us(4, 64 * 4096 * 2) == pytest.approx(40.0, abs=0.01)
    with pytest.raises(ValueError, match="has no \\[allreduce.tp8\\]"):
        emulation_profile_text("h200", 8, "x", source="sm120-rtx-pro-6000-maxq")


def test_report_rows_ratio_and_threshold():
    verify = {"batches": [
        {"batch": 1, "gain_us": {"median": 60.0}, "noise_us": 5.0, "verdict": "faster",
         "tokens_equal": True, "off_us": {"median": 4000.0}},
        {"batch": 4, "gain_us": {"median": 10.0}, "noise_us": 5.0, "verdict": "faster",
         "tokens_equal": True, "off_us": {"median": 5000.0}}]}
    bench = {"per_m": {"1": {"arms": {"none": {"graph_step_us": {"median": 3000.0}},
                                      "compiled": {"graph_step_us": {"median": 2900.0}},
                                      "none-aa": {"graph_step_us": {"median": 3002.0}}}},
                       "4": {"arms": {"none": {"graph_step_us": {"median": 3500.0}},
                                      "compiled": {"graph_step_us": {"median": 3450.0}}}}}}
    assert bench_gains(bench)[1] == {"gain_us": 100.0, "aa_us": -2.0, "none_us": 3000.0}
    got = rows(verify, bench, 0.5)
    assert [(r["M"], r["ratio"], r["meets"]) for r in got] == [(1, 0.6, True),
                                                                (4, 0.2, False)]


# --------------------------------------------------------------------------
# vLLM's real module trees

_OK, _WHY = vllm_available()
_needs_vllm = [pytest.mark.vllm]
if not _OK:
    if os.environ.get("L2SCHED_REQUIRE_VLLM") == "1":
        raise RuntimeError(f"L2SCHED_REQUIRE_VLLM=1 but vLLM tests cannot run: {_WHY}")
    _needs_vllm.append(pytest.mark.skip(reason=_WHY))


def _events(trace) -> list:
    """The trace's GEMMs, real all-reduces and idle intervals, in order."""
    out = []
    for ev in trace.events:
        if ev[0] == "gemm":
            out.append(("gemm", ev[1]))
        elif ev[0] == "all_reduce":
            out.append(("AR", ev[1]))
        elif ev[0] == "idle":
            out.append(("AR", ev[1], ev[2]))
        elif ev[0] == "l2s" and ev[1] == "launch":
            out.append(("fill", ev[4]))
    return out


def _tp4_rank(ctx):
    import vllm_forward as vf

    model = ctx.build()
    vf.fill_weights(model, seed=7)
    trace = vf.Trace()
    vf.apply_cpu_substitutions(model, trace)
    vf.decode_forward(model, ctx.vllm_config, num_tokens=TOKENS)
    return _events(trace) if ctx.rank == 0 else None


def _emulated_rank(ctx):
    import torch
    import vllm.model_executor.model_loader.utils as loader_utils
    import vllm_forward as vf

    import l2sched.vllm as vllm_registration
    from l2sched.vllm import plugin as vllm_plugin
    from lab.engine_tp import plugin as lab_plugin
    from lab.engine_tp.idle import install_idle

    model = ctx.build()
    vf.fill_weights(model, seed=7)
    trace = vf.Trace()
    vf.apply_cpu_substitutions(model, trace)
    idle = install_idle(model, lambda site, nbytes: trace.add("idle", site, nbytes))
    out = {"count": dict(idle.count)}
    vf.decode_forward(model, ctx.vllm_config, num_tokens=TOKENS)
    out["events"] = _events(trace)

    # l2sched's plugin sees TP rank 0/4 of the full model (the lab plugin's
    # patch) and installs the TP4 schedule with the dry-run backend
    lab_plugin._see_emulated_rank({"tp": 4, "full_config": dict(TINY4)})
    records = plugin_log_records()
    vllm_registration.register()
    loader_utils.process_weights_after_loading = vf.cpu_post_load
    vllm_registration._patch_loader_utils(loader_utils)
    ctx.vllm_config.additional_config = {"l2sched": {
        "schedule": SCHEDULE, "backend": "dry-run", "on_predicted_loss": "warn",
        "set": {"window.B.budget": "64KiB"}}}
    loader_utils.process_weights_after_loading(model, ctx.vllm_config.model_config,
                                               torch.device("cpu"))
    assert vllm_plugin.INSTALLED, "the plugin did not install (see the rank's log)"
    inst = vllm_plugin.INSTALLED[-1]
    out["log"] = list(records)
    rt = inst.runtime
    vf.trace_runtime(rt, trace)
    trace.events.clear()
    vf.decode_forward(model, ctx.vllm_config, num_tokens=TOKENS)
    out["with_plan"] = [e for e in _events(trace) if e[0] != "gemm"]
    out["hooks"] = [ev for ev in trace.events if ev[0] == "l2s"]
    idle.remove()
    return out


def _qwen3_events(trace: list) -> list:
    out = []
    for ev in trace:
        if ev[0] == "gemm":
            out.append(("gemm", ev[1]))
        elif ev[0] in ("all_reduce", "idle"):
            out.append(("AR",) + tuple(ev[2:]))
    return out


def _qwen3_rank(ctx):
    import test_qwen3_moe_vllm as qv

    from lab.engine_tp.idle import install_idle

    model = ctx.build()
    qv.fill_weights(model)
    trace: list = []
    qv._cpu_substitutions(model, trace)
    count = {}
    if ctx.tp == 1:  # the emulated rank
        count = install_idle(model, lambda site, n: trace.append(("idle", site, n))).count
    qv._forward(model, ctx.vllm_config)
    return (_qwen3_events(trace), dict(count)) if ctx.rank == 0 else None


@pytest.fixture(scope="module")
def trees():
    if not _OK:
        pytest.skip(_WHY)
    tp4 = run_ranks(_tp4_rank, TINY4, tp=4, device="cpu", timeout=900)[0]
    emu = run_ranks(_emulated_rank, rank_config(TINY4, 4, "glm5next"), tp=1,
                    device="cpu", timeout=600)[0]
    return tp4, emu


@pytest.mark.vllm
def test_idle_intervals_sit_where_tp4_all_reduces(trees):
    tp4, emu = trees
    real = [e[0] if e[0] == "AR" else e for e in tp4]
    emulated = [e[0] if e[0] == "AR" else e for e in emu["events"]]
    assert sum(e == "AR" for e in real) == 1 + 4 + 4  # embedding, o_proj x4, MLP/MoE x4
    assert emulated == real
    assert emu["count"] == {"attn.all_reduce": 4, "mlp.all_reduce": 1,
                            "moe.all_reduce": 3, "embed.all_reduce": 1}
    assert {e[2] for e in emu["events"] if e[0] == "AR"} == {TOKENS * 256 * 2}


@pytest.mark.vllm
def test_plugin_plans_for_the_emulated_rank_and_fills_keep_their_side(trees):
    _, emu = trees
    assert [r for r in emu["log"] if "TP rank 0/4: schedule glm53-flash-sm120-tp4" in r
            and "installed" in r], emu["log"]
    seq = emu["with_plan"]
    # per layer: pre_all_reduce fills right before an idle interval, and the
    # next idle interval comes after any post_all_reduce fill
    for i, ev in enumerate(seq):
        if ev[0] == "fill" and ev[1].endswith("pre_all_reduce"):
            nxt = next(e for e in seq[i + 1:] if e[0] != "fill")
            assert nxt[0] == "AR", (i, seq)
        if ev[0] == "fill" and ev[1].endswith("post_all_reduce"):
            prev = next(e for e in reversed(seq[:i]) if e[0] != "fill")
            assert prev[0] == "AR", (i, seq)
    assert any(e[0] == "fill" and e[1].endswith("pre_all_reduce") for e in seq), seq


@pytest.mark.vllm
def test_qwen3_idle_intervals_sit_where_tp4_all_reduces():
    """The same on vLLM's real Qwen3-MoE tree (layer 0 dense, 1-3 MoE)."""
    if not _OK:
        pytest.skip(_WHY)
    import test_qwen3_moe_vllm as qv

    full = {**qv.TINY, "num_key_value_heads": 4, "vocab_size": 4096}
    arch = "Qwen3MoeForCausalLM"
    real, _ = run_ranks(_qwen3_rank, full, tp=4, device="cpu", timeout=900,
                        architecture=arch)[0]
    emulated, count = run_ranks(_qwen3_rank, rank_config(full, 4, "qwen3_moe"), tp=1,
                                device="cpu", timeout=600, architecture=arch)[0]
    assert sum(e[0] == "AR" for e in real) == 1 + 4 + 4
    assert [e[:1] if e[0] == "AR" else e for e in emulated] == \
        [e[:1] if e[0] == "AR" else e for e in real]
    assert count == {"attn.all_reduce": 4, "mlp.all_reduce": 1, "moe.all_reduce": 3,
                     "embed.all_reduce": 1}
    assert {e[1] for e in emulated if e[0] == "AR"} == {qv.TOKENS * 256 * 2}


def test_spin_slowdown_is_what_the_fill_reads_add_beyond_an_empty_fills_fork():
    """The spin's extra beside a fill less the same fork with an empty fill:
    the H200 run of 2026-12-05 (spin 21.2 us alone, 1.44 us more beside a
    30 MB bulk fill, spin-fill.json) gave 0.124 from the extra alone; a fork
    that costs as much leaves no slowdown, a larger extra keeps the rest."""
    from l2sched.device.overlap import slowdown_for_extra
    from lab.engine_tp.spin_fill import interference_slowdown

    read_us = 30e6 / (2300.0 * 1e3)
    before = interference_slowdown(1.44, None, 21.216, 1.696, read_us)
    assert before == slowdown_for_extra(1.44, 21.216, 1.696, read_us)
    assert 0.1 < before < 0.15
    assert interference_slowdown(1.44, 1.50, 21.216, 1.696, read_us) == 0.0
    rest = interference_slowdown(4.0, 1.5, 21.216, 1.696, read_us)
    assert rest == slowdown_for_extra(2.5, 21.216, 1.696, read_us) and rest > before


def test_session_steps_say_what_is_missing_and_prepare_writes_nothing_on_bad_input(
        tmp_path, capsys):
    from lab.engine_tp.session import main
    assert main(["serve-verify", str(tmp_path / "none")]) == 1
    assert "spec.json not found: run `python -m lab.engine_tp.session prepare" in \
        capsys.readouterr().err
    d = tmp_path / "p"
    assert main(["prepare", str(d), "--gpu-bytes", str(80 * 2**30), "--base", "nosuch"]) == 1
    assert "unknown device profile 'nosuch'" in capsys.readouterr().err
    assert not d.exists()  # nothing half-written
    assert main(["prepare", str(d), "--gpu-bytes", str(80 * 2**30)]) == 0
    assert main(["report", str(d)]) == 1  # nothing measured yet: no report written
    assert "run the serve-verify" in capsys.readouterr().out
    assert not (d / "report.md").exists()


def _chrome(path, kernels):
    """A Chrome trace of (stream, ts, dur, name) kernel events."""
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "tid": s, "ts": ts, "dur": dur, "name": n}
        for s, ts, dur, n in kernels]}))


def test_trace_summary_names_where_prefetch_on_is_faster(tmp_path):
    """``lab.engine_tp.trace.summarize``: per M and side, the on arm's change
    against off, split into kernels and gaps, the kernel that accounts for
    it first, the fill stream's busy time; a pair whose main streams differ
    is reported, not dropped."""
    from lab.engine_tp.trace import summarize

    main = [(7, 0, 10, "gemm_q"), (7, 12, 20, "gemm_moe"), (7, 40, 5, "norm")]
    faster = [(7, 0, 10, "gemm_q"), (7, 12, 14, "gemm_moe"), (7, 27, 5, "norm"),
              (9, 1, 8, "l2_fill")]
    (tmp_path / "traces-engine").mkdir()
    _chrome(tmp_path / "traces-engine" / "trace-M4-off.json", main + [(9, 1, 1, "l2_fill")])
    _chrome(tmp_path / "traces-engine" / "trace-M4-on.json", faster)
    (tmp_path / "traces-bench").mkdir()
    _chrome(tmp_path / "traces-bench" / "trace-M4-none.json", main)
    _chrome(tmp_path / "traces-bench" / "trace-M4-compiled.json", main[:2])
    res = summarize(tmp_path)
    eng = res["4"]["engine"]
    assert (eng["span_off_us"], eng["span_on_us"], eng["change_us"]) == (45, 32, -13)
    assert (eng["kernel_us"], eng["gap_us"]) == (-6, -7)
    assert eng["top"][0]["kernel"] == "norm" and eng["top"][0]["gap_us"] == -7
    assert eng["top"][1] == {"kernel": "gemm_moe", "count": 1, "kernel_us": -6, "gap_us": 0}
    assert eng["other_streams"]["on"] == {"9": {"kernels": 1, "busy_us": 8}}
    assert "main streams differ" in res["4"]["bench"]["error"]
    assert json.loads((tmp_path / "trace.json").read_text()) == res
    assert "## M=4, engine" in (tmp_path / "trace.md").read_text()
