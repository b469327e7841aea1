"""Programmatic-launch chains (issue 48): the adapters' facts about which ops
vLLM 0.33.0 launches with programmatic dependent launch, lint rule L2S113
(fires by arch, M, layer and config; silent where it cannot tell), the
runtime's live detection (``runtime.pdl_watch``: never raises, counts late
fills) and the plugin summary's note. CPU only; the GPU test is
tests/gpu/test_gpu_runtime.py::test_programmatic_launch_after_hook_is_detected."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import pytest
from extras import GPU_MISSING

from l2sched.device import load_device
from l2sched.lint import lint_path
from l2sched.lint.rules import RULES
from l2sched.model.adapters import get_adapter
from l2sched.model.adapters.protocol import optional_member
from l2sched.model.adapters.records import (PDL_ARCH_SM90_SM100F, PDL_ARCH_SM90_UP,
                                            PDL_LAYER_CONDITIONS, PdlLaunch)
from l2sched.runtime.pdl_watch import ProgrammaticWatch
from l2sched.vllm.summary import PROGRAMMATIC_DOC, programmatic_note, summary_line

DSV4 = "schedules/deepseek-v4-h200-tp1.l2s"
POST_AR = "schedules/glm53-flash-sm120-tp4-post-ar.l2s"
GLM_H200 = "schedules/glm53-flash-h200-tp4.l2s"
QWEN = "schedules/qwen3-30b-a3b-h200-tp1.l2s"


def _l2s113(run) -> list:
    return [f for f in run.findings if f.code == "L2S113"]


def _with_cc(name: str, cc):
    return dataclasses.replace(load_device(name), compute_capability=cc)


# -- the facts ---------------------------------------------------------------

@pytest.mark.parametrize("model", ["glm5next", "deepseek_v4", "qwen3_moe"])
def test_every_fact_names_an_op_of_the_timeline_and_a_vllm_source(model):
    ad = get_adapter(model)
    facts = optional_member(ad, "PDL_LAUNCHES")
    kinds = {k for k in ad.layer_kinds(__import__("json").loads(ad.default_config_text()))}
    ops = {op.name for k in kinds for op in ad.decode_timeline(k)}
    for f in facts:
        assert f.op in ops, (model, f.op)
        assert f.condition in PDL_LAYER_CONDITIONS, (model, f.condition)
        assert f.source and ("model_executor/" in f.source or "models/" in f.source)
        assert f.archs and f.arch_text
    if model == "qwen3_moe":
        assert facts == ()


def test_pdl_launch_conditions_arch_m_kind_config():
    gate = PdlLaunch("moe.gate", "ll_bf16_gemm", "gate_linear.py GateLinear.forward",
                     PDL_ARCH_SM90_SM100F, "sm_90 or sm_100f", max_tokens=16,
                     mlp=("moe",), config=(("moe_router_dtype", ("float32",)),))
    moe = SimpleNamespace(mlp="moe")
    cfg = {"moe_router_dtype": "float32"}
    assert gate.holds((9, 0), 16, moe, cfg)
    assert gate.holds((10, 0), 1, moe, cfg) and gate.holds((10, 3), 1, moe, cfg)
    assert not gate.holds((12, 0), 1, moe, cfg)   # sm_120: GateLinear's tiers are off
    assert not gate.holds((12, 1), 1, moe, cfg)
    assert not gate.holds((8, 0), 1, moe, cfg)
    assert not gate.holds((9, 0), 17, moe, cfg)   # LL_BF16_MAX_TOKENS = 16
    assert not gate.holds((9, 0), 1, SimpleNamespace(mlp="dense"), cfg)
    assert not gate.holds((9, 0), 1, moe, {})     # no fp32 router output
    assert not gate.holds((9, 0), 1, moe, None)
    first = PdlLaunch("mhc.attn_pre", "k", "s", PDL_ARCH_SM90_UP, "sm_90+",
                      condition="layer>0")
    assert not first.layer_holds(0, 45) and first.layer_holds(1, 45)
    last = dataclasses.replace(first, condition="layer==last")
    assert last.layer_holds(44, 45) and not last.layer_holds(43, 45)
    mhc = PdlLaunch("mhc.ffn_pre", "k", "s", PDL_ARCH_SM90_UP, "sm_90+")
    assert mhc.holds((12, 0), 4096, SimpleNamespace(mlp="dense"), None)
    assert not mhc.holds((8, 9), 1, None, None)


# -- the lint rule -------------------------------------------------------------

def test_rule_is_registered_with_its_documentation():
    rule = RULES["L2S113"]
    assert rule.severity == "warning" and rule.name == "fill-behind-programmatic-launch"
    assert "## L2S113 fill-behind-programmatic-launch (warning)" in open("docs/lint.md").read()


def test_fires_on_the_dsv4_window_before_the_pdl_topk_on_sm90():
    run = lint_path(DSV4, select=["L2S113"])
    (f,) = _l2s113(run)
    assert f.data["window"] == "B" and f.data["op"] == "moe.routing"
    assert f.data["hook"] == "moe.after_gate" and f.data["compute_capability"] == [9, 0]
    assert "dsv4_topk.py" in f.data["source"]
    # scored layers only: the hash-routed ones run another top-k
    kinds = f.data["layer_kinds"]
    assert kinds and all(k.endswith("+moe") for k in kinds)
    assert "starts when 'moe.routing' starts, not at the hook" in f.message
    assert "8-25 us" in f.message and f.data["idle_us"] > 0


def test_does_not_fire_before_sm90_nor_without_a_compute_capability():
    for cc in ((8, 0), None):
        run = lint_path(DSV4, select=["L2S113"], device_profile=_with_cc("h200", cc))
        assert _l2s113(run) == [], cc


def test_glm_mhc_fires_on_sm120_and_sm90_after_the_all_reduce_hooks():
    for cc in ((12, 0), (9, 0)):
        run = lint_path(POST_AR, select=["L2S113"],
                        device_profile=_with_cc("sm120-rtx-pro-6000-maxq", cc))
        got = {(f.data["window"], f.data["op"]) for f in _l2s113(run)}
        assert ("B", "mhc.ffn_pre") in got and ("C", "mhc.attn_pre") in got, cc
    # the shipped TP4 schedule's windows are followed by the all-reduces and
    # the MoE sum, whose launches vLLM's Python does not show: no finding
    assert _l2s113(lint_path(GLM_H200, select=["L2S113"])) == []


def test_the_m_condition_is_the_linted_m(monkeypatch):
    ad = get_adapter("deepseek_v4")
    (routing,) = [f for f in ad.PDL_LAUNCHES if f.op == "moe.routing"]
    monkeypatch.setattr(ad, "PDL_LAUNCHES", (dataclasses.replace(routing, max_tokens=4),))
    assert len(_l2s113(lint_path(DSV4, select=["L2S113"], tokens=4))) == 1
    assert _l2s113(lint_path(DSV4, select=["L2S113"], tokens=5)) == []


def test_a_model_without_facts_gets_no_finding():
    assert _l2s113(lint_path(QWEN, select=["L2S113"])) == []


# -- the runtime's detection -------------------------------------------------------

class _Edge:
    def __init__(self, type_):
        self.type = type_


class _FakeDriver:
    """Stands in for ``cuda.bindings.driver`` where no GPU is: a graph whose
    hooked node ``"K"`` has the given dependents (node -> (edge type,
    kernel?, programmatic attribute))."""

    PROG, DEFAULT, KERNEL, MEMSET = 1, 0, "kernel", "memset"

    def __init__(self, dependents, fail=False):
        self.dependents = dependents
        self.fail = fail

    def get_dependents(self, node, n):
        if self.fail:
            return ("CUDA_ERROR_INVALID_VALUE", [], [], 0)
        deps = self.dependents.get(node, {})
        if n == 0:
            return ("ok", None, None, len(deps))
        names = list(deps)
        return ("ok", names, [_Edge(deps[v][0]) for v in names], len(names))

    def cuGraphNodeGetType(self, node):
        kind = next(d[1] for deps in self.dependents.values() for v, d in deps.items()
                    if v == node)
        return "ok", kind

    def cuGraphGetNodes(self, graph, n):  # the capture graph: no MEMSET node counted
        return ("ok", [], 0)

    def cuGraphKernelNodeGetAttribute(self, node, attr):
        allowed = next(d[2] for deps in self.dependents.values() for v, d in deps.items()
                       if v == node)
        return "ok", SimpleNamespace(programmaticStreamSerializationAllowed=allowed)


def _watch(driver, graph=None):
    w = ProgrammaticWatch(deps=SimpleNamespace(get=lambda stream: (["K"], [None]),
                                               graph=lambda stream: graph))
    w._drv, w._dependents, w._ok = driver, driver.get_dependents, "ok"
    w._prog, w._kernel, w._pss, w._memset = driver.PROG, driver.KERNEL, "pss", driver.MEMSET
    return w


class _GraphDriver(_FakeDriver):
    """``_FakeDriver`` whose capture graphs are lists of node types."""

    def cuGraphGetNodes(self, graph, n):
        return ("ok", None, len(graph)) if n == 0 else ("ok", list(range(len(graph))), n)

    def __init__(self, graphs):
        super().__init__({"K": {"next": (0, "kernel", 0)}})
        self.graphs = graphs

    def cuGraphNodeGetType(self, node):
        if isinstance(node, int):
            return "ok", self.current[node]
        return super().cuGraphNodeGetType(node)


def test_watch_counts_the_memset_nodes_of_the_largest_capture():
    """At the join of a capture with a fill hook, the watch counts the MEMSET
    nodes of the graph being captured; the count is the most of any capture
    (vLLM captures one graph per size); a capture without a hook is not
    inspected."""
    d = _GraphDriver({})
    small = ["kernel", "memset", "kernel", "memset"]
    big = ["kernel"] * 5 + ["memset"] * 3
    w = _watch(d, graph=None)
    for graph, want in ((small, 2), (big, 3), (small, 3)):
        d.current = graph
        w._deps.graph = lambda stream, g=graph: g
        w.at_hook(0, 7)
        w.resolve()
        assert w.memset_nodes == want and w.on
    d.current = ["memset"] * 9
    w.resolve()  # nothing pending: no graph read
    assert w.memset_nodes == 3


def test_a_join_after_the_capture_ended_skips_the_count_not_the_watch(caplog):
    """PIECEWISE: the forward's join can run after its capture ended; the
    capture-info call then fails. The memset count is skipped, the
    programmatic-launch detection stays on, no line is logged; a driver
    error in the count itself turns only the count off, with one line."""
    d = _GraphDriver({})

    def ended(stream):
        raise RuntimeError("cuStreamGetCaptureInfo: ok, CU_STREAM_CAPTURE_STATUS_NONE")
    w = _watch(d)
    w._deps.graph = ended
    with caplog.at_level(logging.WARNING, logger="l2sched.runtime"):
        w.at_hook(0, 7)
        w.resolve()
    assert w.on and w.count_memsets and w.memset_nodes == 0 and w.checked == {0}
    assert not caplog.records
    w._deps.graph = lambda stream: ["kernel"]
    d.cuGraphGetNodes = lambda graph, n: ("CUDA_ERROR_INVALID_VALUE", None, 0)
    with caplog.at_level(logging.WARNING, logger="l2sched.runtime"):
        for _ in range(2):
            w.at_hook(1, 7)
            w.resolve()
    assert w.on and not w.count_memsets and w.checked == {0, 1}
    assert sum("MEMSET-node count off" in r.getMessage() for r in caplog.records) == 1


def test_watch_counts_a_fill_whose_hook_has_a_programmatic_edge():
    d = _FakeDriver({"K": {"fill": (0, "kernel", 0), "next": (1, "kernel", 0)}})
    w = _watch(d)
    w.at_hook(3, stream=7)
    w.resolve()
    assert w.late == {3} and w.checked == {3} and w.on


def test_watch_reads_the_kernel_attribute_when_the_edge_is_default():
    w = _watch(_FakeDriver({"K": {"fill": (0, "kernel", 0), "next": (0, "kernel", 1)}}))
    w.at_hook(0, 7)
    w.resolve()
    assert w.late == {0}


def test_watch_negative_control_without_pdl():
    w = _watch(_FakeDriver({"K": {"fill": (0, "kernel", 0), "next": (0, "kernel", 0),
                                  "copy": (0, "memset", 0)}}))
    w.at_hook(0, 7)
    w.at_hook(1, 7)
    w.resolve()
    assert w.late == set() and w.checked == {0, 1}


def test_a_driver_error_turns_detection_off_with_one_line(caplog):
    w = _watch(_FakeDriver({}, fail=True))
    with caplog.at_level(logging.WARNING, logger="l2sched.runtime"):
        w.at_hook(0, 7)
        w.resolve()
        w.at_hook(1, 7)
        w.resolve()
    assert not w.on and w.late == set()
    lines = [r for r in caplog.records if "programmatic-launch detection off" in r.getMessage()]
    assert len(lines) == 1 and "prefetch unaffected" in lines[0].getMessage()


def test_the_real_driver_without_a_capture_never_raises(caplog):
    """The real ``cuda.bindings`` (no GPU here, or a stream not capturing):
    the capture-info call fails, the watch logs once and turns off."""
    pytest.importorskip("cuda.bindings.driver", reason=GPU_MISSING)
    w = ProgrammaticWatch()
    with caplog.at_level(logging.WARNING, logger="l2sched.runtime"):
        w.at_hook(0, 0)
        w.at_hook(1, 0)
        w.resolve()
    assert not w.on and w.late == set()
    assert sum("detection off" in r.getMessage() for r in caplog.records) == 1


def test_eager_issues_never_ask_the_driver():
    """``CudaRuntime.issue`` and ``issue_launch`` (both through ``_issue``)
    ask the watch only in capture-phase forwards: an eager ``StepInfo`` (no
    warm-up, no capture) skips it on one attribute test (source check: the
    guard precedes the capture query)."""
    import inspect

    from l2sched.runtime.cuda import CudaRuntime
    assert "self._issue(" in inspect.getsource(CudaRuntime.issue)
    assert "self._issue(" in inspect.getsource(CudaRuntime.issue_launch)
    src = inspect.getsource(CudaRuntime._issue)
    guard = src.index("(step.warmup or step.capturing)")
    assert guard < src.index("self.pdl_watch.at_hook")
    assert "self.pdl_watch.resolve()" in inspect.getsource(CudaRuntime.join)


# -- the summary note -------------------------------------------------------------

def test_programmatic_note():
    from l2sched.runtime.base import RuntimeStats
    assert programmatic_note(RuntimeStats()) == ""
    assert programmatic_note(None) == ""
    s = RuntimeStats(programmatic_late=1)
    assert programmatic_note(s) == ("; 1 fill after programmatic-launch kernels start late "
                                    f"({PROGRAMMATIC_DOC})")
    assert programmatic_note(RuntimeStats(programmatic_late=3)).startswith("; 3 fills after")
    assert PROGRAMMATIC_DOC.endswith("#programmatic-launch-chains")
    assert "### Programmatic-launch chains" in open("docs/runtime.md").read()


def test_memset_note_only_with_memsets_and_fork():
    from l2sched.runtime.base import RuntimeStats
    from l2sched.vllm.summary import MEMSET_DOC, memset_note
    rt = SimpleNamespace(stats=RuntimeStats(memset_nodes=42), capture_launch="fork")
    assert memset_note(rt) == ("; the captured step has 42 MEMSET nodes, each about 1.5-2 us "
                               "per step beside forked fills: try capture_launch deferred "
                               f"({MEMSET_DOC})")
    assert memset_note(SimpleNamespace(stats=RuntimeStats(memset_nodes=42),
                                       capture_launch="deferred")) == ""
    assert memset_note(SimpleNamespace(stats=RuntimeStats(), capture_launch="fork")) == ""
    assert memset_note(None) == ""
    assert "1 MEMSET node," in memset_note(SimpleNamespace(stats=RuntimeStats(memset_nodes=1),
                                                           capture_launch="fork"))
    assert MEMSET_DOC.endswith("#memset-nodes-in-the-captured-step-issue-48")
    assert "### MEMSET nodes in the captured step (issue 48)" in open("docs/runtime.md").read()


def test_summary_line_ends_with_the_runtime_note():
    from l2sched.compiler.compile import compile_plan, schedule_inventory
    from l2sched.lang.resolve import load_schedule
    from l2sched.vllm.config import PluginConfig
    sched = load_schedule(DSV4)
    inv = schedule_inventory(sched)
    plan = compile_plan(sched, inv, 0)
    cfg = PluginConfig(schedule=DSV4)
    note = "; 2 fills after programmatic-launch kernels start late (x)"
    line = summary_line(sched, plan, inv, cfg, "h200", "lint ok", runtime_note=note)
    assert line.endswith(note)
    assert not summary_line(sched, plan, inv, cfg, "h200", "lint ok").endswith(note)


def test_plugin_reports_after_capture_once_per_count(monkeypatch, caplog):
    from l2sched.compiler.compile import compile_plan, schedule_inventory
    from l2sched.lang.resolve import load_schedule
    from l2sched.runtime.dry_run import DryRunRuntime
    from l2sched.runtime.sites import Installed
    from l2sched.vllm import plugin
    sched = load_schedule(DSV4)
    plan = compile_plan(sched, schedule_inventory(sched), 0)
    rt = DryRunRuntime(plan)
    inst = Installed(plan, rt, summarize=lambda p, runtime_note="": f"summary{runtime_note}")
    monkeypatch.setattr(plugin, "INSTALLED", [inst])
    with caplog.at_level(logging.INFO, logger=plugin.log.name):
        plugin.report_programmatic()            # nothing late: no line
        rt.stats.programmatic_late = 2
        plugin.report_programmatic()
        plugin.report_programmatic()            # same count: no second line
    lines = [r.getMessage() for r in caplog.records if "after CUDA-graph capture" in r.getMessage()]
    assert len(lines) == 1 and "2 fills after programmatic-launch kernels" in lines[0]
    assert inst.summary.startswith("summary; 2 fills")
    # a forking runtime whose capture has MEMSET nodes: the note is added, once
    rt.capture_launch = "fork"
    rt.stats.memset_nodes = 42
    with caplog.at_level(logging.INFO, logger=plugin.log.name):
        plugin.report_programmatic()
        plugin.report_programmatic()
    lines = [r.getMessage() for r in caplog.records if "after CUDA-graph capture" in r.getMessage()]
    assert len(lines) == 2 and "42 MEMSET nodes" in lines[1]
