"""The DeepSeek-V4 adapter against vLLM 0.33.0's real ``DeepseekV4ForCausalLM``
(the CUDA implementation, ``vllm/models/deepseek_v4/nvidia/model.py``, the
one an H200 serves), constructed on CPU (``meta`` tensors) from a reduced
config (5 layers: compress ratios 0, 4, 128, 4, 0, the first layer
hash-routed; hidden 256, 4 heads of 512, 8 experts top-2, a shared expert),
BF16 at TP1 and TP2 (two gloo ranks), EP off and on, and quantized as the
public checkpoint is (FP8 128x128 blocks with e8m0 scales, MXFP4 experts)
at TP2, EP off and on:

- the analytical inventory equals the live one read off the real module tree
  on every rank: every tensor, path, shape, dtype, byte count, flag and order,
  and the layer kinds (``swa+hash``, ``csa+moe``, ``hca+moe``, ``csa+moe``,
  ``swa+moe``);
- every hook's install target exists on every real layer (a module for the
  ``forward*`` hooks, a bound method for the ``wrap_*`` ones);
- the vLLM plugin's install (``vllm.sites.install_plan``, dry-run runtime) of
  a plan with a window at every hook point finds every hook site on every
  layer, and, once a site is deleted from one layer (a vLLM that moved it),
  refuses with the ``VllmDrift`` warning naming the site, hook and layer;
- the vLLM plugin's post-load step (``activate_after_load``, dry-run backend)
  installs the shipped H200 schedule at TP2 and at PP2, where each rank plans
  only its own layers and fills none of the other rank's.

CPU substitutions, for construction only (no forward runs): the model's
``torch.cuda.Stream``/``Event`` (three aux streams and the layers' events) are
inert stand-ins; FlashMLA's ``compute_fp8_einsum_recipe`` (it asserts a CUDA
device) returns the SM90 recipe ``(1, 128, 128)``
(``nvidia/ops/o_proj.py:28-32``); the FP8 linear kernel choice
(``quantization/fp8.py:347``, no CPU kernel without AMX) is skipped, and the
MXFP4 expert backend (``quantization/mxfp4.py:578``) is Triton's, which
rounds no size here (``fused_moe/oracle/mxfp4.py:837-880``): weight shapes
and dtypes come from ``create_weights`` either way. About 20 s per layout
(a minute for a plugin one);
``-m vllm``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_cpu import (
    hook_target_problems,
    inventory_mismatches,
    plugin_log_records,
    run_ranks,
    vllm_available,
)

from l2sched.model.adapters import get_adapter
from l2sched.model.inventory import analytical_inventory, live_inventory

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]

ROOT = Path(__file__).resolve().parent.parent
ARCH = "DeepseekV4ForCausalLM"
TINY = {
    "torch_dtype": "bfloat16", "vocab_size": 1024, "hidden_size": 256,
    "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 64, "o_lora_rank": 64,
    "o_groups": 2, "index_n_heads": 4, "index_head_dim": 128, "index_topk": 16,
    "compress_ratios": [0, 4, 128, 4, 0], "num_hash_layers": 1,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    "n_shared_experts": 1, "hc_mult": 4, "hc_eps": 1e-6, "hc_sinkhorn_iters": 4,
    "sliding_window": 32, "topk_method": "noaux_tc", "scoring_func": "sqrtsoftplus",
    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
    "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "compress_rope_theta": 160000,
    "num_nextn_predict_layers": 0, "tie_word_embeddings": False,
    "attention_bias": False,
}
#: The same model quantized as DeepSeek-V4-Flash is (its
#: ``quantization_config`` and ``expert_dtype``), with the low ranks and the
#: expert width at whole 128-blocks.
TINY_FP8 = {**TINY, "q_lora_rank": 128, "o_lora_rank": 128,
            "moe_intermediate_size": 256, "expert_dtype": "fp4",
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                    "quant_method": "fp8", "scale_fmt": "ue8m0",
                                    "weight_block_size": [128, 128]}}
AD = get_adapter("deepseek_v4")


class _Inert:
    """A stand-in for ``torch.cuda.Stream``/``Event`` on a CPU host."""

    def __init__(self, *args, **kwargs):
        pass


def _cpu_stand_ins() -> None:
    """The CPU substitutions of the module docstring (construction only)."""
    import torch
    import vllm.model_executor.layers.quantization.fp8 as fp8
    import vllm.model_executor.layers.quantization.mxfp4 as mxfp4
    import vllm.models.deepseek_v4.nvidia.flashmla as flashmla
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend

    torch.cuda.Stream = _Inert
    torch.cuda.Event = _Inert
    flashmla.compute_fp8_einsum_recipe = lambda *a, **k: ((1, 128, 128), False)
    fp8.init_fp8_linear_kernel = lambda *a, **k: None
    mxfp4.select_deepseek_v4_mxfp4_moe_backend = lambda *a, **k: (
        Mxfp4MoeBackend.TRITON, None)


def _rank(ctx) -> dict:
    """Build the real tree on this rank: its live inventory, the hook
    install targets that do not resolve to what their mechanism needs, and
    the dry-run install (``_dry_run_install``)."""
    _cpu_stand_ins()
    model = ctx.build()
    live = live_inventory(model, ctx.tp, ctx.ep, ctx.rank, adapter="deepseek_v4")
    return {"live": live, "problems": hook_target_problems(AD, model),
            "installed": _dry_run_install(model, live, ctx)}


def _plugin_rank(ctx) -> dict:
    """The vLLM plugin's post-load step on this rank's real tree with the
    shipped H200 schedule (its TP set to the rank's, its ``except`` to the
    tiny model's last layer; dry-run backend): the log records, the PP rank,
    its own layers and the installed plan's issues as ``(window, hook,
    layer, layers its ranges fill)``."""
    import os
    import tempfile

    from vllm.distributed import get_pp_group

    from l2sched.vllm import plugin

    _cpu_stand_ins()
    model = ctx.build()
    with open(os.path.join(ROOT, "schedules", "deepseek-v4-h200-tp1.l2s"),
              encoding="utf-8") as f:
        text = f.read().replace("tp 1\n", f"tp {ctx.tp}\n").replace(
            "except 42", "except 4")
    records = plugin_log_records()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ds.l2s")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        ctx.vllm_config.additional_config = {
            "l2sched": {"schedule": path, "backend": "dry-run"}}
        inst = plugin.activate_after_load(model, ctx.vllm_config)
    out = {"pp_rank": get_pp_group().rank_in_group, "records": list(records),
           "own": [i for i, layer in enumerate(model.model.layers)
                   if type(layer).__name__ != "PPMissingLayer"],
           "plan": None if inst is None else [
               (wi.window, wi.hook, wi.layer, sorted({r.layer for r in wi.ranges}))
               for wi in inst.plan.issues]}
    if inst is not None:
        inst.retire()
    plugin.INSTALLED.clear()
    return out


def every_hook_schedule(tp: int, ep: bool) -> str:
    """A schedule with one window at every hook point, one carry chain
    through them (every DeepSeek-V4 hook exists in every layer), each window
    taking 4 KiB of this layer's FFN tensors."""
    lines = ["schedule every_hook", "model deepseek_v4", "device h200", f"tp {tp}",
             f"ep {'on' if ep else 'off'}"]
    for j, h in enumerate(AD.HOOKS):
        carry = f" carry w{j + 1}" if j + 1 < len(AD.HOOKS) else ""
        body = " {\n    this ffn.*\n}" if j == 0 else ""
        lines.append(f"window w{j} at {h.name} budget 4KiB layers all{carry}{body}")
    return "\n".join(lines) + "\n"


def _dry_run_install(model, live, ctx) -> list[tuple[str, str, int]]:
    """Compile the every-hook plan for this rank, install it into the real
    layers with the dry-run runtime (vLLM's hook sites found on every
    layer, or ``VllmDrift``), take it out again; then install it once more
    after deleting one hook site. The plan's issues as ``(window, hook,
    layer)`` and the second install's drift message."""
    from l2sched.compiler.compile import compile_plan
    from l2sched.lang.resolve import load_schedule_text
    from l2sched.runtime.dry_run import DryRunRuntime
    from l2sched.vllm.drift import VllmDrift
    from l2sched.vllm.sites import install_plan

    schedule = load_schedule_text(every_hook_schedule(ctx.tp, ctx.ep), "every.l2s",
                                  model_config=dict(live_config(ctx)))
    plan = compile_plan(schedule, live, ctx.rank)
    install_plan(AD.decoder_layers(model), live, plan, DryRunRuntime(plan)).remove()
    # a vLLM that moved a hook site: layer 3 without its fused_wqa_wkv
    del AD.decoder_layers(model)[3].attn.fused_wqa_wkv
    try:
        install_plan(AD.decoder_layers(model), live, plan, DryRunRuntime(plan))
        drift = ""
    except VllmDrift as e:
        drift = str(e)
    return [(wi.window, wi.hook, wi.layer) for wi in plan.issues], drift


def live_config(ctx) -> dict:
    """The text config the rank's model was built from (its model dir)."""
    import json
    import os

    with open(os.path.join(ctx.model_dir, "config.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("quantized,tp,ep", [
    (False, 1, False), (False, 2, False), (False, 2, True), (True, 2, False),
    (True, 2, True)])
def test_live_inventory_equals_analytical_and_hooks_resolve(quantized, tp, ep):
    tiny = TINY_FP8 if quantized else TINY
    config = {**tiny, "architectures": [ARCH]}
    for rank, res in enumerate(run_ranks(_rank, tiny, tp, ep, device="meta",
                                         timeout=900, architecture=ARCH)):
        ana = analytical_inventory(config, tp, ep, rank)
        live = res["live"]
        assert ana.model == live.model == "deepseek_v4"
        assert [str(k) for k in live.kinds] == [
            "swa+hash", "csa+moe", "hca+moe", "csa+moe", "swa+moe"]
        assert inventory_mismatches(ana, live) == [], f"rank {rank}"
        assert res["problems"] == []
        # the dry-run install found every hook site: each of the 11 windows
        # issues once in each of the 5 layers, in hook order
        issues, drift = res["installed"]
        assert issues == [(f"w{j}", h.name, i) for i in range(5)
                          for j, h in enumerate(AD.HOOKS)]
        assert ("has no hook site attn.fused_wqa_wkv of DeepseekV4DecoderLayer "
                "(hook point attn.after_first_proj) on layer 3 (moved?)") in drift
        im = tiny["moe_intermediate_size"]
        w13 = live.tensor(1, "ffn.experts.routed_experts.w13_weight")
        n, rows = (4, 2 * im) if ep and tp > 1 else (8, 2 * im // tp)
        assert w13.shape == ((n, rows, 128) if quantized else (n, rows, 256))
        assert w13.experts == ((4 * rank, 4 * rank + 4) if ep and tp > 1 else (0, 8))
        wq_b = live.tensor(0, "attn.wq_b.weight")
        assert wq_b.shape == (4 * 512 // tp, tiny["q_lora_rank"])
        assert wq_b.dtype == ("float8_e4m3fn" if quantized else "bfloat16")
        if quantized:
            scale = live.tensor(0, "attn.wq_b.weight_scale_inv")
            assert scale.shape == (16 // tp, 1) and scale.dtype == "float8_e8m0fnu"
            assert live.tensor(1, "ffn.experts.routed_experts.w2_weight_scale").dtype \
                == "uint8"
        assert live.tensor(0, "ffn.gate.tid2eid").shape == (1024, 2)


@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)])
def test_the_plugin_installs_the_shipped_schedule(tp, pp):
    """The plugin's post-load step installs the shipped H200 schedule on each
    rank of the real tree (vLLM's config form: ``layer_types``,
    ``mlp_layer_types``), with one INFO line per rank and no error of the
    lint; under PP2 each rank plans only its own layers and no window of it
    fills another rank's layer (window B's next-layer fill stops at the
    rank's last layer)."""
    runs = run_ranks(_plugin_rank, TINY, tp, False, device="meta", timeout=900,
                     architecture=ARCH, pp=pp)
    for rank, r in enumerate(runs):
        where = f"PP rank {r['pp_rank']}/2" if pp > 1 else f"TP rank {rank}/2"
        lines = [x for x in r["records"] if " installed, backend dry-run" in x]
        assert len(lines) == 1 and where in lines[0], r["records"]
        assert "device h200, lint h200: 0 errors" in lines[0]
        own = r["own"]
        assert own == ([0, 1, 2] if r["pp_rank"] == 0 else [3, 4]) if pp > 1 \
            else list(range(5))
        want = [(w, h, i, [i + (w == "B")]) for i in own for w, h in (
            ("A", "attn.before_core"), ("B", "moe.after_gate"))
            if w == "A" or (i + 1 in own and i != 4)]
        assert r["plan"] == want, r["plan"]
