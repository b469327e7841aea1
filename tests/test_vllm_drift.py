"""Issue 31 item 5: vLLM drift is loud.

When a name the plugin patches or hooks is missing in the installed vLLM (a
renamed ``process_weights_after_loading``, a moved module, a hook site gone
from a decoder layer), the process logs one WARNING line naming it and
``vllm.__version__``, prefetch stays off, nothing is raised into vLLM, and the
import finder never waits for a module that does not exist.

(a) and (c) run on vLLM 0.33.0's real module tree (the real loader module,
the real ``Glm5NextForCausalLM`` built at TP1 on the ``meta`` device in a
spawned process, as ``tests/test_vllm_plugin.py`` builds it; the lines are
counted there with the plugin's logger). (b) runs in this process with
``caplog`` and imports no vLLM module.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_cpu import plugin_log_records, run_ranks, vllm_available  # noqa: E402

import l2sched.vllm as reg  # noqa: E402
from l2sched.vllm import drift as dr  # noqa: E402

_OK, _WHY = vllm_available()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULE = os.path.join(ROOT, "schedules", "glm53-flash-sm120-tp4.l2s")
SUPPORTS = "; l2sched supports vllm==0.33.0"


def _warnings(caplog, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and needle in r.getMessage()]


@pytest.fixture
def fresh_registration(monkeypatch, caplog):
    """``register()`` as in a fresh process (not registered, no drift, no
    finder of ours on ``sys.meta_path`` afterwards); the plugin's logger
    captured by ``caplog``."""
    monkeypatch.setattr(reg, "_registered", False)
    saved = dict(dr.DRIFT)
    dr.DRIFT.clear()
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)
    before = list(sys.meta_path)
    caplog.set_level(logging.DEBUG, logger="vllm.l2sched")
    yield
    dr.DRIFT.clear()
    dr.DRIFT.update(saved)
    for f in list(sys.meta_path):
        if isinstance(f, reg._PostImportPatcher) and f not in before:
            sys.meta_path.remove(f)


def _within(seconds: float, fn):
    """Run ``fn()`` in a thread; fail if it does not return in ``seconds``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # reported below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not return within {seconds} s (hangs)"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --------------------------------------------------------------------------
# (b) a moved module: one WARNING, no finder waits for it


@pytest.mark.skipif(not _OK, reason=_WHY)  # the finder works under vllm
def test_moved_module_is_one_warning_and_no_finder(fresh_registration, monkeypatch,
                                                   caplog):
    moved = "vllm.model_executor.model_loader.utils_moved_l2sched_test"
    monkeypatch.setattr(reg, "_PATCHES", {moved: reg._patch_loader_utils})
    monkeypatch.setattr(reg, "_PATCH_TARGETS",
                        {moved: "process_weights_after_loading"})
    _within(30, reg.register)
    lines = _warnings(caplog, "prefetch OFF")
    version = dr.vllm_version()
    assert lines == [f"l2sched: prefetch OFF: vLLM {version} has no module {moved} "
                     "(moved? l2sched patches its process_weights_after_loading)"
                     + SUPPORTS], caplog.text
    assert not [f for f in sys.meta_path if isinstance(f, reg._PostImportPatcher)]
    assert f"module {moved}" in dr.DRIFT
    _within(30, reg.register)  # idempotent: no second line
    assert len(_warnings(caplog, "prefetch OFF")) == 1


@pytest.mark.skipif(not _OK, reason=_WHY)  # the finder works under vllm
def test_moved_module_makes_find_spec_none(fresh_registration, monkeypatch, caplog):
    """The module is there by name but ``find_spec`` cannot find it (moved
    between the check and the import): the finder gives up at its import,
    says so once, and takes itself off ``sys.meta_path``."""
    name = "vllm.l2sched_test_gone"
    finder = reg._PostImportPatcher()
    finder.pending = {name}
    sys.meta_path.insert(0, finder)
    try:
        with pytest.raises(ModuleNotFoundError):
            _within(30, lambda: importlib.import_module(name))
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
            pytest.fail("the finder still waits for a module that does not exist")
    lines = _warnings(caplog, f"has no module {name}")
    assert len(lines) == 1 and f"vLLM {dr.vllm_version()} " in lines[0], caplog.text
    assert finder.pending == set()


def test_module_exists_imports_nothing():
    assert dr.module_exists("l2sched.vllm.plugin")
    assert not dr.module_exists("l2sched.vllm.no_such_module")
    assert not dr.module_exists("l2sched.no_such_package.plugin")
    if _OK:
        gone = "vllm.model_executor.model_loader.no_such_module"
        assert not dr.module_exists(gone) and gone not in sys.modules


def test_resolve_vllm_name_raises_drift_for_a_missing_attribute():
    with pytest.raises(dr.VllmDrift) as e:
        dr.resolve_vllm_name("l2sched.vllm.step_info.no_such_function")
    assert e.value.target == "l2sched.vllm.step_info.no_such_function"
    assert dr.resolve_vllm_name("l2sched.vllm.drift.NAMES") == dr.NAMES


# --------------------------------------------------------------------------
# (a) a renamed patch target, (c) a hook site gone, on the real vLLM tree

#: The tiny GLM-5.3 config of tests/test_vllm_plugin.py (layer 3: MLA+MoE).
from test_vllm_plugin import TINY  # noqa: E402


def _drift_scenario(ctx):
    """Runs in the TP1 rank process."""
    import torch  # noqa: F401
    import vllm.model_executor.model_loader.reload.inplace as inplace
    import vllm.model_executor.model_loader.utils as loader_utils

    import l2sched.vllm as r
    from l2sched.vllm import drift, plugin

    records = plugin_log_records()
    model = ctx.build()
    cfg = ctx.vllm_config
    out = {}

    def reset():
        r._registered = False
        drift.DRIFT.clear()
        for f in list(sys.meta_path):
            if isinstance(f, r._PostImportPatcher):
                sys.meta_path.remove(f)
        records.clear()

    # (a) process_weights_after_loading renamed in vLLM
    for mod, attr in ((loader_utils, "process_weights_after_loading"),
                      (inplace, "reload_weights")):
        reset()
        saved = getattr(mod, attr)
        delattr(mod, attr)
        try:
            r.register()
            out[f"rename {attr}"] = {"records": list(records),
                                     "drift": dict(drift.DRIFT)}
            cfg.additional_config = {"l2sched": {
                "schedule": SCHEDULE, "backend": "dry-run", "lint": "off",
                "set": {"tp": "1"}}}
            records.clear()
            got = plugin.activate_after_load(model, cfg)
            out[f"rename {attr}"].update(
                activated=got is not None, installed=len(plugin.INSTALLED),
                after=list(records))
        finally:
            setattr(mod, attr, saved)

    # (c) a hook site gone from one decoder layer
    reset()
    cfg.additional_config = {"l2sched": {"schedule": SCHEDULE, "backend": "dry-run",
                                         "lint": "off", "set": {"tp": "1"}}}
    inst = plugin.activate_after_load(model, cfg)
    out["site baseline"] = {"installed": inst is not None, "records": list(records)}
    if inst is not None:
        inst.remove()
        plugin.INSTALLED.clear()
    o_proj = model.model.layers[3].self_attn.o_proj
    saved = o_proj.quant_method
    del o_proj.quant_method
    try:
        records.clear()
        got = plugin.activate_after_load(model, cfg)
        first = {"returned": got is not None, "installed": len(plugin.INSTALLED),
                 "records": list(records), "drift": dict(drift.DRIFT)}
        records.clear()
        got = plugin.activate_after_load(model, cfg)
        first.update(again_returned=got is not None, again=list(records),
                     again_installed=len(plugin.INSTALLED))
        out["site"] = first
    finally:
        o_proj.quant_method = saved
    cfg.additional_config = {}
    reset()
    return out


@pytest.fixture(scope="module")
def drift_run():
    if not _OK:
        pytest.skip(_WHY)
    return run_ranks(_drift_scenario, TINY, tp=1, device="meta", timeout=600)[0]


@pytest.mark.vllm
@pytest.mark.parametrize("target,module", [
    ("process_weights_after_loading", "vllm.model_executor.model_loader.utils"),
    ("reload_weights", "vllm.model_executor.model_loader.reload.inplace"),
])
def test_renamed_patch_target_is_one_warning_and_prefetch_off(drift_run, target,
                                                              module):
    got = drift_run[f"rename {target}"]
    warn = [x for x in got["records"] if x.startswith("WARNING")]
    assert warn == [f"WARNING l2sched: prefetch OFF: vLLM 0.33.0 has no "
                    f"{module}.{target} (moved?){SUPPORTS}"], got["records"]
    assert list(got["drift"]) == [f"{module}.{target}"]
    # a configured load afterwards installs nothing and says nothing more
    assert not got["activated"] and got["installed"] == 0
    assert not [x for x in got["after"] if x.startswith(("WARNING", "ERROR", "INFO"))], \
        got["after"]


@pytest.mark.vllm
def test_missing_hook_site_is_one_warning_and_prefetch_off(drift_run):
    base = drift_run["site baseline"]
    assert base["installed"], base["records"]
    got = drift_run["site"]
    warn = [x for x in got["records"] if x.startswith("WARNING")]
    assert warn == ["WARNING l2sched: TP rank 0/1: prefetch OFF: vLLM 0.33.0 has no "
                    "hook site self_attn.o_proj.quant_method.apply of "
                    "Glm5NextDecoderLayer (hook point attn.pre_all_reduce) on layer 3 "
                    f"(moved?){SUPPORTS}"], got["records"]
    assert not [x for x in got["records"] if x.startswith(("ERROR", "INFO"))]
    assert not got["returned"] and got["installed"] == 0
    # the next load in this process: still off, no second line
    assert not got["again_returned"] and got["again_installed"] == 0
    assert not [x for x in got["again"] if x.startswith(("WARNING", "ERROR", "INFO"))]
