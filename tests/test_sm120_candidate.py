"""Issue 45 item 3, on the shipped SM120 profile
(``l2sched/data/devices/sm120-rtx-pro-6000-maxq.toml``, every value with its
``[origin]``), which is the candidate of
``benchmarks/results/sm120-profile-candidate-2026-12-05.toml`` (the record
``benchmarks/results/sm120-profile-issue45-2026-12-05.md``; the two files
hold the same values): the lint flags both published lessons and leaves
window A with ``o_proj`` alone clean; the shipped seed schedule predicts
+5..+9% steps/s at one token; ``fit --allow-unmeasured --tp 4 --tokens
1,4,16,64`` writes no dense-layer window, no window over the L2, set_aside
0, and predicts +4..+9% at one token. CPU only, the real lint and fit."""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (pyproject.toml: tomli there)
    import tomli as tomllib  # type: ignore[no-redef]

from l2sched.compiler.compile import schedule_inventory
from l2sched.device import DEVICES_DIR, load_device
from l2sched.fit import FitOptions, Search, fit_text
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.lint import run_lint

ROOT = Path(__file__).resolve().parent.parent
NAME = "sm120-rtx-pro-6000-maxq"
SHIPPED = DEVICES_DIR / f"{NAME}.toml"
CANDIDATE = ROOT / "benchmarks" / "results" / "sm120-profile-candidate-2026-12-05.toml"
HEAD = ("schedule t\n\nmodel glm5next\ndevice sm120-rtx-pro-6000-maxq\ntp 4\nep off\n"
        "max_tokens 256\npolicy evict_last\nset_aside 0\n\n")


@pytest.fixture(scope="module")
def dev():
    return load_device(NAME)


def test_the_shipped_profile_is_the_candidate():
    """Every value of the shipped profile is the candidate's (only comments
    differ), so the record's marks are the shipped profile's."""
    def values(path):
        with open(path, "rb") as f:
            return tomllib.load(f)
    assert values(SHIPPED) == values(CANDIDATE)
    assert values(SHIPPED)["name"] == NAME


def _lint(schedule, dev, m: int = 1):
    return run_lint(schedule, schedule_inventory(schedule), device_profile=dev, tokens=m)


def _steps_gain(lr) -> float:
    """Predicted steps/s gain (%) of a lint run."""
    return (lr.step_period("base") / lr.step_period("sim") - 1) * 100


def test_every_value_names_its_source(dev):
    missing = [k for k in ("l2.bytes", "fill.bulk.slowdown", "fill.bulk.attention_slowdown",
                           "fill.bulk.routing_slowdown", "l2.effective_bytes")
               if k not in dev.origins]
    assert missing == []
    assert all(o.source for o in dev.origins.values() if o.kind == "estimate")


def test_published_lessons_and_the_seed(dev):
    seed = _lint(load_schedule(str(ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s")), dev)
    assert 5.0 <= _steps_gain(seed) <= 9.0
    post = _lint(load_schedule(str(ROOT / "schedules" / "glm53-flash-sm120-tp4-post-ar.l2s")),
                 dev)
    assert "L2S101" in {f.code for f in post.findings}
    head = _lint(load_schedule_text(HEAD + (
        "window A at attn.after_first_proj budget 36MB layers kda & moe {\n"
        "    this self_attn.o_proj\n    next self_attn.in_proj_qkvbfg_a\n}\n"), "<a>"), dev)
    assert any(f.code == "L2S102" and f.data["op"] == "kda.recurrent" for f in head.findings)
    alone = _lint(load_schedule_text(HEAD + (
        "window A at attn.after_first_proj budget 20MB layers kda & moe {\n"
        "    this self_attn.o_proj\n}\n"), "<a>"), dev)
    assert {f.code for f in alone.findings if f.severity != "info"} == set()


def test_the_fit(dev):
    search = Search(dev, FitOptions(tokens=(1, 4, 16, 64), allow_unmeasured=True,
                                    device_ref=NAME))
    result = search.run()
    cand = result.candidate
    assert cand is not None and cand.set_aside == "0"
    hooks = set()
    for chain in cand.chains:
        assert not chain.kind.endswith("dense"), chain
        for link in chain.links:
            assert link.budget <= dev.l2_bytes and link.budget <= dev.capacity_bytes
            hooks.add(link.hook)
    assert {"attn.pre_all_reduce"} <= hooks
    assert not any(h.endswith("post_all_reduce") for h in hooks)
    text = fit_text(result, search, device_arg=NAME, command="test", name="fit")
    fitted = _lint(load_schedule_text(text, str(ROOT / "fit.l2s")), dev)
    assert 4.0 <= _steps_gain(fitted) <= 9.0
