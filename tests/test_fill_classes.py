"""Issue 45 item 1: fill interference per kernel class. A ``[fill.MODE]``
table may give a slowdown per class a fill overlaps (``attention_slowdown``,
``routing_slowdown`` beside ``slowdown``, ``gemm_slowdown`` and
``allreduce_slowdown``); a class without its own term takes ``slowdown``
(old profiles still load and predict as before); the lint's simulation
slows each op by its class's term; a bad value is located at its
``FILE:LINE:COL``. CPU only, on the shipped profiles and schedules."""

from __future__ import annotations

import re

import pytest

from l2sched.compiler.compile import schedule_inventory
from l2sched.device import DEVICES_DIR, load_device
from l2sched.device.parse import load_device_text
from l2sched.device.provenance import unmeasured_terms
from l2sched.device.schema import INTERFERENCE_CLASSES
from l2sched.errors import L2sInputError
from l2sched.lang.resolve import load_schedule_text
from l2sched.lint import run_lint
from l2sched.lint.simulate import interference_class



def _h200_with(extra: str, table: str = "bulk") -> str:
    """The shipped h200 profile's text with ``extra`` lines added to its
    ``[fill.TABLE]`` table (bulk: the kernel the shipped H200 schedule uses,
    the profile's default)."""
    text = (DEVICES_DIR / "h200.toml").read_text(encoding="utf-8")
    return text.replace(f"[fill.{table}]\n", f"[fill.{table}]\n" + extra, 1)


def test_old_profiles_read_one_term_as_every_class():
    dev = load_device("h200")
    for mode, fm in dev.fill_modes.items():
        assert fm.attention_slowdown is None and fm.routing_slowdown is None
        assert fm.class_slowdown("attention") == fm.slowdown
        assert fm.class_slowdown("routing") == fm.slowdown
        assert fm.class_slowdown("small") == fm.slowdown
        assert fm.class_slowdown("gemm") == fm.gemm_slowdown
        assert fm.class_slowdown("allreduce") == fm.allreduce_slowdown


def test_class_terms_are_read_and_named_where_written():
    text = _h200_with("attention_slowdown = 3.5\nrouting_slowdown = 0.25\n", "copy")
    text += ('"fill.copy.attention_slowdown" = { kind = "estimate", source = "test" }\n'
             '"fill.copy.routing_slowdown" = { kind = "measured", probe = "test" }\n')
    dev = load_device_text(text, "h.toml")
    fm = dev.fill_modes["copy"]
    assert fm.class_slowdown("attention") == 3.5
    assert fm.class_slowdown("routing") == 0.25
    assert fm.class_slowdown("small") == fm.slowdown == pytest.approx(1.046)
    terms = unmeasured_terms(dev, 4, {"copy"})
    assert "fill.copy.attention_slowdown (estimate)" in terms
    assert not any("routing_slowdown" in t for t in terms)
    # not written: no field of its own (the class takes fill.copy.slowdown's)
    assert not any("class" in t or "attention_slowdown" in t
                   for t in unmeasured_terms(load_device("h200"), 4, {"copy"}))


def test_a_bad_class_value_is_located():
    text = _h200_with("attention_slowdown = -1\n", "copy")
    with pytest.raises(L2sInputError) as e:
        load_device_text(text, "h.toml")
    line = text.splitlines().index("attention_slowdown = -1") + 1
    assert f"h.toml:{line}:1" in str(e.value)
    assert "fill.copy.attention_slowdown: must be >= 0, got -1" in str(e.value)


def test_interference_classes_of_the_step_graph_ops():
    assert interference_class("gemm", "kda.in_proj") == "gemm"
    assert interference_class("shared_expert", "moe.shared.gate_up_proj") == "gemm"
    assert interference_class("attention_core", "kda.recurrent") == "attention"
    assert interference_class("small", "moe.routing") == "routing"
    assert interference_class("small", "mla.indexer.topk") == "routing"
    assert interference_class("small", "kda.conv") == "small"
    assert interference_class("collective", "attn.all_reduce") == "allreduce"
    assert interference_class("expert_stream", "moe.experts") is None
    assert set(INTERFERENCE_CLASSES) == {"gemm", "small", "attention", "routing",
                                         "allreduce"}


#: Window A with a head of the next layer's first projection (the published
#: lesson: its fill overlaps the KDA core) and the seed's window B, whose
#: fill runs before the expert stream, through the router and its top-k.
SCHEDULE = """schedule t

model glm5next
device sm120-rtx-pro-6000-maxq
tp 4
ep off
max_tokens 256
policy evict_last
set_aside 0

window A at attn.after_first_proj budget 60MB layers kda & moe {
    this self_attn.o_proj
    next self_attn.in_proj_qkvbfg_a
}

window B at attn.pre_all_reduce budget 50MB layers moe {
    this mlp.gate
    next self_attn.* except self_attn.o_proj, self_attn.kv_b_proj
}
"""
#: The interference class terms the SM120 estimate writes in its
#: ``[fill.bulk]`` table (each equal to its ``slowdown``, 0.1: no per-class
#: number is published).
CLASS_TERMS = ("attention_slowdown", "routing_slowdown")


def _sm120_with(extra: str):
    """The shipped SM120 profile with its class terms (``CLASS_TERMS``,
    their lines and ``[origin]`` entries) taken out of ``[fill.bulk]`` and
    ``extra`` lines written there instead."""
    text = (DEVICES_DIR / "sm120-rtx-pro-6000-maxq.toml").read_text(encoding="utf-8")
    for key in CLASS_TERMS:
        for pattern in (rf"^{key} = .*\n", rf'^"fill\.bulk\.{key}" = .*\n'):
            assert len(re.findall(pattern, text, flags=re.M)) == 1, pattern
            text = re.sub(pattern, "", text, flags=re.M)
    assert text.count("[fill.bulk]\n") == 1
    return load_device_text(text.replace("[fill.bulk]\n", "[fill.bulk]\n" + extra),
                            "sm120-test.toml")


def _gain(device, m: int = 1) -> float:
    schedule = load_schedule_text(SCHEDULE, "<test>")
    lr = run_lint(schedule, schedule_inventory(schedule), device_profile=device, tokens=m)
    return lr.step_period("base") - lr.step_period("sim")


def test_each_class_term_changes_its_class():
    """Class terms written equal to ``slowdown`` predict what ``slowdown``
    alone predicts; raising the attention core's or the routing class's
    term alone makes the schedule's predicted gain smaller (its fills
    overlap those kernels)."""
    g0 = _gain(_sm120_with(""))
    shipped = load_device("sm120-rtx-pro-6000-maxq")
    slowdown = shipped.fill_mode("bulk").slowdown
    # the shipped profile writes each class term equal to slowdown
    assert [getattr(shipped.fill_mode("bulk"), k) for k in CLASS_TERMS] == [slowdown] * 2
    assert _gain(shipped) == pytest.approx(g0, abs=1e-9)
    assert _gain(_sm120_with(f"attention_slowdown = {slowdown}\n"
                             f"routing_slowdown = {slowdown}\n")) == \
        pytest.approx(g0, abs=1e-9)
    assert _gain(_sm120_with("attention_slowdown = 2.0\n")) < g0 - 10.0
    assert _gain(_sm120_with("routing_slowdown = 2.0\n")) < g0 - 1.0
