"""The Qwen3-MoE adapter without vLLM: configs, layer kinds, the registry,
per-rank inventories at TP 1/2/4/8 with and without EP, the timeline and
hook catalogue, the generated hooks document, and every CLI command on the
shipped Qwen3 schedules. (The live-tree check is
``tests/test_qwen3_moe_vllm.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from l2sched.cli import main
from l2sched.cli.docs import hooks_md_text
from l2sched.errors import L2sModelError
from l2sched.model.adapters import adapter_of_config, get_adapter
from l2sched.model.config import load_model_config
from l2sched.model.inventory import TPSplitError, analytical_inventory
from l2sched.units import MiB

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "l2sched" / "data"
A3B = DATA / "qwen3-30b-a3b-config.json"
A22B = DATA / "qwen3-235b-a22b-config.json"
HAND = "schedules/qwen3-30b-a3b-h200-tp1.l2s"
FIT_H200 = "schedules/qwen3-30b-a3b-h200-tp1-fit.l2s"
FIT_SM120 = "schedules/qwen3-235b-a22b-sm120-tp4-fit.l2s"
AD = get_adapter("qwen3_moe")


def _config(tmp_path, **changes) -> str:
    cfg = json.loads(A3B.read_text("utf-8"))
    cfg.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg, indent=1), "utf-8")
    return str(path)


def test_the_registry_picks_the_adapter_from_architectures():
    for path in (A3B, A22B):
        cfg = load_model_config(path)
        assert adapter_of_config(cfg).NAME == "qwen3_moe"
    assert load_model_config(None, "qwen3_moe")["num_hidden_layers"] == 48


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ep", [False, True])
def test_inventory_per_rank(tp, ep):
    """Both public configs at every TP degree, every rank: shapes from the
    head counts (KV heads replicated over ranks once TP exceeds 4), the
    experts split by TP or EP, bf16 bytes; the per-layer bytes summed over
    the ranks give the TP1 layer (replicated tensors once per rank)."""
    for path, h, nq, im in ((A3B, 2048, 32, 768), (A22B, 4096, 64, 1536)):
        cfg = load_model_config(path)
        one = analytical_inventory(cfg, 1, False)
        total_routed = 0
        for rank in range(tp):
            inv = analytical_inventory(cfg, tp, ep, rank)
            assert {str(k) for k in inv.kinds} == {"gqa+moe"}
            qkv = inv.tensor(0, "self_attn.qkv_proj.weight")
            assert qkv.shape == ((nq // tp + 2 * max(1, 4 // tp)) * 128, h)
            assert qkv.nbytes == qkv.shape[0] * h * 2 and qkv.dtype == "bfloat16"
            assert inv.tensor(0, "self_attn.o_proj.weight").shape == (h, nq * 128 // tp)
            w13 = inv.tensor(0, "mlp.experts.routed_experts.w13_weight")
            w2 = inv.tensor(0, "mlp.experts.routed_experts.w2_weight")
            if ep and tp > 1:
                assert w13.experts == (128 // tp * rank, 128 // tp * (rank + 1))
                assert w13.shape == (128 // tp, 2 * im, h)
                assert w13.bytes_per_expert + w2.bytes_per_expert == 3 * im * h * 2
            else:
                assert w13.shape == (128, 2 * im // tp, h) and w13.experts == (0, 128)
                assert w13.bytes_per_expert + w2.bytes_per_expert == 3 * im * h * 2 // tp
            total_routed += w13.nbytes + w2.nbytes
        base = one.tensor(0, "mlp.experts.routed_experts.w13_weight").nbytes + \
            one.tensor(0, "mlp.experts.routed_experts.w2_weight").nbytes
        assert total_routed == base
    # the 30B-A3B at TP1: 48 layers of 1,188.5 MiB (1,152 MiB routed experts)
    inv = analytical_inventory(load_model_config(A3B), 1, False)
    assert round(inv.layer_bytes(0) / MiB, 1) == 1188.5
    assert inv.layer_bytes(0) - inv.layer_bytes(0, routed=False) == 1152 * MiB


def test_tp_degrees_the_model_cannot_split_at():
    cfg = load_model_config(A3B)
    with pytest.raises(TPSplitError, match="num_attention_heads = 32 is not divisible"):
        analytical_inventory(cfg, 3, False)
    with pytest.raises(TPSplitError, match="greater than num_experts"):
        analytical_inventory(dict(cfg, num_attention_heads=256,
                                  num_key_value_heads=256), 256, False)


def test_quantized_and_unmodelled_configs_are_refused(tmp_path):
    fp8 = _config(tmp_path, quantization_config={"quant_method": "fp8",
                                                 "weight_block_size": [128, 128]})
    with pytest.raises(L2sModelError) as e:
        load_model_config(fp8)
    msg = str(e.value)
    assert "quantization_config: quantized checkpoints are not modelled ('fp8')" in msg
    assert "config.json:" in msg  # located at the key
    for key, value, needle in (
            ("torch_dtype", "float8_e4m3fn", "unsupported dtype"),
            ("hidden_act", "gelu", "not supported"),
            ("shared_expert_intermediate_size", 512, "shared expert is not modelled"),
            ("num_experts_per_tok", 200, "at most num_experts = 128"),
            ("num_key_value_heads", 5, "does not divide"),
            ("mlp_only_layers", [0, 48], "mlp_only_layers[1] = 48")):
        with pytest.raises(L2sModelError, match=needle.replace("[", r"\[")):
            load_model_config(_config(tmp_path, **{key: value}))


def test_dense_layers_from_mlp_only_layers_and_decoder_sparse_step(tmp_path):
    cfg = load_model_config(_config(tmp_path, decoder_sparse_step=2, mlp_only_layers=[1]))
    kinds = [str(k) for k in AD.layer_kinds(cfg)]
    # (i + 1) % 2 == 0 -> MoE, except layer 1 (mlp_only_layers)
    assert kinds[:6] == ["gqa+dense"] * 3 + ["gqa+moe", "gqa+dense", "gqa+moe"]
    inv = analytical_inventory(cfg, 2, False)
    assert inv.tensor(0, "mlp.gate_up_proj.weight").shape == (6144, 2048)
    assert inv.tensor(0, "mlp.down_proj.weight").shape == (2048, 3072)
    sub = AD.subset_config(cfg, AD.layer_kinds(cfg), [0, 3, 5])
    assert [str(k) for k in AD.layer_kinds(sub)] == ["gqa+dense", "gqa+moe", "gqa+moe"]
    assert AD.routing(cfg) == (8, 128)


@pytest.mark.parametrize("kind", ["gqa+moe", "gqa+dense"])
def test_timeline_is_consistent(tmp_path, kind):
    k = next(x for x in AD.ALL_KINDS if str(x) == kind)
    ops = AD.decode_timeline(k)
    assert len({op.name for op in ops}) == len(ops)
    fired = [h for op in ops for h in (*op.hooks_before, *op.hooks_after)]
    assert sorted(fired) == sorted(h.name for h in AD.HOOKS if h.exists_in(k))
    orders = [AD.HOOKS_BY_NAME[h].order for h in fired]
    assert orders == sorted(orders)
    cfg = load_model_config(_config(tmp_path, mlp_only_layers=[0]))
    for ep in (False, True):
        inv = analytical_inventory(cfg, 2, ep)
        have = {t.path: t for t in inv.layers[0 if kind == "gqa+dense" else 1]}
        reads = {p for op in ops for p in op.reads}
        assert {p for p, t in have.items() if t.decode_read} <= reads
        assert reads - set(have) <= {"self_attn.qkv_proj.bias",
                                     "mlp.experts.routed_experts._expert_map"}


def test_hooks_document_is_generated():
    text = (ROOT / "docs" / "hooks-qwen3_moe.md").read_text("utf-8")
    assert text == hooks_md_text("qwen3_moe"), "run `l2sched docs hooks --model qwen3_moe`"
    for h in AD.HOOKS:
        assert f"`{h.name}`: `{h.install.source}`" in text


def _run(capsys, *args) -> tuple[int, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_inventory_command_prints_the_per_rank_table(capsys):
    rc, out = _run(capsys, "inventory", "--model-config", str(A22B), "--tp", "4",
                   "--ep", "--tp-rank", "3")
    assert rc == 0
    assert "(qwen3_moe): 94 decoder layers, TP4 + EP, tensors of TP rank 3" in out
    assert "gqa+moe: 94 layers: 0-93" in out
    assert "experts 96-127, 25,165,824 B each" in out
    rc, out = _run(capsys, "inventory", "--model-config", str(A3B), "--json")
    assert rc == 0 and json.loads(out)["model"] == "qwen3_moe"


def test_cli_commands_on_the_shipped_schedules(capsys, tmp_path):
    for path in (HAND, FIT_H200, FIT_SM120):
        rc, out = _run(capsys, "check", path)
        assert rc == 0 and "for qwen3_moe" in out, out
        rc, out = _run(capsys, "fmt", "--check", path)
        assert rc == 0, out
        rc, out = _run(capsys, "lint", path, "--tokens", "1,4")
        assert rc == 0 and ": 0 errors" in out, out
        rc, out = _run(capsys, "compile", path, "-o", str(tmp_path / "plan.json"))
        assert rc == 0, out
        rc, out = _run(capsys, "explain", str(tmp_path / "plan.json"), "--tokens", "1")
        assert rc == 0, out
        rc, out = _run(capsys, "timeline", path, "-o", str(tmp_path / "trace.json"))
        assert rc == 0 and json.loads((tmp_path / "trace.json").read_text("utf-8"))
    rc, out = _run(capsys, "check", FIT_SM120, "--model-config", str(A22B))
    assert rc == 0, out
    rc, out = _run(capsys, "explain", HAND, "--layer", "3", "--tokens", "1")
    assert rc == 0 and "attn.before_core" in out and "moe.after_gate" in out, out
    plan = json.loads((tmp_path / "plan.json").read_text("utf-8"))
    assert plan["model"] == "qwen3_moe"


def test_hand_schedule_fills_o_proj_during_the_core(capsys, tmp_path):
    rc, _ = _run(capsys, "compile", HAND, "-o", str(tmp_path / "plan.json"))
    plan = json.loads((tmp_path / "plan.json").read_text("utf-8"))
    a = [i for i in plan["issues"] if i["window"] == "A"]
    assert len(a) == 48 and all(i["hook"] == "attn.before_core" for i in a)
    assert {r["tensor"] for i in a for r in i["ranges"]} == {"self_attn.o_proj.weight"}


@pytest.mark.parametrize("device,tp,config,shipped", [
    ("h200", 1, A3B, FIT_H200), ("sm120-rtx-pro-6000-maxq", 4, A22B, FIT_SM120)])
def test_fit_reproduces_the_shipped_schedules(capsys, tmp_path, device, tp, config,
                                              shipped):
    """``l2sched fit`` with the command in a fitted file's header writes that
    file again. Both answers have no windows today: NO PREFETCH on the h200
    profile; on the SM120 estimate profile the best candidate rests on an
    unmeasured term, so fit withholds its windows."""
    text = (ROOT / shipped).read_text("utf-8")
    out = tmp_path / Path(shipped).name
    rc, log = _run(capsys, "fit", "--device", device, "--tp", str(tp), "--tokens",
                   "1,4,16,64", "--model-config", str(config),
                   "-o", str(out))
    assert rc == 0, log
    got = out.read_text("utf-8")
    strip = [ln for ln in got.splitlines() if not ln.startswith("# Command:")]
    want = [ln for ln in text.splitlines() if not ln.startswith("# Command:")]
    assert strip == want
    assert "\nwindow " not in got  # no windows: decode runs as without l2sched
    assert ("NO PREFETCH" in got) != ("UNMEASURED: no windows written" in got)
