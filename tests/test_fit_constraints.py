"""Issue 45 item 2: ``l2sched fit`` cannot propose what the lint calls an
error. A window in dense-MLP layers whose idle time the profile does not
measure (L2S005), a fill over the expert stream (L2S101) and a window over
the usable L2 make a candidate infeasible; the lint names the dense-layer
case on an estimate profile and not on a profile that measured those
layers' ops. CPU only; real profiles, schedules and the lint's model."""

from __future__ import annotations

import pytest

from l2sched.compiler.compile import schedule_inventory
from l2sched.device import load_device
from l2sched.fit import FitOptions, Search
from l2sched.fit.bound import profile_variants
from l2sched.fit.evaluate import HARD_WARNINGS, Evaluator
from l2sched.lang.resolve import load_schedule_text
from l2sched.lint import run_lint
from l2sched.model.config import default_config

SM120 = "sm120-rtx-pro-6000-maxq"


def _schedule(device: str, windows: str) -> str:
    return (f"schedule t\n\nmodel glm5next\ndevice {device}\ntp 4\nep off\n"
            f"max_tokens 256\npolicy evict_last\nset_aside 0\n\n{windows}\n")


#: A 10 MB window right after the KDA input projection of the dense layers:
#: it lands long before the dense MLP in the model (no overlap).
DENSE_A = ("window D at attn.after_first_proj budget 10MB layers kda & dense {\n"
           "    this self_attn.o_proj\n}\n")


def _evaluate(device_name: str, text: str, tokens=(1,)):
    device = load_device(device_name)
    variants, _ = profile_variants(device)
    ev = Evaluator(default_config("glm5next"), 4, variants[:1], tokens,
                   capacity=device.capacity_bytes, surrogate=False)
    return ev.evaluate(text)


def _lint(device_name: str, text: str, tokens: int = 1):
    schedule = load_schedule_text(text, "<test>")
    return run_lint(schedule, schedule_inventory(schedule), device_profile=load_device(device_name),
                    tokens=tokens)


def test_l2s005_is_a_hard_constraint():
    assert "L2S005" in HARD_WARNINGS


def test_dense_window_on_an_estimate_profile_is_flagged_and_infeasible():
    text = _schedule(SM120, DENSE_A)
    found = [f for f in _lint(SM120, text).findings if f.code == "L2S005"]
    assert len(found) == 1, found
    assert "does not measure" in found[0].message
    assert "kda+dense" in found[0].message and "'mlp.gate_up_proj'" in found[0].message
    assert found[0].data["unmeasured"] is True
    ev = _evaluate(SM120, text)
    assert not ev.feasible
    assert any(p.startswith("L2S005: ") for p in ev.problems), ev.problems


def test_dense_window_on_a_profile_that_measured_the_dense_ops_is_not_flagged():
    """h200 measured the kda+dense op times (l2sched profile's ops probe):
    the same window, which ends before the MLP, is not L2S005."""
    text = _schedule("h200", DENSE_A)
    assert [f for f in _lint("h200", text).findings if f.code == "L2S005"] == []
    assert not any(p.startswith("L2S005") for p in _evaluate("h200", text).problems)


def test_window_over_the_usable_l2_is_infeasible():
    """h200's usable L2 is its effective 40 MB (l2.effective_bytes) of a
    62.9 MB L2: a 50 MB window is under the L2 (no L2S107) but over it."""
    dev = load_device("h200")
    assert dev.capacity_bytes == 40_000_000 < 50_000_000 < dev.l2_bytes
    text = _schedule("h200", (
        "window B at attn.pre_all_reduce budget 50MB layers moe {\n"
        "    next self_attn.*\n}\n"))
    ev = _evaluate("h200", text)
    over = [p for p in ev.problems if p.startswith("usable L2: ")]
    assert len(over) == 1 and "window 'B' fills up to 49999872 B" in over[0], ev.problems


def test_fill_over_the_expert_stream_is_infeasible():
    """L2S101 (error) stays a hard constraint: the post-all-reduce SM120
    schedule's fills run into the expert stream."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "schedules"
            / "glm53-flash-sm120-tp4-post-ar.l2s").read_text(encoding="utf-8")
    ev = _evaluate(SM120, text)
    assert any(p.startswith("L2S101: ") for p in ev.problems), ev.problems


@pytest.mark.parametrize("device", [SM120])
def test_fit_writes_no_dense_window_and_nothing_over_the_usable_l2(device):
    dev = load_device(device)
    search = Search(dev, FitOptions(tokens=(1, 64), quick=True, allow_unmeasured=True))
    result = search.run()
    assert result.candidate is not None
    for chain in result.candidate.chains:
        assert not chain.kind.endswith("dense"), chain
        for link in chain.links:
            assert link.budget <= dev.capacity_bytes, chain
