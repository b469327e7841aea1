"""``benchmarks/vllm_gpu.py`` on CPU: what can be checked without the GPU.

- The reduced GLM-5.3-Flash config the script writes builds vLLM 0.33.0's
  real ``Glm5NextForCausalLM`` (``tests/vllm_cpu.py`` recipe, TP1, ``meta``
  device) with the layer kinds asked for, and ``weight_bytes`` equals the
  parameter bytes of that model (what ``experts_that_fit`` sizes by).
- Through the plugin path (``activate_after_load``, dry-run backend, the
  additional_config sections of the script's arms): the shipped H200
  schedule with ``set tp=1`` and each fill mode compiles against the live
  inventory, lints clean with the h200 profile and logs one summary line;
  the failure arms' sections give exactly the ``prefetch OFF`` line the
  script checks for.
- The log checks, argument handling and report writing, on fake logs and a
  fake raw result.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_cpu import plugin_log_records, run_ranks, vllm_available  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "vllm_gpu_script", os.path.join(ROOT, "benchmarks", "vllm_gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vg = _load_script()

#: What two concurrent engines at util 0.44 fit on a 143,771 MiB H200.
H200_BYTES = 143771 * 2**20


def test_experts_that_fit_and_config():
    n = vg.experts_that_fit(H200_BYTES, 0.44)
    assert n % 8 == 0 and 100 < n < 288
    assert vg.experts_that_fit(H200_BYTES, 0.95) == 288  # capped at the real count
    cfg = vg.reduced_config(n)
    assert cfg["num_hidden_layers"] == len(vg.LAYERS)
    assert cfg["mlp_layer_types"][0] == "dense" and cfg["mlp_layer_types"][-1] == "sparse"
    assert cfg["layer_types"][3] == "full_attention"
    assert vg.weight_bytes(cfg) < 0.44 * H200_BYTES - vg.ENGINE_RESERVE + 1
    with pytest.raises(ValueError):
        vg.experts_that_fit(H200_BYTES, 0.05)


def test_parse_args_defaults_and_errors(capsys):
    q = vg.parse_args(["--out", "x", "--quick"])
    assert (q.arms, q.batches, q.reps, q.failures) == (["off", "shipped"], [1, 16], 2, False)
    f = vg.parse_args(["--out", "x"])
    assert f.arms == ["off", "shipped", "load"] and f.batches == [1, 4, 16, 64]
    assert f.failures and f.util == round(0.88 / 3, 3)
    for bad in (["--quick"], ["--out", "x", "--arms", "shipped"],
                ["--out", "x", "--arms", "off,nope"], ["--out", "x", "--batches", "1,a"],
                ["--out", "x", "--batches", "128"], ["--out", "x", "--tokens", "4"]):
        with pytest.raises(SystemExit):
            vg.parse_args(bad)
    assert "error" in capsys.readouterr().err


def _fake_log(section, off=None):
    shims = ("(EngineCore pid=1) WARNING vllm_gpu_shims: pid 1: mHC torch fallback; "
             "CuTe DSL router GEMM off")
    lines = [shims,
             "(EngineCore pid=1) INFO Using AttentionBackendEnum.FLASHMLA_SPARSE backend.",
             "(EngineCore pid=1) INFO Graph capturing finished in 9 secs, took 0.40 GiB"]
    if off:
        lines.append(f"ERROR l2sched: TP rank 0/1: prefetch OFF: {off}")
    elif section:
        lines.append("INFO l2sched: TP rank 0/1: schedule glm53-flash-h200-tp4 (/x.l2s; "
                     "set tp=1) installed, backend cuda, device h200, lint h200: 0 errors, "
                     "1 warnings: 9 issues, 99.1 MB per decode step [A 1 MB in 4 layers]")
    return lines


def test_log_checks():
    sec = {"schedule": "x"}
    assert all(c["ok"] for c in vg.log_checks("on", _fake_log(sec), sec))
    assert all(c["ok"] for c in vg.log_checks("off", _fake_log(None), None))
    bad = vg.log_checks("on", _fake_log(sec, off="compile failed: x"), sec)
    assert [c["check"] for c in bad if not c["ok"]] == [
        "one plugin summary line (TP rank 0/1, backend cuda)", "prefetch stays on"]
    assert all(c["ok"] for c in vg.log_checks(
        "bad-path", _fake_log(sec, off="cannot read schedule '/m.l2s': no such file"),
        sec, expect_off="cannot read schedule"))
    twice = _fake_log(sec, off="lint error with device profile h200: x") * 2
    assert not all(c["ok"] for c in vg.log_checks(
        "lint-error", twice, sec, expect_off="lint error with device profile"))
    nocap = [ln for ln in _fake_log(None) if "Graph" not in ln]
    assert not vg.log_checks("off", nocap, None)[0]["ok"]


def _fake_raw():
    dec = {arm: {str(b): [{"ms_step": base * (1 + 0.01 * i) * (0.99 if arm == "shipped"
                                                                else 1.0)}
                          for i in range(5)]
                 for b, base in ((1, 7.0), (64, 11.0))} for arm in ("off", "shipped")}
    return {"meta": {"vllm": "0.33.0", "gpu": "NVIDIA H200", "tokens": 72,
                     "short_tokens": 8, "prompt_len": 32, "experts": 192},
            "arms": {"off": {"section": None, "ready_s": 90.0, "log": "arm-off.log",
                             "l2sched_lines": []}},
            "checks": vg.log_checks("off", _fake_log(None), None),
            "decode": dec, "equality": {"ok": True, "detail": "identical"},
            "failed": [], "skipped": ["failure arms (budget)"]}


def test_report_from_fake_result(tmp_path):
    raw = _fake_raw()
    s = vg.write_report(raw, tmp_path)
    assert s["all_checks_passed"]
    assert s["decode"]["off"]["1"]["ms_step"]["median"] == pytest.approx(7.14)
    assert s["step_ratio_vs_off"]["shipped"]["64"] == pytest.approx(0.99)
    md = (tmp_path / "vllm-gpu.md").read_text()
    for part in ("| off | 7.140 (", "## Step time / off", "0.9900", "Skipped: failure arms"):
        assert part in md, part
    assert json.loads((tmp_path / "raw.json").read_text()) == raw
    # --report re-renders from raw.json; a failed step fails the run
    raw["failed"] = ["start engines: arm off: start engine: ValueError: x"]
    (tmp_path / "raw2.json").write_text(json.dumps(raw))
    assert vg.main(["--report", str(tmp_path / "raw2.json"), "--out",
                    str(tmp_path / "r2")]) == 1
    assert "FAILED" in (tmp_path / "r2" / "vllm-gpu.md").read_text()
    assert vg.main(["--report", str(tmp_path / "nope.json"), "--out",
                    str(tmp_path / "r3")]) == 2
    # an arm whose engine died has no samples: reported, not a crash
    raw["decode"]["off"] = {b: [] for b in raw["decode"]["off"]}
    (tmp_path / "raw4.json").write_text(json.dumps(raw))
    assert vg.main(["--report", str(tmp_path / "raw4.json"), "--out",
                    str(tmp_path / "r4")]) == 1
    s4 = json.loads((tmp_path / "r4" / "vllm-gpu.json").read_text())
    assert s4["decode"]["off"] == {} and s4["step_ratio_vs_off"]["shipped"] == {}


# --------------------------------------------------------------------------
# vLLM's real model (TP1, meta device) and the plugin path

_OK, _WHY = vllm_available()


def _rank_scenario(ctx):
    from l2sched.vllm import plugin

    records = plugin_log_records()
    model = ctx.build()
    seen, nbytes = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            nbytes += p.numel() * p.element_size()
    out = {"param_bytes": nbytes,
           "kinds": [f"{type(layer.self_attn).__name__}+{type(layer.mlp).__name__}"
                     for layer in model.model.layers], "logs": {}}
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for arm in ("shipped", "copy", "load", "bulk", "bad-path", "lint-error"):
            sec = dict(vg.arm_section(arm, Path(d)), backend="dry-run")
            ctx.vllm_config.additional_config = {"l2sched": sec}
            records.clear()
            got = plugin.activate_after_load(model, ctx.vllm_config)
            if got is not None:
                got.remove()
            plugin.INSTALLED.clear()
            out["logs"][arm] = [r for r in records if "l2sched:" in r]
    # The child's vllm.LLM arguments are ones vLLM 0.33.0 accepts.
    from vllm.engine.arg_utils import EngineArgs

    spec = {"model": ctx.model_dir, "util": 0.44, "vocab": 154880, "max_model_len": 512,
            "max_num_seqs": 64, "max_num_batched_tokens": 2048,
            "capture_sizes": list(vg.CAPTURE_SIZES), "section": vg.arm_section(
                "shipped", Path("/x"))}
    ec = EngineArgs(**vg.engine_kwargs(spec),
                    enable_prefix_caching=False).create_engine_config()  # CPU shim 4
    out["engine"] = {"backend": ec.attention_config.backend.name,
                     "jit_warmup": ec.kernel_config.enable_jit_warmup,
                     "l2sched": ec.additional_config["l2sched"],
                     "load_format": ec.load_config.load_format,
                     "kda_prefill": ec.additional_config.get("kda_prefill_backend")}
    return out


@pytest.mark.vllm
@pytest.mark.skipif(not _OK, reason=_WHY)
def test_reduced_model_builds_and_schedules_compile():
    cfg = vg.reduced_config(vg.experts_that_fit(H200_BYTES, 0.44))
    cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    (r,) = run_ranks(_rank_scenario, cfg, tp=1, device="meta", timeout=600)
    assert r["kinds"] == ["Glm5NextLinearAttention+Glm5NextMLP"] + [
        "Glm5NextLinearAttention+Glm5NextMoE"] * 2 + [
        "Glm5NextMLAAttention+Glm5NextMoE"] + ["Glm5NextLinearAttention+Glm5NextMoE"] * 2
    assert abs(r["param_bytes"] - vg.weight_bytes(cfg)) < 2**20
    for arm in ("shipped", "copy", "load", "bulk"):
        lines = r["logs"][arm]
        # the summary line, not L2S113's "... (when TileLang is installed)"
        summary = [ln for ln in lines if ") installed" in ln]
        assert len(summary) == 1, lines
        assert vg.SUMMARY.search(summary[0].replace("dry-run", "cuda")), summary[0]
        assert "lint h200: 0 errors" in summary[0]
        assert "kda+moe: A+B+C" in summary[0] and "mla+moe: A_MLA+B+C" in summary[0]
    assert r["engine"] == {"backend": "FLASHMLA_SPARSE", "jit_warmup": False,
                           "l2sched": vg.arm_section("shipped", Path("/x")),
                           "load_format": "dummy", "kda_prefill": "triton"}
    for arm, reason in (("bad-path", "cannot read schedule"),
                        ("lint-error", "lint error with device profile h200")):
        offs = [ln for ln in r["logs"][arm] if "prefetch OFF" in ln]
        assert len(offs) == 1 and vg.OFF_LINE.search(offs[0]).group(1).startswith(
            reason), r["logs"][arm]


FAKE_VLLM = '''
"""A stand-in for vllm's LLM API: logs what the real engine logs and
returns deterministic tokens, so the orchestration can run on CPU."""
import json, os, time, types


class SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class LLM:
    def __init__(self, **kw):
        sec = (kw.get("additional_config") or {}).get("l2sched")
        print("(EngineCore pid=1) WARNING vllm_gpu_shims: pid 1: mHC torch fallback")
        print(f"(EngineCore pid=1) INFO Using AttentionBackendEnum."
              f"{kw['attention_config']['backend']} backend.")
        if sec and "missing" in sec["schedule"]:
            print("ERROR l2sched: TP rank 0/1: prefetch OFF: cannot read schedule 'x'")
        elif sec and "fill-over-experts" in sec["schedule"]:
            print("ERROR l2sched: TP rank 0/1: prefetch OFF: lint error with device "
                  "profile h200: x")
        elif sec:
            print("INFO l2sched: TP rank 0/1: schedule s (x) installed, backend cuda, "
                  "device h200, lint h200: 0 errors, 0 warnings: 1 issues")
        print("(EngineCore pid=1) INFO Graph capturing finished in 1 secs, took 0.1 GiB",
              flush=True)
        self.slow = 1.02 if sec else 1.0
        self.calls = 0

    def generate(self, prompts, sp, use_tqdm=True):
        time.sleep(0.001 * sp.max_tokens * self.slow)
        # like a batched kernel whose reduction order varies: from batch 4 on,
        # logprobs differ from call to call (token ids do not)
        self.calls += 1
        jitter = 1e-3 * self.calls if len(prompts) >= 4 else 0.0
        outs = []
        for p in prompts:
            toks = [(p["prompt_token_ids"][0] + i) % 1000 for i in range(sp.max_tokens)]
            lps = [{t: types.SimpleNamespace(logprob=-0.5 + jitter)} for t in toks]
            outs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(
                token_ids=toks, logprobs=lps if sp.logprobs is not None else None)]))
        return outs

    def collective_rpc(self, method, args=()):
        assert method == "l2sched_time_replays", method
        (batch,), replays = args
        return [{batch: 1000.0 * self.slow + batch}]
'''


def test_orchestration_with_a_fake_engine(tmp_path, monkeypatch):
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{ROOT}")
    monkeypatch.setattr(vg, "preflight", lambda: {"gpu": "fake", "gpu_bytes": H200_BYTES})
    out = tmp_path / "out"
    args = vg.parse_args(["--out", str(out), "--arms", "off,shipped", "--batches", "1,4",
                          "--reps", "2", "--failures", "--tokens", "20",
                          "--short-tokens", "4"])
    assert vg.Run(args).run() == 0
    s = json.loads((out / "vllm-gpu.json").read_text())
    assert s["all_checks_passed"], [c for c in s["checks"] if not c["ok"]]
    assert {c["arm"] for c in s["checks"]} == {"off", "shipped", "all", "bad-path",
                                               "lint-error"}
    assert s["decode"]["shipped"]["4"]["ms_step"]["n"] == 2
    assert s["equality"]["ok"]
    # batch 1 reproduces itself and matches; batch 4 does not reproduce in
    # the off A/A, so its difference is reported, not judged
    assert len(s["equality"]["notes"]) == 1 and s["equality"]["notes"][0].startswith(
        "batch 4: shipped max |logprob diff|")
    assert (out / "arm-shipped.log").read_text().count("installed, backend cuda") == 1
    assert "| shipped |" in (out / "vllm-gpu.md").read_text()
    # the GPU-step rounds: every arm and batch, shipped 2% over off
    assert s["replay_us"]["shipped"]["4"]["n"] == 9
    assert s["replay_vs_off"]["shipped"]["1"]["us"] == pytest.approx(20.0)
    assert "GPU step - off" in (out / "vllm-gpu.md").read_text()


def test_logprob_difference():
    assert vg._max_logprob_diff([[-1.0, -2.0], [-0.5]], [[-1.0, -2.25], [-0.5]]) == 0.25
    assert vg._max_logprob_diff([], []) == 0.0


def test_fit_arm_for_the_reduced_model(tmp_path):
    """The ``fit`` arm's schedule is fitted for the reduced model at TP1 (6
    layers, no all-reduces to hide fills in): on the h200 profile the best
    candidate's lower bound is a few us, below the noise floor, so fit
    answers no prefetch and the run says so instead of starting the arm."""
    cfg = vg.reduced_config(vg.experts_that_fit(H200_BYTES, 0.44))
    d = vg.write_model_dir(cfg, tmp_path / "model")
    got = vg.fit_reduced(d, tmp_path)
    assert got["windows"] == 0 and "NO PREFETCH" in got["summary"]
    assert "--tp 1 --model-config" in got["command"]
    assert vg.arm_section("fit", tmp_path)["schedule"] == str(tmp_path / "fit.l2s")
