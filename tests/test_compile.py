"""Compiler: budget/carry arithmetic with exact byte counts on the real
GLM-5.3-Flash TP4 analytical inventory, dedup, left-over reporting, wrap to
layer 0, determinism, JSON round trip, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from l2sched.compiler.compile import compile_plan, pattern_matches
from l2sched.compiler.plan import Plan
from l2sched.errors import L2sCompileError
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory

HEADER = "schedule t\nmodel glm5next\ndevice h200\ntp 4\n"
IN_PROJ = 52_559_872  # KDA in_proj_qkvbfg_a per GPU at TP4 (docs/sources.md#vllm-glm5next)
KDA_O_PROJ = 16_777_216
MLA_O_PROJ = 33_554_432


@pytest.fixture(scope="module")
def inventory():
    return analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)


def compile_text(body: str, inventory, **kw):
    return compile_plan(load_schedule_text(HEADER + body, "t.l2s"), inventory, **kw)


def test_pattern_matches_module_prefix_and_globs():
    assert pattern_matches("self_attn.o_proj", "self_attn.o_proj.weight")
    assert pattern_matches("hc_ffn_*", "hc_ffn_fn")
    assert pattern_matches("self_attn.*", "self_attn.indexer.wq_b.weight")
    assert not pattern_matches("self_attn.o_proj", "self_attn.o_proj_x.weight")
    assert not pattern_matches("mlp.gate", "mlp.gate_up_proj.weight")


def test_whole_tensor_under_budget(inventory):
    plan = compile_text("window A at attn.after_first_proj budget 20MB layers 4 {\n"
                        "  this self_attn.o_proj\n}\n", inventory)
    (issue,) = plan.issues
    assert (issue.layer, issue.window, issue.nbytes) == (4, "A", KDA_O_PROJ)
    assert [(r.layer, r.tensor, r.offset, r.nbytes) for r in issue.ranges] == [
        (4, "self_attn.o_proj.weight", 0, KDA_O_PROJ)]
    assert plan.left_over == ()


def test_straddling_tensor_splits_at_4kib_and_tail_carries(inventory):
    body = ("window B at attn.pre_all_reduce budget 10MB layers 4 carry C {\n"
            "  next self_attn.in_proj_qkvbfg_a\n}\n"
            "window C at moe.pre_all_reduce budget 50MB layers 4\n")
    plan = compile_text(body, inventory)
    b, c = plan.issues
    head = (10_000_000 // 4096) * 4096
    assert b.ranges[0].nbytes == head == 9_998_336
    assert (c.carried_in, c.ranges[0].offset, c.ranges[0].nbytes) == (
        IN_PROJ - head, head, IN_PROJ - head)
    assert c.ranges[0].layer == 5  # 'next' of layer 4
    assert b.nbytes + c.nbytes == IN_PROJ  # no byte twice, none lost


def test_remainder_without_carry_is_left_over(inventory):
    plan = compile_text("window A at attn.after_first_proj budget 1MB layers 4 {\n"
                        "  this self_attn.o_proj\n}\n", inventory)
    (left,) = plan.left_over
    assert (left.window, left.layer, left.tensor) == ("A", 4, "self_attn.o_proj.weight")
    assert left.nbytes == KDA_O_PROJ - (1_000_000 // 4096) * 4096


def test_seed_window_b_exact_bytes(inventory):
    plan = compile_plan(load_schedule("schedules/glm53-flash-sm120-tp4.l2s"), inventory)
    b4 = plan.issues_at(4, "attn.pre_all_reduce")[0]
    # this layer: hc_ffn_* (1,572,972) + post norm (8,192) + gate (2,360,448);
    # next layer: hc_attn_* (1,572,972) + input norm (8,192); then in_proj head.
    small = 1_572_972 + 8_192 + 2_360_448 + 1_572_972 + 8_192
    head = ((50_000_000 - small) // 4096) * 4096
    assert b4.nbytes == small + head == 49_997_144
    c4 = plan.issues_at(4, "moe.pre_all_reduce")[0]
    assert c4.ranges[0].tensor == "self_attn.in_proj_qkvbfg_a.weight"
    assert c4.ranges[0].offset == head and c4.carried_in == c4.nbytes
    # dense layers 0-2 get nothing; layer 44's next is layer 0
    assert not [i for i in plan.issues if i.layer in (0, 1, 2)]
    b44 = plan.issues_at(44, "attn.pre_all_reduce")[0]
    assert {r.layer for r in b44.ranges} == {44, 0}


def test_no_byte_fetched_twice_across_windows(inventory):
    body = ("window A at attn.after_first_proj budget 50MB layers 4 {\n"
            "  this self_attn.o_proj\n}\n"
            "window B at attn.pre_all_reduce budget 50MB layers 4 {\n"
            "  this self_attn.o_proj, hc_ffn_fn\n}\n")
    plan = compile_text(body, inventory)
    a, b = plan.issues
    assert a.nbytes == KDA_O_PROJ
    assert [r.tensor for r in b.ranges] == ["hc_ffn_fn"]


def test_lazy_tensors_need_lazy_keyword(inventory):
    plain = compile_text("window A at attn.after_first_proj budget 50MB layers 4 {\n"
                         "  this self_attn._merged_conv_weight\n}\n", inventory)
    assert plain.issues == ()
    lazy = compile_text("window A at attn.after_first_proj budget 50MB layers 4 {\n"
                        "  this lazy self_attn._merged_conv_weight\n}\n", inventory)
    (r,) = lazy.issues[0].ranges
    assert r.lazy and r.nbytes == 98_304


def test_deterministic_and_json_round_trip(inventory):
    s = load_schedule("schedules/glm53-flash-sm120-tp4.l2s")
    a = compile_plan(s, inventory).to_json()
    b = compile_plan(s, inventory).to_json()
    assert a == b
    assert Plan.from_json(a) == compile_plan(s, inventory)


def test_bad_tp_rank(inventory):
    s = load_schedule("schedules/glm53-flash-sm120-tp4.l2s")
    with pytest.raises(L2sCompileError, match="TP rank 4 is outside 0..3"):
        compile_plan(s, inventory, tp_rank=4)


def test_cli_compile_is_byte_identical(tmp_path):
    outs = []
    for name in ("a.json", "b.json"):
        out = tmp_path / name
        r = subprocess.run([sys.executable, "-m", "l2sched", "compile",
                            "schedules/glm53-flash-sm120-tp4.l2s", "-o", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "bytes/layer" in r.stdout
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["schedule"] == "glm53-flash-sm120-tp4"


def test_absorbed_views_fetch_kv_b_storage_once(inventory):
    """W_UK_T and W_UV are overlapping strided views of kv_b_proj.weight: the
    plan fetches kv_b_proj's 8,388,608 B once, then o_proj."""
    plan = compile_text(
        "window A at attn.after_first_proj budget 60MB layers 3 {\n"
        "  this lazy self_attn.mla_attn.mla_attn.W_UK_T, self_attn.mla_attn.mla_attn.W_UV\n"
        "  this self_attn.o_proj\n}\n", inventory)
    (issue,) = plan.issues
    assert [(r.tensor, r.offset, r.nbytes) for r in issue.ranges] == [
        ("self_attn.kv_b_proj.weight", 0, 8_388_608),
        ("self_attn.o_proj.weight", 0, MLA_O_PROJ)]


def test_item19_compile_shows_a_window_whose_targets_were_all_taken(tmp_path, capsys):
    """A window whose targets were all taken by earlier windows vanished
    from compile's table with exit 0 (only lint said L2S002). The plan
    records every window that fires and fetches nothing, with the reason,
    and compile shows it with 0 B and that reason."""
    from l2sched.cli import main

    body = ("window A at attn.after_first_proj budget 17MB layers kda & moe {\n"
            "    this self_attn.o_proj\n}\n"
            "window A2 at attn.pre_all_reduce budget 17MB layers kda & moe {\n"
            "    this self_attn.o_proj.weight\n}\n"
            "window Z at layer.exit budget 1MB layers 5 {\n    this nothing.here\n}\n")
    p = tmp_path / "t.l2s"
    p.write_text(HEADER + body)
    plan = compile_plan(load_schedule(str(p)), analytical_inventory(
        load_model_config(None), tp=4, ep=False, tp_rank=0))
    empty = {(e.window, e.layer): e for e in plan.empty}
    assert not [i for i in plan.issues if i.window == "A2"]
    a2 = empty[("A2", 4)]
    assert a2.reason == "taken" and a2.taken_by == ("A",)
    assert empty[("Z", 5)].reason == "no-match"
    assert Plan.from_json(plan.to_json()) == plan
    assert main(["compile", str(p), "-o", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:2] == ["kda+moe", "A2"])
    assert row.split()[3:5] == ["0", "B"]
    assert ("window 'A2' fetches 0 B where it fires in kda+moe layers 4..6, 8..10"
            in out)
    assert "every byte its targets name was taken earlier in the step by window 'A'" in out
    assert "window 'Z' fetches 0 B where it fires in kda+moe layer 5" in out
    assert "its targets name no tensor there" in out
