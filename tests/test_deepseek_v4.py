"""The DeepSeek-V4 adapter without vLLM: the public config and the
registry, layer kinds, per-rank inventories at TP 1/2/4/8 with and without
EP, the timeline and hook catalogue against the inventory, the generated
hooks document, and the hand-written H200 TP1 schedule through check,
lint and compile."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.cli import main
from l2sched.cli.docs import hooks_md_text
from l2sched.device import load_device
from l2sched.errors import L2sModelError
from l2sched.model.adapters import adapter_of_config, get_adapter
from l2sched.model.config import load_model_config
from l2sched.model.inventory import TPSplitError, analytical_inventory
from l2sched.units import MiB

ROOT = Path(__file__).resolve().parent.parent
FLASH = ROOT / "l2sched" / "data" / "deepseek-v4-flash-config.json"
HAND = "schedules/deepseek-v4-h200-tp1.l2s"
AD = get_adapter("deepseek_v4")


def _config(tmp_path, **changes) -> str:
    cfg = json.loads(FLASH.read_text("utf-8"))
    cfg.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg, indent=1), "utf-8")
    return str(path)


def test_the_public_config_and_the_registry():
    """The shipped file is the 1,749 bytes its source recorded, with the
    values the .md's cross-check lists; the registry serves it from its
    architectures and model_type."""
    assert len(FLASH.read_bytes()) == 1749
    cfg = load_model_config(FLASH)
    assert adapter_of_config(cfg).NAME == "deepseek_v4"
    assert adapter_of_config({"model_type": "deepseek_v4"}).NAME == "deepseek_v4"
    assert load_model_config(None, "deepseek_v4")["num_hidden_layers"] == 43
    assert {k: cfg[k] for k in ("hidden_size", "num_attention_heads", "head_dim",
                                "q_lora_rank", "o_groups", "o_lora_rank",
                                "n_routed_experts", "num_experts_per_tok",
                                "moe_intermediate_size", "hc_mult", "num_hash_layers")
            } == {"hidden_size": 4096, "num_attention_heads": 64, "head_dim": 512,
                  "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024,
                  "n_routed_experts": 256, "num_experts_per_tok": 6,
                  "moe_intermediate_size": 2048, "hc_mult": 4, "num_hash_layers": 3}
    assert AD.routing(cfg) == (6, 256)


def test_layer_kinds_from_compress_ratios_and_hash_layers(tmp_path):
    kinds = [str(k) for k in AD.layer_kinds(load_model_config(FLASH))]
    assert kinds[:5] == ["swa+hash", "swa+hash", "csa+hash", "hca+moe", "csa+moe"]
    assert kinds[3::2] == ["hca+moe"] * 20 and kinds[4::2] == ["csa+moe"] * 20
    cfg = load_model_config(_config(tmp_path, num_hash_layers=0))
    assert {str(k) for k in AD.layer_kinds(cfg)[:2]} == {"swa+moe"}
    sub = AD.subset_config(load_model_config(FLASH), AD.layer_kinds(cfg), [1, 3, 4])
    assert [str(k) for k in AD.layer_kinds(sub)] == ["swa+moe", "hca+moe", "csa+moe"]
    for i, bad in ((5, 16), (7, True)):
        ratios = json.loads(FLASH.read_text("utf-8"))["compress_ratios"]
        ratios[i] = bad
        with pytest.raises(L2sModelError, match=rf"compress_ratios\[{i}\] = {bad}"):
            load_model_config(_config(tmp_path, compress_ratios=ratios))
    with pytest.raises(L2sModelError, match="43 layers"):
        load_model_config(_config(tmp_path, compress_ratios=[0] * 40))


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ep", [False, True])
def test_inventory_per_rank(tp, ep):
    """Every rank at every TP degree: the attention's TP-split projections
    and the replicated rest, FP8 weights with one e8m0 scale per 128x128
    block, the MXFP4 experts split by TP or EP; the split tensors summed over
    the ranks give the TP1 tensor."""
    cfg = load_model_config(FLASH)
    one = analytical_inventory(cfg, 1, False)
    split = ("attn.wq_b.weight", "attn.wo_a.weight", "attn.wo_b.weight",
             "ffn.shared_experts.gate_up_proj.weight",
             "ffn.experts.routed_experts.w13_weight",
             "ffn.experts.routed_experts.w2_weight_scale")
    sums = dict.fromkeys(split, 0)
    for rank in range(tp):
        inv = analytical_inventory(cfg, tp, ep, rank)
        t = lambda path, layer=2: inv.tensor(layer, path)  # noqa: E731 (csa+hash)
        assert t("attn.fused_wqa_wkv.weight").shape == (1536, 4096)
        assert t("attn.fused_wqa_wkv.weight").replicated
        assert t("attn.wq_b.weight").shape == (64 * 512 // tp, 1024)
        assert t("attn.wq_b.weight_scale_inv").shape == (256 // tp, 8)
        assert t("attn.wq_b.weight_scale_inv").dtype == "float8_e8m0fnu"
        assert t("attn.wo_a.weight").shape == (8192 // tp, 4096)
        assert t("attn.wo_b.weight").shape == (4096, 8192 // tp)
        assert t("attn.attn_sink").shape == (64,)  # FlashMLA pads to 64 heads
        assert t("attn.indexer.wq_b.weight").shape == (8192, 1024)
        assert t("attn.indexer.compressor.ape").shape == (4, 256)
        assert t("attn.compressor.fused_wkv_wgate.weight").shape == (2048, 4096)
        assert inv.tensor(3, "attn.compressor.ape").shape == (128, 512)  # hca
        assert t("hc_attn_fn").shape == (24, 16384) and t("hc_attn_fn").nbytes == \
            24 * 16384 * 4
        assert t("ffn.gate.tid2eid").shape == (129280, 6)
        assert not t("ffn.gate.tid2eid").decode_read
        assert inv.tensor(3, "ffn.gate.e_score_correction_bias").shape == (256,)
        assert t("ffn.shared_experts.down_proj.weight").shape == (4096, 2048 // tp)
        w13 = t("ffn.experts.routed_experts.w13_weight")
        if ep and tp > 1:
            assert w13.experts == (256 // tp * rank, 256 // tp * (rank + 1))
            assert w13.shape == (256 // tp, 4096, 2048)
        else:
            assert w13.experts == (0, 256) and w13.shape == (256, 4096 // tp, 2048)
        for p in split:
            sums[p] += t(p).nbytes
    assert sums == {p: one.tensor(2, p).nbytes for p in split}
    # the TP1 csa+moe layer: 3,606,627,096 B, of which the MXFP4 experts
    # (256 x (2048 x 4096 + 4096 x 1024) x 17/16 B) are 3,264 MiB
    assert one.layer_bytes(4) - one.layer_bytes(4, routed=False) == 3264 * MiB
    per_expert = 3 * 2048 * 4096 // 2 * 17 // 16
    assert one.tensor(4, "ffn.experts.routed_experts.w13_weight").bytes_per_expert + \
        one.tensor(4, "ffn.experts.routed_experts.w2_weight").bytes_per_expert + \
        one.tensor(4, "ffn.experts.routed_experts.w13_weight_scale").bytes_per_expert \
        + one.tensor(4, "ffn.experts.routed_experts.w2_weight_scale").bytes_per_expert \
        == per_expert
    if ep and tp > 1:
        assert inv.tensor(0, "ffn.experts.routed_experts._expert_map").shape == (256,)


def test_bf16_config_and_what_is_refused(tmp_path):
    cfg = load_model_config(_config(tmp_path, quantization_config=None))
    inv = analytical_inventory(cfg, 2, False)
    wq_b = inv.tensor(0, "attn.wq_b.weight")
    assert wq_b.dtype == "bfloat16" and wq_b.nbytes == 16384 * 1024 * 2
    assert inv.tensor(0, "ffn.experts.routed_experts.w2_weight").shape == \
        (256, 4096, 1024)
    assert not any(t.path.endswith("_scale_inv") for t in inv.layers[0])
    for key, value, needle in (
            ("expert_dtype", "fp8", "'fp8' experts are not modelled"),
            ("hidden_act", "gelu", "not supported"),
            ("vision_n_layers", 2, "vision checkpoints are not modelled"),
            ("num_experts_per_tok", 300, "must be in 1..256"),
            ("o_groups", 7, "does not divide"),
            ("quantization_config", {"quant_method": "awq"}, "'awq' is not modelled")):
        with pytest.raises(L2sModelError, match=needle):
            load_model_config(_config(tmp_path, **{key: value}))
    with pytest.raises(TPSplitError, match="num_attention_heads = 64 is not divisible"):
        analytical_inventory(load_model_config(FLASH), 3, False)
    with pytest.raises(TPSplitError, match="o_groups = 8 is not divisible"):
        analytical_inventory(load_model_config(FLASH), 16, False)


@pytest.mark.parametrize("kind", ["swa+hash", "csa+hash", "hca+moe", "csa+moe"])
def test_timeline_and_hooks_match_the_inventory(kind):
    """Every hook fires once, in catalogue order; every tensor a decode step
    reads is read by some op, and every path an op reads exists in some
    configuration (TP, EP, BF16)."""
    k = next(x for x in AD.ALL_KINDS if str(x) == kind)
    ops = AD.decode_timeline(k)
    assert len({op.name for op in ops}) == len(ops)
    fired = [h for op in ops for h in (*op.hooks_before, *op.hooks_after)]
    assert sorted(fired) == sorted(h.name for h in AD.HOOKS if h.exists_in(k))
    orders = [AD.HOOKS_BY_NAME[h].order for h in fired]
    assert orders == sorted(orders)
    assert [op.name for op in ops if op.eager_break] == ["attn.core"]
    cfg = load_model_config(FLASH)
    layer = [str(x) for x in AD.layer_kinds(cfg)].index(kind)
    reads = {p for op in ops for p in op.reads}
    for ep in (False, True):
        have = {t.path: t for t in analytical_inventory(cfg, 2, ep).layers[layer]}
        assert {p for p, t in have.items() if t.decode_read} <= reads
        assert {p for p, t in have.items() if not t.decode_read} <= {"ffn.gate.tid2eid"}
        missing = reads - set(have)
        assert missing <= {"ffn.experts.routed_experts._expert_map",
                           "ffn.gate.e_score_correction_bias",
                           "attn.compressor.fused_wkv_wgate.weight_scale_inv",
                           "attn.indexer.weights_proj.weight_scale_inv",
                           "attn.indexer.compressor.fused_wkv_wgate.weight_scale_inv"}
    order = AD.consumption_order(k, list(have))
    assert order[0] == "hc_attn_fn" and order[-1] == (
        "ffn.gate.tid2eid" if k.mlp == "hash" else order[-1])


def test_core_state_bytes_scale_with_tokens():
    assert AD.core_state_bytes(1, 1) == 640 * 584
    assert AD.core_state_bytes(4, 8) == 4 * AD.core_state_bytes(1, 1)


def test_hooks_document_is_generated():
    text = (ROOT / "docs" / "hooks-deepseek_v4.md").read_text("utf-8")
    assert text == hooks_md_text("deepseek_v4"), \
        "run `l2sched docs hooks --model deepseek_v4`"
    for h in AD.HOOKS:
        assert f"`{h.name}`: `{h.install.source}`" in text


def _run(capsys, *args) -> tuple[int, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_inventory_command(capsys):
    rc, out = _run(capsys, "inventory", "--model-config", "deepseek-v4-flash",
                   "--tp", "8", "--ep", "--tp-rank", "7")
    assert rc == 0, out
    assert "(deepseek_v4): 43 decoder layers, TP8 + EP, tensors of TP rank 7" in out
    assert "hca+moe: 20 layers: 3,5,7," in out
    assert "experts 224-255, 4,194,304 B each" in out
    # rank 7 holds the last 32 experts: 32 x 43 x 13,369,344 B of MXFP4
    # weights and scales, plus the same 1,983,691,784 B of the rest as rank 0
    assert "total over 43 layers: 20,379,909,128 B" in out
    rc, out = _run(capsys, "inventory", "--model-config", str(FLASH), "--json")
    data = json.loads(out)
    assert rc == 0 and data["model"] == "deepseek_v4"
    assert data["total_bytes"] == 153_887_996_104


def test_hand_schedule_checks_lints_and_compiles(capsys, tmp_path):
    """The shipped H200 TP1 schedule: check, fmt, lint on the h200 profile
    with no error, and a plan whose window A fills only this layer's wo_a
    (8 MB of it) at attn.before_core in all 43 layers, and window B the next
    layer's mHC mixer after the gate in the 42 layers with a next layer."""
    rc, out = _run(capsys, "check", HAND)
    assert rc == 0 and "for deepseek_v4 on h200, TP1" in out, out
    rc, out = _run(capsys, "fmt", "--check", HAND)
    assert rc == 0, out
    rc, out = _run(capsys, "lint", HAND, "--device", "h200", "--tokens", "1,16")
    assert rc == 0 and ": 0 errors" in out and "L2S101" not in out, out
    rc, out = _run(capsys, "compile", HAND, "-o", str(tmp_path / "plan.json"))
    assert rc == 0, out
    plan = json.loads((tmp_path / "plan.json").read_text("utf-8"))
    assert plan["model"] == "deepseek_v4"
    a = [i for i in plan["issues"] if i["window"] == "A"]
    b = [i for i in plan["issues"] if i["window"] == "B"]
    assert len(a) == 43 and {i["hook"] for i in a} == {"attn.before_core"}
    assert {r["tensor"] for i in a for r in i["ranges"]} == {"attn.wo_a.weight"}
    assert len(b) == 42 and {i["hook"] for i in b} == {"moe.after_gate"}
    assert {r["tensor"] for i in b for r in i["ranges"]} == {
        "hc_attn_fn", "hc_attn_scale", "hc_attn_base", "attn_norm.weight"}


def test_the_architecture_table_imports_only_the_adapter_it_finds():
    """Each ``ARCHITECTURE_TABLE`` entry is what its adapter serves, and a
    lookup by architecture or model_type imports that adapter alone (in a
    fresh interpreter: no other adapter module is loaded)."""
    from l2sched.model.adapters import ARCHITECTURE_TABLE

    for name, served in ARCHITECTURE_TABLE.items():
        ad = get_adapter(name)
        assert set(served) == set(ad.ARCHITECTURES) | set(ad.MODEL_TYPES), name
    code = ("import sys; from l2sched.model.adapters import adapter_for as f, "
            "ARCHITECTURE_TABLE as t; "
            "a = f('DeepseekV4ForCausalLM'); b = f(None, 'deepseek_v4'); "
            "c = f('NoSuchForCausalLM'); "
            "print(a.NAME, b.NAME, c, sorted(n for n in t "
            "if 'l2sched.model.adapters.' + n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["deepseek_v4", "deepseek_v4", "None", "['deepseek_v4']"]


def test_vllms_form_of_the_config_gives_the_same_inventory():
    """vLLM's ``hf_text_config`` (transformers' ``DeepseekV4Config``, what the
    plugin and ``auto`` read) replaces ``compress_ratios`` and
    ``num_hash_layers`` by ``layer_types``/``compress_rates`` and
    ``mlp_layer_types``: the same kinds and tensors either way."""
    pytest.importorskip("transformers.models.deepseek_v4",
                        reason="needs transformers with DeepseekV4Config (the vllm "
                               "extra)")
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import (
        DeepseekV4Config,
    )

    raw = json.loads(FLASH.read_text("utf-8"))
    hf = DeepseekV4Config(**raw).to_dict()
    assert hf.get("compress_ratios") is None and hf.get("num_hash_layers") is None
    hf["architectures"] = ["DeepseekV4ForCausalLM"]
    public = load_model_config(FLASH)
    assert AD.layer_kinds(hf) == AD.layer_kinds(public)
    for tp, ep, rank in ((1, False, 0), (4, True, 1)):
        assert analytical_inventory(hf, tp, ep, rank).diff(
            analytical_inventory(public, tp, ep, rank)) == []
    # a hash layer kept after a scored one survives the fit's subset
    sub = AD.subset_config(hf, AD.layer_kinds(hf), [3, 0, 2])
    assert [str(k) for k in AD.layer_kinds(sub)] == ["hca+moe", "swa+hash", "csa+hash"]
    errs = []
    AD.validate_config({k: v for k, v in hf.items() if k != "layer_types"},
                       lambda k, m: errs.append(k))
    assert errs == ["compress_ratios"]


def test_gb10_fit_reproduces_the_shipped_schedule_within_l2_and_near_the_port(capsys, tmp_path):
    """``l2sched fit`` for DeepSeek-V4-Flash on the GB10 estimate profile at
    TP2 (155 GB at TP1 does not fit one DGX Spark) writes the shipped file
    again: windows before the all-reduces and after the router gate, every
    budget within the usable L2, UNVERIFIED (an estimate profile, the
    fill-vs-all-reduce term unmeasured); the lint predicts +3..+5% steps/s
    at one token, where the published DeepSeek-V4.1 port on DGX Spark
    measured +4.0% (docs/sources.md)."""
    from l2sched.lang.resolve import load_schedule

    shipped = ROOT / "schedules" / "deepseek-v4-gb10-tp2-fit.l2s"
    out = tmp_path / shipped.name
    rc, log = _run(capsys, "fit", "--device", "gb10", "--tp", "2", "--tokens", "1,4,16,64",
                   "--model-config", "deepseek-v4-flash", "--allow-unmeasured", "-o", str(out))
    assert rc == 0, log
    strip = [ln for ln in out.read_text("utf-8").splitlines() if not ln.startswith("# Command:")]
    want = [ln for ln in shipped.read_text("utf-8").splitlines()
            if not ln.startswith("# Command:")]
    assert strip == want
    sched = load_schedule(shipped)
    usable = load_device("gb10").capacity_bytes
    assert sched.windows and all(w.budget <= usable for w in sched.windows)
    assert {w.hook.split(".")[-1] for w in sched.windows} <= {
        "pre_all_reduce", "after_gate"}
    rc, log = _run(capsys, "lint", str(shipped), "--tokens", "1")
    m = re.search(r"\(([-+][0-9.]+)% step time, ([-+][0-9.]+)% steps/s\)", log)
    assert m and 3.0 <= float(m.group(2)) <= 5.0, log[-600:]


def test_fit_reproduces_the_shipped_schedule(capsys, tmp_path):
    """``l2sched fit`` with the command in the fitted file's header writes it
    again: NO PREFETCH for DeepSeek-V4-Flash at TP1 on the h200 profile (the
    best candidate's lower bound does not beat the noise floor)."""
    shipped = ROOT / "schedules" / "deepseek-v4-h200-tp1-fit.l2s"
    out = tmp_path / shipped.name
    rc, log = _run(capsys, "fit", "--device", "h200", "--tp", "1", "--tokens",
                   "1,4,16,64", "--model-config", "deepseek-v4-flash", "-o", str(out))
    assert rc == 0, log
    got = out.read_text("utf-8")
    strip = [ln for ln in got.splitlines() if not ln.startswith("# Command:")]
    want = [ln for ln in shipped.read_text("utf-8").splitlines()
            if not ln.startswith("# Command:")]
    assert strip == want
    assert "\nwindow " not in got and "NO PREFETCH" in got
    assert "model deepseek_v4\nmodel_config deepseek-v4-flash\n" in got


def test_engine_run_config_is_the_public_one_in_bf16_cut_to_what_fits(tmp_path, capsys):
    """``benchmarks/verify_gpu.py --model deepseek-v4-flash``: the public
    config without its quantization, cut to the first layers whose BF16
    weights fit the H200's engine (8 of 43), every per-layer list cut alike,
    a config the adapter reads; the hand-written schedule with window B off
    in the last kept layer (verify_gpu's --set) lints with 0 errors on it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import verify_gpu

    cfg = verify_gpu.deepseek_v4_config(150109880320)  # the H200's total_memory, bytes
    n = cfg["num_hidden_layers"]
    assert n == 8 and len(cfg["compress_ratios"]) == n and cfg["num_hash_layers"] == 3
    assert "quantization_config" not in cfg and "expert_dtype" not in cfg
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    load_model_config(path)
    rc, log = _run(capsys, "lint", str(ROOT / "schedules" / "deepseek-v4-h200-tp1.l2s"),
                   "--model-config", str(path), "--tokens", "1",
                   "--set", f"window.B.layers=all except {n - 1}")
    assert rc == 0 and ": 0 errors," in log, log[-800:]
