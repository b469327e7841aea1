"""Pipeline parallelism in the compiler and the plugin's layout checks
(issue 33): ``compile_plan(..., layers=own)`` plans only a PP rank's own
layers and never targets another rank's layer (the rank's last layer has no
next-layer fill, the last rank no wrap to layer 0); the refusals an adapter
declares (``PIPELINE_PARALLEL_REFUSAL``, ``COMPILED_MODULES``) and vLLM's
compilation modes, with vLLM's real config objects where vLLM is installed.
The live PP2 check on vLLM's real Qwen3-MoE tree: tests/test_qwen3_moe_plugin.py.
"""

from __future__ import annotations

import types

import pytest
from extras import VLLM_MISSING
from test_qwen3_moe_vllm import ARCH
from test_qwen3_moe_vllm import TINY as QWEN3_TINY

from l2sched.compiler.compile import compile_plan
from l2sched.errors import L2sPluginError
from l2sched.lang.resolve import load_schedule_text
from l2sched.model.adapters import get_adapter
from l2sched.model.inventory import analytical_inventory

#: The reduced Qwen3-MoE config of the live tests (4 layers, layer 0 dense).
TINY = {**QWEN3_TINY, "architectures": [ARCH], "model_type": "qwen3_moe"}


def pp_schedule(tp: int = 1) -> str:
    """A schedule with a this-layer window (A, MoE layers) and a next-layer
    window (B, every layer: the next layer's input norm and qkv_proj)."""
    return (f"schedule pp_test\nmodel qwen3_moe\ndevice h200\ntp {tp}\nep off\n"
            "window A at attn.before_core budget 64KiB layers moe {\n"
            "    this self_attn.o_proj\n}\n"
            "window B at attn.post_all_reduce budget 64KiB layers all {\n"
            "    next input_layernorm, self_attn.qkv_proj\n}\n")


def _plans(own):
    schedule = load_schedule_text(pp_schedule(), "pp.l2s", model_config=TINY)
    inv = analytical_inventory(TINY, 1, False, 0)
    return compile_plan(schedule, inv), compile_plan(schedule, inv, layers=own)


@pytest.mark.parametrize("own", [range(0, 2), range(2, 4), range(1, 3)])
def test_a_pp_rank_plans_only_its_layers(own):
    full, mine = _plans(own)
    assert mine.issues, mine
    for wi in mine.issues:
        assert wi.layer in own
        assert all(r.layer in own for r in wi.ranges), wi
    last = own[-1]
    # the rank's last layer has no next-layer window: B names nothing there
    assert not [wi for wi in mine.issues if wi.layer == last and wi.window == "B"]
    assert [(e.window, e.layer, e.reason) for e in mine.empty
            if e.layer == last] == [("B", last, "no-match")]
    # every other layer plans what the whole-model plan does
    same = [wi for wi in full.issues if wi.layer in own and wi.layer != last]
    assert [wi for wi in mine.issues if wi.layer != last] == same
    # the whole-model plan does cross: B of the rank's last layer fills the
    # next layer (layer 3 wraps to layer 0)
    cross = [wi for wi in full.issues if wi.layer == last and wi.window == "B"]
    assert cross and {r.layer for r in cross[0].ranges} == {(last + 1) % 4}


def test_all_layers_is_the_whole_model_plan():
    full, mine = _plans(range(0, 4))
    assert mine == full


# --------------------------------------------------------------------------
# the plugin's layout checks (vllm/layout.py)


def test_pp_refusal_comes_from_the_adapter():
    from l2sched.vllm.layout import Layout, refuse_pipeline_parallel

    glm, qwen = get_adapter("glm5next"), get_adapter("qwen3_moe")
    refuse_pipeline_parallel(glm, Layout(4, 0, False, 1, 0))  # PP 1: fine
    with pytest.raises(L2sPluginError) as e:
        refuse_pipeline_parallel(glm, Layout(4, 1, False, 2, 1))
    assert str(e.value) == ("unsupported layout: pipeline parallel size 2: "
                            + glm.PIPELINE_PARALLEL_REFUSAL)
    assert "make_empty_intermediate_tensors" in str(e.value)
    refuse_pipeline_parallel(qwen, Layout(4, 1, False, 2, 1))  # supported
    assert Layout(2, 1, False, 2, 1).rank_txt == "TP rank 1/2, PP rank 1/2"
    assert Layout(2, 1).rank_txt == "TP rank 1/2"


@pytest.mark.parametrize("mode,qwen,glm", [
    ("NONE", None, None),
    ("DYNAMO_TRACE_ONCE", "Qwen3MoeModel", None),
    ("VLLM_COMPILE", "Qwen3MoeModel", None),
    ("STOCK_TORCH_COMPILE", "the whole model", "the whole model"),
])
def test_compiled_modules_under_vllms_compilation_modes(mode, qwen, glm):
    """With vLLM's real ``CompilationConfig`` of each mode: an adapter's
    ``COMPILED_MODULES`` module counts as compiled unless vLLM's decorator
    set its ``do_not_compile`` (as it does for NONE and STOCK, where the model
    runner compiles the whole model instead)."""
    pytest.importorskip("vllm", reason=VLLM_MISSING)
    from vllm.config import CompilationConfig, CompilationMode

    from l2sched.vllm.layout import compiled_module, refuse_compiled

    cfg = types.SimpleNamespace(compilation_config=CompilationConfig(
        mode=CompilationMode[mode]))
    dnc = mode in ("NONE", "STOCK_TORCH_COMPILE")  # decorators.py:411-416
    inner = type("Qwen3MoeModel", (), {"do_not_compile": dnc})()
    qwen_model = types.SimpleNamespace(model=inner)
    glm_model = types.SimpleNamespace(model=object())
    got_q = compiled_module(qwen_model, get_adapter("qwen3_moe"), cfg)
    got_g = compiled_module(glm_model, get_adapter("glm5next"), cfg)
    assert got_q == (None if qwen is None else (qwen, mode))
    assert got_g == (None if glm is None else (glm, mode))
    if qwen is None:
        refuse_compiled(qwen_model, get_adapter("qwen3_moe"), cfg)
        return
    with pytest.raises(L2sPluginError) as e:
        refuse_compiled(qwen_model, get_adapter("qwen3_moe"), cfg)
    assert str(e.value).startswith(
        f"unsupported compilation: vLLM compiles {qwen} with torch.compile "
        f"(compilation_config mode {mode})")
    assert "--compilation-config '{\"mode\": 0}'" in str(e.value)
    assert "--enforce-eager" in str(e.value)
