"""``"schedule": "auto"`` (issue 31 item 2, ``l2sched.vllm.auto``): the
cache key and what invalidates it, a second start read from the cache
without a fit, a corrupt entry refitted with one log line, the answers
without a fit (no measured profile, EP on), and a fitted schedule that
compiles and lints on the GLM-5.3-Flash config on CPU. The fits are the
real ``l2sched fit`` search (``Search.run`` is wrapped only to count its
calls)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.compiler.compile import compile_plan
from l2sched.device import GpuIdentity, load_device, profile_for_gpu
from l2sched.errors import L2sPluginError
from l2sched.fit import Search
from l2sched.lint import run_lint
from l2sched.model.inventory import analytical_inventory
from l2sched.vllm import auto
from l2sched.vllm.auto import auto_schedule, cache_key, default_cache_dir
from l2sched.vllm.config import read_config

ROOT = Path(__file__).resolve().parent.parent
CONFIG = json.loads((ROOT / "l2sched/data/glm53-flash-config.json").read_text())
H200 = load_device("h200")


@pytest.fixture
def fits(monkeypatch):
    """How many times the fit's search ran (the real ``Search.run``)."""
    calls = []
    real = Search.run

    def counted(self):
        calls.append(self.opts.tokens)
        return real(self)

    monkeypatch.setattr(Search, "run", counted)
    return calls


@pytest.fixture(scope="module")
def idle_profile(tmp_path_factory) -> Path:
    """The measured h200 profile with the fills' all-reduce slowdown at 0
    (the profile ``glm53-flash-h200-tp4-fit-idle.l2s`` was fitted before
    that term was measured): a profile on which the fit chooses windows."""
    text = (ROOT / "l2sched/data/devices/h200.toml").read_text()
    lines = ["allreduce_slowdown = 0.0" if ln.startswith("allreduce_slowdown =")
             else ln for ln in text.splitlines()]
    path = tmp_path_factory.mktemp("profile") / "h200-idle.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _key(**kw) -> str:
    args = dict(model_config=CONFIG, tp=1, ep=False, device_profile=H200,
                device_name="h200", tokens=(1, 4, 16))
    args.update(kw)
    return cache_key(**args)


# --------------------------------------------------------------------------
# the key


def test_cache_key_changes_with_every_part(monkeypatch, tmp_path):
    base = _key()
    other_config = dict(CONFIG, n_routed_experts=CONFIG["n_routed_experts"] // 2)
    other_profile = dataclasses.replace(H200, dram_read_gbps=H200.dram_read_gbps + 1)
    changed = {
        "model config": _key(model_config=other_config),
        "tp": _key(tp=2),
        "ep": _key(ep=True),
        "profile content": _key(device_profile=other_profile),
        "tokens": _key(tokens=(1, 4)),
        "device name": _key(device_name="/elsewhere/h200.toml"),
    }
    monkeypatch.setattr(auto, "__version__", "0.0.0-other")
    changed["l2sched version"] = _key()
    monkeypatch.undo()
    assert _key() == base
    monkeypatch.setattr(auto, "code_digest", lambda: "0" * 64)
    changed["the fit's code"] = _key()
    for what, key in changed.items():
        assert key != base, what
    assert len(set(changed.values())) == len(changed)


def test_cache_key_ignores_what_does_not_change_the_answer(tmp_path):
    base = _key()
    # the config's key order, where it was read from, which transformers wrote it
    reordered = dict(reversed(list(CONFIG.items())))
    located = dict(CONFIG, _name_or_path="/models/glm", transformers_version="9.9")
    # the same profile file elsewhere, with a comment added
    copy = tmp_path / "copy.toml"
    copy.write_text("# a copy\n" + H200.source_text)
    assert load_device(copy).path != H200.path
    assert _key(model_config=reordered) == base
    assert _key(model_config=located) == base
    assert _key(device_profile=load_device(copy)) == base
    assert _key(device_profile=load_device("h200")) == base


def test_cache_key_is_the_same_in_another_process():
    code = ("import json; from l2sched.vllm.auto import cache_key; "
            "from l2sched.device import load_device; "
            "c = json.load(open('l2sched/data/glm53-flash-config.json')); "
            "print(cache_key(c, 1, False, load_device('h200'), 'h200', (1, 4, 16)))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == _key()


def test_default_cache_dir(tmp_path):
    assert default_cache_dir({"L2SCHED_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert default_cache_dir({"L2SCHED_CACHE_DIR": " ", "XDG_CACHE_HOME": "/x/c"}) == \
        Path("/x/c/l2sched/auto")
    home = Path.home() / ".cache/l2sched/auto"
    assert default_cache_dir({}) == home
    assert default_cache_dir({"XDG_CACHE_HOME": "relative"}) == home  # XDG: ignored


# --------------------------------------------------------------------------
# the cache


def test_second_call_reads_the_cache(tmp_path, fits):
    first = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                          cache_dir=tmp_path)
    assert len(fits) == 1 and not first.cached
    assert first.reason == "no prefetch" and first.text is None  # h200 at TP1
    assert "auto: no prefetch for h200, TP1 EP off, M=1: best lower bound" in \
        first.summary and "fitted in" in first.summary
    assert first.path is not None and first.path.is_file()
    assert first.off_error().level == logging.INFO
    with pytest.raises(ValueError, match="no schedule to load: auto: no prefetch"):
        first.schedule(CONFIG)
    second = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                           cache_dir=tmp_path)
    assert len(fits) == 1, "the second call ran a fit"
    assert second.cached and second.key == first.key and second.seconds < 1.0
    assert second.summary.split(" (")[0] == first.summary.split(" (")[0]
    assert "from the cache" in second.summary
    # another key part is another entry
    auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1, 4), cache_dir=tmp_path)
    assert len(fits) == 2


@pytest.mark.parametrize("damage", ["record-garbage", "record-truncated",
                                    "record-other-key", "l2s-edited", "l2s-missing"])
def test_a_corrupt_entry_is_refitted(tmp_path, fits, caplog, damage):
    first = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                          cache_dir=tmp_path)
    record = first.path.with_suffix(".json")
    if damage == "record-garbage":
        record.write_bytes(b"\x00\xff not json")
    elif damage == "record-truncated":
        record.write_text(record.read_text()[:40])
    elif damage == "record-other-key":
        record.write_text(record.read_text().replace(first.key, "0" * 32))
    elif damage == "l2s-edited":
        first.path.write_text(first.path.read_text() + "window X at layer.entry\n")
    else:
        first.path.unlink()
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        again = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                              cache_dir=tmp_path)
    lines = [r.getMessage() for r in caplog.records if r.name == "l2sched.vllm.auto"]
    assert len(lines) == 1 and "ignoring the cache entry" in lines[0], lines
    assert len(fits) == 2 and not again.cached
    assert again.summary.split(" (")[0] == first.summary.split(" (")[0]
    third = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                          cache_dir=tmp_path)
    assert third.cached and len(fits) == 2  # the refit repaired the entry


def test_a_cache_dir_that_cannot_be_written_is_one_line(tmp_path, fits, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        got = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,),
                            cache_dir=blocker / "auto")
    lines = [r.getMessage() for r in caplog.records if r.name == "l2sched.vllm.auto"]
    assert len(lines) == 1 and "cannot cache the fitted schedule" in lines[0]
    assert got.path is None and "not cached" in got.summary and len(fits) == 1


def test_the_env_var_names_the_cache_dir(tmp_path, fits):
    env = {"L2SCHED_CACHE_DIR": str(tmp_path / "c")}
    got = auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(1,), environ=env)
    assert got.path.parent == tmp_path / "c"


# --------------------------------------------------------------------------
# answers without a fit


def test_no_measured_profile_is_prefetch_off(tmp_path, fits):
    gpu = GpuIdentity("NVIDIA B300", 126 * 2**20, 148, (10, 3))
    assert profile_for_gpu(gpu) is None
    got = auto_schedule(CONFIG, 1, False, None, "", tokens=(1,), cache_dir=tmp_path,
                        gpu=gpu)
    assert got.text is None and got.reason == "no profile" and not fits
    assert got.summary.startswith("auto: no measured device profile for NVIDIA B300 "
                                  "(sm_103, 148 SMs")
    off = got.off_error()
    assert off.level == logging.WARNING and str(off) == got.summary
    assert "`l2sched profile" in got.summary and "\n" not in got.summary
    # an estimate profile (not measured) is no profile either
    est = load_device("sm120-rtx-pro-6000-maxq")
    got = auto_schedule(CONFIG, 4, False, est, est.name, tokens=(1,),
                        cache_dir=tmp_path)
    assert got.reason == "no profile" and "is an estimate" in got.summary and not fits
    assert not list(tmp_path.iterdir())


def test_profile_for_gpu_finds_the_measured_shipped_profile():
    h200 = GpuIdentity("NVIDIA H200", H200.l2_bytes, H200.sm_count,
                       H200.compute_capability)
    assert profile_for_gpu(h200) == "h200"
    est = load_device("sm120-rtx-pro-6000-maxq")
    assert not est.is_measured
    sm120 = GpuIdentity(est.gpu_names[0], est.l2_bytes, est.sm_count or 0,
                        est.compute_capability)
    assert profile_for_gpu(sm120) is None


def test_ep_on_is_prefetch_off(tmp_path, fits):
    got = auto_schedule(CONFIG, 4, True, H200, "h200", tokens=(1,), cache_dir=tmp_path)
    assert got.reason == "unsupported layout" and "expert parallelism" in got.summary
    assert not fits


def test_bad_tokens_and_config_are_plugin_errors(tmp_path):
    with pytest.raises(L2sPluginError, match="increasing whole numbers from 1 to 256"):
        auto_schedule(CONFIG, 1, False, H200, "h200", tokens=(4, 1), cache_dir=tmp_path)
    with pytest.raises(L2sPluginError, match="auto fit failed: .*hidden_size"):
        auto_schedule({k: v for k, v in CONFIG.items() if k != "hidden_size"}, 1, False,
                      H200, "h200", tokens=(1,), cache_dir=tmp_path)


# --------------------------------------------------------------------------
# a fitted schedule


def test_the_fitted_schedule_compiles_and_lints(tmp_path, fits, idle_profile):
    profile = load_device(idle_profile)
    tokens = (1, 4)
    got = auto_schedule(CONFIG, 4, False, profile, str(idle_profile), tokens=tokens,
                        cache_dir=tmp_path)
    assert got.prefetch and got.reason == "" and len(fits) == 1
    assert got.summary.startswith("auto: ") and " windows [" in got.summary
    assert "predicted gain us (median/lower bound) M=1 +" in got.summary
    assert "vs noise floor 21.1 us" in got.summary and "\n" not in got.summary
    schedule = got.schedule(CONFIG)
    assert schedule.tp == 4 and not schedule.ep and schedule.windows
    assert schedule.device == str(idle_profile)
    inventory = analytical_inventory(CONFIG, tp=4, ep=False)
    for rank in range(4):
        assert compile_plan(schedule, inventory, rank).issues
    for m in tokens:
        run = run_lint(schedule, inventory, device_profile=profile, graph_mode="full",
                       model_config=CONFIG, tokens=m)
        codes = [f.code for f in run.findings]
        assert not [f for f in run.findings if f.severity == "error"], codes
        assert "L2S110" not in codes  # not predicted slower
    # the cached .l2s is the same schedule, and a second call reads it
    assert got.path.read_text() == got.text
    again = auto_schedule(CONFIG, 4, False, profile, str(idle_profile), tokens=tokens,
                          cache_dir=tmp_path)
    assert again.cached and again.text == got.text and len(fits) == 1


# --------------------------------------------------------------------------
# the plugin's configuration


def test_config_accepts_auto():
    cfg = read_config({"l2sched": {"schedule": "auto", "device": "h200"}}, {})
    assert cfg.is_auto and cfg.device == "h200"
    assert read_config({}, {"L2SCHED_SCHEDULE": " auto "}).is_auto
    assert not read_config({}, {"L2SCHED_SCHEDULE": "./auto"}).is_auto


@pytest.mark.parametrize("extra, env, words", [
    ({"l2sched": {"schedule": "auto", "set": {"tp": "2"}}}, {},
     'additional_config l2sched.set: not with "schedule": "auto"'),
    (None, {"L2SCHED_SCHEDULE": "auto", "L2SCHED_SET": "tp=2"},
     "L2SCHED_SET='tp=2': not with \"schedule\": \"auto\""),
    ({"l2sched": {"schedule": ""}}, {},
     'additional_config l2sched.schedule: must not be empty (a .l2s path, or "auto")'),
])
def test_config_refuses_set_with_auto(extra, env, words):
    with pytest.raises(L2sPluginError) as e:
        read_config(extra, env)
    assert e.value.what == "bad configuration" and words in str(e.value)


# --------------------------------------------------------------------------
# with vLLM's own config objects


_LIVE = r"""
import json, sys, tempfile
sys.path.insert(0, "tests")
from vllm_cpu import engine_config, shim_platform_env, write_model_dir
shim_platform_env()
from l2sched.device import load_device
from l2sched.vllm.auto import auto_schedule
from l2sched.vllm.loss_gate import capture_sizes
config = json.load(open("l2sched/data/glm53-flash-config.json"))
vllm_config = engine_config(write_model_dir(config, tempfile.mkdtemp()), 1, False)
live = vllm_config.model_config.hf_text_config.to_dict()
tokens = capture_sizes(vllm_config, 256)
got = [auto_schedule(live, 1, False, load_device("h200"), "h200", tokens=tokens,
                     cache_dir=sys.argv[1]) for _ in range(2)]
print(json.dumps({"tokens": tokens, "cached": [c.cached for c in got],
                  "reason": got[0].reason, "summary": got[0].summary}))
"""


@pytest.mark.vllm
def test_vllm_hf_config_is_fitted_and_cached(tmp_path):
    """The dict the plugin passes (vLLM 0.33.0's ``hf_text_config.to_dict()``
    of the GLM-5.3-Flash config, with the capture sizes of its engine config)
    fits, and the second call reads the cache."""
    from vllm_cpu import vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(why)
    r = subprocess.run([sys.executable, "-c", _LIVE, str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tokens"] == [1, 4, 16, 64]  # eager: the M of the measured floors
    assert out["cached"] == [False, True] and out["reason"] == "no prefetch"
    assert out["summary"].startswith("auto: no prefetch for h200, TP1 EP off, "
                                     "M=1,4,16,64: best lower bound")
