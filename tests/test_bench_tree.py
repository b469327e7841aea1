"""The bench module tree cannot drift from the inventory: TP4 paths, shapes, dtypes."""
from pathlib import Path

import pytest
from extras import TORCH_MISSING

torch = pytest.importorskip("torch", reason=TORCH_MISSING)

from l2sched.bench.tree import build_tree, distinct_experts, tree_entries
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory


def test_tree_equals_inventory_tp4():
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    model = build_tree(inv, device="meta")
    got = {(i, p): (s, dt) for i, p, s, dt in tree_entries(model)}
    want = {(i, e.path): (tuple(e.shape), e.dtype)
            for i in range(len(inv.layers)) for e in inv.tensors(i)}
    assert got == want


def test_distinct_experts():
    assert distinct_experts(1) == 8
    assert distinct_experts(64) == 241
    assert distinct_experts(10 ** 4) == 288


def test_dry_run(tmp_path):
    from l2sched.cli import main
    out = tmp_path / "r.json"
    assert main(["bench", "run", "--dry", "--tokens", "1", "--replays", "1", "--out", str(out)]) == 0
    import json
    d = json.loads(out.read_text())
    assert d["per_m"]["1"]["arms"]["compiled"]["runtime_stats"]["issued"] > 0
    # the hardware-queue setting a controls run must share (None: CUDA's default)
    import os
    assert d["machine"]["cuda_device_max_connections"] == os.environ.get(
        "CUDA_DEVICE_MAX_CONNECTIONS")


def test_matrix_reads_are_what_the_op_multiplies():
    """The ops probe reads these back after its flush (weights cold,
    activations hot): they must be the very tensors the op's GEMMs take."""
    from l2sched.bench.step import StepRunner
    from l2sched.device import load_device
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    runner = StepRunner(build_tree(inv, device="meta"), load_device("h200"), tokens=16)
    i = next(i for i, k in enumerate(inv.kinds) if k.attention == "mla")
    ops = {op.name: op for op in runner.ops_of(i)}
    ((_, wq, x),) = runner.matrix_reads(i, ops["mla.q_b_proj"])
    w = runner.model.layers[i].self_attn.q_b_proj.weight
    assert wq is w
    assert tuple(x.shape) == (16, w.shape[1]) and x.dtype == w.dtype
    ((_, _, xb),) = runner.matrix_reads(i, ops["mla.uk_bmm"])
    assert xb.dim() == 3 and xb.shape[1] == 16
    assert runner.matrix_reads(i, ops["mla.q_b_proj"])[0][2] is x  # cached: the step's input
    assert runner.matrix_reads(i, ops["moe.routing"]) == []


def test_dry_run_of_another_config_and_profile(tmp_path, capsys):
    """``--model-config`` / ``--device-profile`` (issue 44): the step is the
    config's (its layers, its experts: distinct experts from its expert
    count and top-k), the idle intervals the profile's, both recorded."""
    import json

    from l2sched.cli import main

    cfg = dict(load_model_config(None), num_hidden_layers=5, n_routed_experts=64)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    prof = tmp_path / "emul.toml"
    data = Path(__file__).parents[1] / "l2sched" / "data"
    text = (data / "devices" / "h200.toml").read_text()
    prof.write_text(text.replace('name = "h200"', 'name = "h200-copy"', 1))
    sched = tmp_path / "s.l2s"
    sched.write_text("schedule s\nmodel glm5next\ndevice h200\ntp 4\n\n"
                     "window B at attn.pre_all_reduce budget 4MB {\n"
                     "    this mlp.gate.weight\n}\n")
    out = tmp_path / "r.json"
    assert main(["bench", "run", "--dry", "--tokens", "1,64", "--replays", "1",
                 "--schedule", str(sched), "--model-config", str(tmp_path / "config.json"),
                 "--device-profile", str(prof), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["model_config"]["num_hidden_layers"] == 5
    assert "the h200-copy device profile" in d["note"]
    assert {m: r["distinct_experts"] for m, r in d["per_m"].items()} == {
        "1": 8, "64": distinct_experts(64, 8, 64)}
    assert distinct_experts(64, 8, 64) < distinct_experts(64)
    qwen = data / "qwen3-30b-a3b-config.json"
    capsys.readouterr()
    assert main(["bench", "run", "--dry", "--tokens", "1", "--model-config", str(qwen),
                 "--out", str(tmp_path / "q.json")]) == 2
    assert "a qwen3_moe config; bench run's step is GLM-5.3-shaped" in capsys.readouterr().err
    assert not (tmp_path / "q.json").exists()
