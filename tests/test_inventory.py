"""Pure-Python tests of the GLM-5.3 adapter and the analytical inventory
(no torch, no vLLM; the live comparison is in ``test_inventory_vllm.py``).

Expected numbers: vLLM 0.33.0's module tree (docs/sources.md#vllm-glm5next; measured on
the real vLLM model) and issue 3."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.cli.docs import hooks_md_text
from l2sched.cli.inventory import add_cli, render_table
from l2sched.errors import L2sError, L2sModelError
from l2sched.model.adapters import glm5next as g
from l2sched.model.config import default_config_text, load_model_config
from l2sched.model.inventory import analytical_inventory
from l2sched.units import MiB

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def config():
    return load_model_config(None)


@pytest.fixture(scope="module")
def tp4(config):
    return analytical_inventory(config, 4, False)


# ---------------------------------------------------------------- layer kinds

def test_layer_kinds_of_glm53_flash(config):
    kinds = [str(k) for k in g.layer_kinds(config)]
    assert len(kinds) == 45
    assert kinds[:3] == ["kda+dense"] * 3
    assert [i for i, k in enumerate(kinds) if k == "mla+moe"] == list(range(3, 45, 4))
    assert kinds[44] == "kda+moe"
    assert kinds.count("kda+moe") == 31


def test_embedded_config_values():
    raw = json.loads(default_config_text())
    assert raw["index_kpool"] == 4  # checkpoint value, not the class default 16
    for key, value in {"mhc": True, "topk_method": "noaux_tc",
                       "scoring_func": "sigmoid", "mla_use_nope": True,
                       "indexer_rope_interleave": True}.items():
        assert raw[key] == value
    assert load_model_config(None)["hidden_size"] == 4096


# ------------------------------------------------------------- known bytes

def test_tp4_known_values(tp4):
    t = tp4.tensor(4, "self_attn.in_proj_qkvbfg_a.weight")
    assert t.shape == (6416, 4096) and t.nbytes == 52_559_872
    assert not t.replicated and t.replicated_bytes == 256 * 4096 * 2  # 2 MiB
    assert tp4.tensor(4, "self_attn.o_proj.weight").nbytes == 16_777_216
    assert tp4.tensor(3, "self_attn.o_proj.weight").nbytes == 33_554_432
    # parameters only (lazy tensors excluded), routed experts excluded
    assert round(tp4.layer_bytes(4, routed=False, lazy=False) / MiB, 1) == 84.5
    assert round(tp4.layer_bytes(3, routed=False, lazy=False) / MiB, 1) == 99.5
    assert round(tp4.layer_bytes(0, lazy=False) / MiB, 1) == 142.2
    w13 = tp4.tensor(4, "mlp.experts.routed_experts.w13_weight")
    w2 = tp4.tensor(4, "mlp.experts.routed_experts.w2_weight")
    assert w13.bytes_per_expert + w2.bytes_per_expert == 12 * MiB
    assert w13.experts == (0, 288)


def test_tp1_totals_match_map(config):
    inv = analytical_inventory(config, 1, False)
    got = {str(k): round(inv.layer_bytes(i[0], lazy=False) / MiB, 1)
           for k, i in inv.kind_groups()}
    assert got == {"kda+dense": 553.9, "mla+moe": 14115.5, "kda+moe": 14140.2}


def test_ep4_experts_per_rank(config):
    for rank in range(4):
        inv = analytical_inventory(config, 4, True, rank)
        w13 = inv.tensor(4, "mlp.experts.routed_experts.w13_weight")
        w2 = inv.tensor(4, "mlp.experts.routed_experts.w2_weight")
        assert w13.shape == (72, 4096, 4096) and w2.shape == (72, 4096, 2048)
        assert w13.experts == (72 * rank, 72 * rank + 72)
        assert w13.bytes_per_expert + w2.bytes_per_expert == 48 * MiB
        # 3456 MiB of routed experts per GPU per layer, with or without EP
        assert (w13.nbytes + w2.nbytes) == 3456 * MiB
        # the shared expert stays TP-sharded under EP
        assert inv.tensor(4, "mlp.shared_experts.down_proj.weight").shape == (4096, 512)


def test_expert_range_remainder_goes_to_last_rank():
    assert g.expert_range(10, 4, 0) == (0, 2)
    assert g.expert_range(10, 4, 3) == (6, 10)


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_sharding_is_consistent_across_tp(config, tp):
    one = analytical_inventory(config, 1, False)
    inv = analytical_inventory(config, tp, False)
    for i in (0, 3, 4):
        base = {t.path: t for t in one.layers[i]}
        for t in inv.layers[i]:
            b = base[t.path]
            if t.replicated:
                assert t.nbytes == b.nbytes and t.replicated_bytes == t.nbytes
            else:
                rep = t.replicated_bytes
                assert (t.nbytes - rep) * tp == b.nbytes - b.replicated_bytes, t.path


def test_views_are_not_counted(tp4):
    uk = tp4.tensor(3, "self_attn.mla_attn.mla_attn.W_UK_T")
    assert uk.view_of == "self_attn.kv_b_proj.weight" and uk.lazy
    assert uk.shape == (16, 256, 512)
    owned = sum(t.nbytes for t in tp4.layers[3] if not t.view_of)
    assert tp4.layer_bytes(3) == owned


# ---------------------------------------------------------- order, timeline

def test_consumption_order_kda_moe(tp4):
    paths = [t.path for t in tp4.layers[4]]
    assert paths[:4] == ["hc_attn_fn", "hc_attn_scale", "hc_attn_base",
                         "input_layernorm.weight"]
    assert paths.index("self_attn.in_proj_qkvbfg_a.weight") == 4
    order = ["self_attn.in_proj_qkvbfg_a.weight", "self_attn._merged_conv_weight",
             "self_attn.o_proj.weight", "hc_ffn_fn",
             "mlp.shared_experts.gate_up_proj.weight", "mlp.gate.weight",
             "mlp.experts.routed_experts.w13_weight",
             "mlp.experts.routed_experts.w2_weight"]
    assert [paths.index(p) for p in order] == sorted(paths.index(p) for p in order)
    # tensors no decode op reads come last
    tail = [t.path for t in tp4.layers[4] if not t.decode_read]
    assert paths[-len(tail):] == tail
    assert set(tail) == {f"self_attn.{c}_conv1d.weight" for c in "qkv"}


def test_consumption_order_mla(tp4):
    paths = [t.path for t in tp4.layers[3]]
    order = ["self_attn.fused_qkv_a_proj.weight", "self_attn.q_b_proj.weight",
             "self_attn.indexer.wq_b.weight", "self_attn.indexer._wp_fp32",
             "self_attn.mla_attn.mla_attn.W_UK_T", "self_attn.mla_attn.mla_attn.W_UV",
             "self_attn.o_proj.weight"]
    assert [paths.index(p) for p in order] == sorted(paths.index(p) for p in order)


@pytest.mark.parametrize("kind", g.FLASH_KINDS, ids=str)
def test_timeline_is_consistent(config, kind):
    ops = g.decode_timeline(kind)
    assert len({op.name for op in ops}) == len(ops)
    fired = []
    for op in ops:
        assert op.cls in g.OP_CLASSES and op.condition in g.CONDITIONS
        assert op.stream in ("main", "aux")
        fired += [*op.hooks_before, *op.hooks_after]
    expected = [h.name for h in g.HOOKS if h.exists_in(kind)]
    assert sorted(fired) == sorted(expected)  # every hook exactly once
    orders = [g.HOOKS_BY_NAME[h].order for h in fired]
    assert orders == sorted(orders)
    for h in fired:
        inst = g.HOOKS_BY_NAME[h].install_for(kind)
        assert inst.mechanism in ("forward_pre_hook", "forward_hook",
                                  "wrap_before", "wrap_after")
    # every tensor a decode op reads exists, and every decode-read tensor is read
    for ep in (False, True):
        inv = analytical_inventory(config, 4, ep)
        i = [str(k) for k in inv.kinds].index(str(kind))
        have = {t.path: t for t in inv.layers[i]}
        reads = {p for op in ops for p in op.reads}
        assert {p for p, t in have.items() if t.decode_read} <= reads
        missing = reads - set(have)
        assert all(p.endswith("_expert_map") for p in missing) or ep


def test_hook_catalogue_names_and_orders_are_fixed():
    assert [(h.name, h.order) for h in g.HOOKS] == [
        ("layer.entry", 0), ("attn.after_first_proj", 10), ("attn.before_core", 20),
        ("attn.after_core", 30), ("attn.pre_all_reduce", 40),
        ("attn.post_all_reduce", 50), ("moe.after_gate", 60),
        ("moe.before_experts", 70), ("moe.pre_all_reduce", 80),
        ("moe.post_all_reduce", 90), ("mlp.pre_all_reduce", 80),
        ("mlp.post_all_reduce", 90), ("layer.exit", 100)]
    for kind in g.FLASH_KINDS:
        for h in g.HOOKS:
            if h.exists_in(kind):
                h.install_for(kind)
            else:
                with pytest.raises(KeyError):
                    h.install_for(kind)


def test_kernel_patterns_name_real_ops():
    table = json.loads((Path(ROOT) / "l2sched" / "data" / "glm5next-kernels.json")
                       .read_text(encoding="utf-8"))
    names = {op.name for k in g.FLASH_KINDS for op in g.decode_timeline(k)}
    assert set(table["ops"]) <= names
    assert set(table["gemm_ops"]) <= names


def test_docs_hooks_md_is_generated():
    with open(os.path.join(ROOT, "docs", "hooks.md"), encoding="utf-8") as f:
        assert f.read() == hooks_md_text(), \
            "regenerate: l2sched docs hooks"


# ------------------------------------------------------------- bad configs

def _write(tmp_path, obj, name="config.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
    return str(p)


def _raw():
    return json.loads(default_config_text())


def _error(path) -> str:
    with pytest.raises(L2sModelError) as e:
        load_model_config(path)
    return str(e.value)


def test_missing_key_names_key_and_file(tmp_path):
    cfg = _raw()
    del cfg["hidden_size"]
    path = _write(tmp_path, cfg)
    msg = _error(path)
    assert "hidden_size" in msg and path in msg


def test_wrong_type_names_key_and_line(tmp_path):
    cfg = _raw()
    cfg["num_attention_heads"] = "64"
    cfg["mhc"] = 1
    path = _write(tmp_path, cfg)
    msg = _error(path)
    assert "num_attention_heads" in msg and "mhc" in msg and path in msg
    line = next(i for i, s in enumerate(open(path), 1) if "num_attention_heads" in s)
    assert f"{path}:{line}:" in msg  # compiler-style location of the key


def test_bool_is_not_an_int(tmp_path):
    cfg = _raw()
    cfg["hidden_size"] = True
    assert "hidden_size" in _error(_write(tmp_path, cfg))


def test_unknown_architecture(tmp_path):
    cfg = _raw()
    cfg["architectures"] = ["LlamaForCausalLM"]
    msg = _error(_write(tmp_path, cfg))
    assert "architectures" in msg and "LlamaForCausalLM" in msg
    assert "Glm5NextForCausalLM" in msg


def test_missing_architecture(tmp_path):
    cfg = _raw()
    del cfg["architectures"], cfg["model_type"]
    assert "architectures" in _error(_write(tmp_path, cfg))


def test_not_json(tmp_path):
    path = _write(tmp_path, '{"hidden_size": 4096,\n  oops }')
    msg = _error(path)
    assert f"{path}:2:" in msg and "JSON" in msg


def test_missing_file_and_directory_without_config(tmp_path):
    assert "no such file" in _error(str(tmp_path / "nope.json"))
    assert "has no config.json" in _error(str(tmp_path))


def test_model_directory_and_multimodal_nesting(tmp_path):
    text = _raw()
    mm = {"architectures": ["Glm5NextForConditionalGeneration"],
          "model_type": "glm5_next", "torch_dtype": "bfloat16",
          "text_config": {k: v for k, v in text.items()
                          if k not in ("architectures", "torch_dtype")}}
    _write(tmp_path, mm)
    cfg = load_model_config(str(tmp_path))
    assert cfg["hidden_size"] == 4096 and cfg["torch_dtype"] == "bfloat16"
    inv = analytical_inventory(cfg, 4, False)
    assert inv.tensor(4, "self_attn.o_proj.weight").nbytes == 16_777_216


def test_nested_key_error_says_text_config(tmp_path):
    text = _raw()
    del text["kv_lora_rank"]
    mm = {"architectures": ["Glm5NextForConditionalGeneration"], "text_config": text}
    assert "text_config.kv_lora_rank" in _error(_write(tmp_path, mm))


def test_layer_types_checked(tmp_path):
    cfg = _raw()
    cfg["layer_types"] = ["linear_attention"] * 44
    assert "layer_types" in _error(_write(tmp_path, cfg))
    cfg["layer_types"] = ["linear_attention"] * 44 + ["sliding"]
    msg = _error(_write(tmp_path, cfg))
    assert "layer_types[44]" in msg and "sliding" in msg


def test_unsupported_features(tmp_path):
    cfg = _raw()
    cfg["mhc"] = False
    assert "mhc" in _error(_write(tmp_path, cfg))
    cfg = _raw()
    cfg["quantization_config"] = {"quant_method": "fp8"}
    assert "quantization_config" in _error(_write(tmp_path, cfg))


def test_tp_not_dividing(config):
    with pytest.raises(L2sModelError) as e:
        analytical_inventory(config, 3, False)
    assert "--tp 3" in str(e.value)
    with pytest.raises(L2sModelError):
        analytical_inventory(config, 4, False, tp_rank=4)


def test_all_errors_are_l2s_errors(tmp_path):
    for bad in ([], "null", '"x"', {"architectures": "Glm5NextForCausalLM"},
                {"architectures": ["Glm5NextForCausalLM"], "text_config": 3}):
        with pytest.raises(L2sError):
            load_model_config(_write(tmp_path, bad if isinstance(bad, str)
                                     else json.dumps(bad)))


def test_smaller_config_with_explicit_lists(tmp_path):
    cfg = _raw()
    cfg.update(num_hidden_layers=4, n_routed_experts=8, n_shared_experts=None,
               topk_method="greedy",
               layer_types=["linear_attention", "indexed_attention"] * 2,
               mlp_layer_types=["dense", "sparse", "sparse", "sparse"])
    inv = analytical_inventory(load_model_config(_write(tmp_path, cfg)), 2, True, 1)
    assert [str(k) for k in inv.kinds] == ["kda+dense", "mla+moe", "kda+moe",
                                           "mla+moe"]
    paths = {t.path for t in inv.layers[1]}
    assert "mlp.gate.e_score_correction_bias" not in paths
    assert not any("shared_experts" in p for p in paths)
    assert inv.tensor(1, "mlp.experts.routed_experts.w13_weight").experts == (4, 8)


# --------------------------------------------------------------------- CLI

def _run_cli(argv):
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["inventory", *argv])
    return args.handler(args)


def test_cli_table(capsys):
    assert _run_cli(["--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert "self_attn.in_proj_qkvbfg_a.weight" in out and "52,559,872" in out
    assert "kda+moe: 31 layers" in out and "total over 45 layers" in out


def test_cli_json(capsys):
    assert _run_cli(["--tp", "4", "--ep", "--tp-rank", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tp"] == 4 and data["ep"] and data["tp_rank"] == 2
    kda_moe = next(k for k in data["kinds"] if k["kind"] == "kda+moe")
    w13 = next(t for t in kda_moe["tensors"] if t["path"].endswith("w13_weight"))
    assert w13["experts"] == [144, 216] and w13["bytes"] == 72 * 32 * MiB


def test_cli_bad_config_exits_1(tmp_path, capsys):
    cfg = _raw()
    del cfg["q_lora_rank"]
    path = _write(tmp_path, cfg)
    assert _run_cli(["--model-config", path]) == 1
    err = capsys.readouterr().err
    assert "q_lora_rank" in err and path in err and "Traceback" not in err


def test_cli_is_fast_and_imports_no_torch():
    """``l2sched inventory --tp 4`` through the real CLI: no torch/vLLM import
    and well under a second. CPU time (user + sys of the whole process, start-up
    included) is measured rather than wall time, so a loaded host does not
    make the test flaky."""
    code = ("import sys, io, contextlib, resource\n"
            "from l2sched.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['inventory', '--tp', '4'])\n"
            "r = resource.getrusage(resource.RUSAGE_SELF)\n"
            "print(rc, 'torch' in sys.modules, 'vllm' in sys.modules,"
            " round(r.ru_utime + r.ru_stime, 3))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out[:3] == ["0", "False", "False"]
    assert float(out[3]) < 1.0


def test_render_table_units(tp4):
    text = render_table(tp4)
    assert "MiB" in text and "bytes per GPU" in text


def test_conditions():
    assert not g.condition_holds("tp>1", 0, 45, 1, True)
    assert g.condition_holds("tp>1", 0, 45, 4, False)
    assert g.condition_holds("layer==last", 44, 45, 1, False)
    assert not g.condition_holds("layer==last", 43, 45, 1, False)
    for kind in g.FLASH_KINDS:
        for op in g.decode_timeline(kind):
            g.condition_holds(op.condition, 0, 45, 4, True)


@pytest.mark.parametrize("argv, message", [
    (["--tp", "0"], "l2sched inventory: error: --tp must be at least 1, got 0"),
    (["--tp", "2", "--tp-rank", "2"],
     "l2sched inventory: error: --tp-rank must be in 0..1, got 2"),
])
def test_inventory_bad_tp_is_a_usage_error(capsys, argv, message):
    from l2sched.cli import main
    assert main(["inventory", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == message + "\n"


@pytest.mark.parametrize("text,where", [("{\n", "2:1"), ("{", "1:2"),
                                        ('{"a":\n', "2:1"), ("", "1:1")])
def test_truncated_json_is_one_line_not_an_index_error(tmp_path, text, where):
    """'{' (then a newline) gave IndexError: the error's line was past the
    last line of the file."""
    path = _write(tmp_path, text, "badcfg.json")
    msg = _error(path)
    assert msg.splitlines()[0].startswith(f"{path}:{where}: not valid JSON: ")


@pytest.mark.parametrize("cmd", ["inventory", "check", "lint"])
def test_cli_with_truncated_json_has_no_traceback(tmp_path, cmd):
    path = _write(tmp_path, "{\n", "badcfg.json")
    args = ([cmd] + (["schedules/glm53-flash-h200-tp4.l2s"] if cmd != "inventory"
                     else []) + ["--model-config", path])
    r = subprocess.run([sys.executable, "-m", "l2sched"] + args, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert f"{path}:2:1: not valid JSON: " in r.stderr


def test_bom_prefixed_config_loads(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xef\xbb\xbf" + default_config_text().encode())
    assert load_model_config(str(p))["hidden_size"] == 4096


def test_fifo_model_config_is_refused(tmp_path):
    """Reading a FIFO blocked forever (run in a subprocess with a timeout)."""
    p = tmp_path / "fifo.json"
    os.mkfifo(p)
    code = ("import sys\nfrom l2sched.model.config import load_model_config\n"
            "from l2sched.errors import L2sError\n"
            "try:\n    load_model_config(sys.argv[1])\n"
            "except L2sError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True,
                       text=True, timeout=30, cwd=ROOT)
    assert r.stdout.strip() == f"{p}: not a regular file"


@pytest.mark.parametrize("key,value,limit", [
    ("num_hidden_layers", 10_000_000, 4096), ("n_routed_experts", 10**9, 65536),
    ("hidden_size", 10**12, 1 << 20)])
def test_config_sizes_are_bounded(tmp_path, key, value, limit):
    """num_hidden_layers = 10000000 ran for minutes."""
    cfg = _raw()
    cfg[key] = value
    cfg["layer_types"] = cfg["mlp_layer_types"] = None
    path = _write(tmp_path, cfg)
    msg = _error(path)
    line = next(i for i, s in enumerate(open(path), 1) if f'"{key}"' in s)
    assert f"{path}:{line}:2: {key}: must be at most {limit}, got {value}" in msg


@pytest.mark.parametrize("value", ["8", 0, 289])
def test_num_experts_per_tok_is_checked(tmp_path, value):
    cfg = _raw()
    cfg["num_experts_per_tok"] = value
    msg = _error(_write(tmp_path, cfg))
    assert "num_experts_per_tok: " in msg


def test_mla_layer_type_names_of_each_transformers_version():
    # transformers 5.17 (the lent GPU machine's) writes
    # "deepseek_sparse_attention" into hf_text_config.layer_types, 5.20
    # "indexed_attention"; vLLM 0.33.0 runs on both.
    from l2sched.model.adapters.glm5next.kinds import layer_kinds

    for mla in ("deepseek_sparse_attention", "indexed_attention", "full_attention"):
        kinds = layer_kinds({"num_hidden_layers": 2, "mlp_layer_types": ["dense", "sparse"],
                             "layer_types": ["linear_attention", mla]})
        assert [str(k) for k in kinds] == ["kda+dense", "mla+moe"]
