"""Issue 48, one fill launch per hook point (CPU): the launch groups
(``runtime.base.group_issues``), the fill table's contiguous group spans,
the CUDA backend's one fork + one launch per group in every capture launch
(with fakes standing in for the streams and kernels), per-issue stats, the
dry-run record and ``explain``, the installer's one hook action per group,
and the bench's ``merge=on|off`` variant item."""

import dataclasses

import pytest
from extras import TORCH_MISSING

from l2sched.cli.explain import format_events
from l2sched.compiler.plan import ByteRange, Plan, WindowIssue
from l2sched.runtime import make_runtime
from l2sched.runtime.base import group_issues
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.dry_run import DryRunRuntime, explain_step
from l2sched.runtime.gate import StepInfo
from l2sched.runtime.table import FillTable


def _wi(window, hook, layer, nranges=1, kernel=""):
    return WindowIssue(window, hook, layer, 1 << 20,
                       tuple(ByteRange(layer, f"{window}.w{k}", 0, 4096 * (k + 1))
                             for k in range(nranges)), kernel=kernel)


def _plan(issues, max_tokens=256):
    return Plan(schedule="t", model="glm5next", device="h200", tp=1, tp_rank=0,
                ep=False, policy="evict_last", max_tokens=max_tokens, set_aside=0,
                num_layers=4, issues=tuple(issues))


#: layer 1: A (2 ranges) and B (3 ranges) at one hook, one kernel; C (copy) at
#: that hook too; D at another hook; layer 2: A and B again.
ISSUES = [_wi("A", "attn.pre_all_reduce", 1, 2), _wi("B", "attn.pre_all_reduce", 1, 3),
          _wi("C", "attn.pre_all_reduce", 1, 1, kernel="copy"),
          _wi("D", "moe.pre_all_reduce", 1, 1),
          _wi("A", "attn.pre_all_reduce", 2, 1), _wi("B", "attn.pre_all_reduce", 2, 2,
                                                     kernel="bulk")]


# --- grouping ---------------------------------------------------------------

def test_group_issues_same_hook_layer_and_kernel_only():
    plan = _plan(ISSUES)
    kern = lambda wi: wi.kernel or "bulk"  # noqa: E731
    assert group_issues(plan.issues, kern) == [(0, 1), (2,), (3,), (4, 5)]
    # "" and "bulk" are one kernel only where the default is bulk
    assert group_issues(plan.issues, lambda wi: wi.kernel) == [(0, 1), (2,), (3,), (4,), (5,)]
    assert group_issues(plan.issues, kern, merge=False) == [(i,) for i in range(6)]
    # one hook point in two places of the order (not plan order): not merged
    odd = [ISSUES[0], ISSUES[3], ISSUES[1]]
    assert group_issues(odd, kern) == [(0,), (1,), (2,)]


def test_runtimes_group_by_resolved_fill_mode():
    plan = _plan(ISSUES)
    for rt in (CudaRuntime(plan), DryRunRuntime(plan)):
        assert rt.launch_groups == [(0, 1), (2,), (3,), (4, 5)], type(rt)
        assert rt.groups_of(_plan(ISSUES[:2])) == [(0, 1)]
    # default copy: C joins A and B; B of layer 2 (bulk) is split from A
    assert CudaRuntime(plan, fill_default="copy").launch_groups == [(0, 1, 2), (3,), (4,), (5,)]
    assert DryRunRuntime(plan, fill_default="copy").launch_groups == [(0, 1, 2), (3,), (4,), (5,)]
    # a mode for every issue: one kernel
    assert CudaRuntime(plan, mode="load").launch_groups == [(0, 1, 2), (3,), (4, 5)]
    assert CudaRuntime(plan, merge_fills=False).launch_groups == [(i,) for i in range(6)]
    assert DryRunRuntime(plan, merge_fills=False).launch_groups == [(i,) for i in range(6)]


def test_group_rows_are_one_contiguous_span_of_the_table():
    plan = _plan(ISSUES)
    table = FillTable(plan)
    for g in CudaRuntime(plan).launch_groups:
        b, e = table.offsets[g[0]], table.offsets[g[-1] + 1]
        assert e - b == sum(len(plan.issues[i].ranges) for i in g)
        spans = [table.spans[i] for i in g]
        assert spans[0][0] == b and spans[-1][1] == e
        assert all(x[1] == y[0] for x, y in zip(spans, spans[1:]))  # no gap


# --- the CUDA backend with fakes ----------------------------------------------

class _ForkJoin:
    def __init__(self, log):
        self.log, self.capturing = log, False

    def is_capturing(self):
        return self.capturing

    def fork(self):
        self.log.append(("fork",))

    def join(self):
        self.log.append(("join",))

    def current_handle(self):
        return 77


class _Deps:
    launch_order_edge = "LO"

    def __init__(self, log):
        self.log, self.deps = log, {}

    def get(self, stream):
        return self.deps.get(stream, (["prev"], [None]))

    def set(self, stream, nodes, edges):
        self.log.append(("deps", tuple(nodes), tuple(edges)))
        self.deps[stream] = (list(nodes), list(edges))


class _Kernel:
    def __init__(self, spec, log):
        self.spec, self.log, self.ffi = spec, log, False

    def bind(self, table_ptr, stream, switch_ptr):
        def launch(b, e):
            self.log.append(("launch", self.spec.mode, "side" if stream == "S" else stream, b, e))
        return launch


def _fake_cuda(plan, capture_launch="fork", **kw):
    """A ``CudaRuntime`` whose streams, table copy and kernels are fakes that
    log fork, join, launches ``(mode, stream, begin, end)`` and dependency
    updates."""
    rt = CudaRuntime(plan, capture_launch=capture_launch, **kw)
    log = []
    rt._ready = True
    rt.fork_join = _ForkJoin(log)
    rt.side = type("Side", (), {"cuda_stream": "S"})()
    rt.switch_word = type("Word", (), {"ptr": 0, "set": lambda self, on: True})()
    rt.kernels = {s: _Kernel(s, log) for s in dict.fromkeys(rt.specs)}
    rt._launches = {s: k.bind(0, "S", 0) for s, k in rt.kernels.items()}
    rt._launch_of = [rt._launches[s] for s in rt.specs]
    rt._capture_deps = _Deps(log)
    for i, wi in enumerate(plan.issues):
        rt.table.set(i, [(0x10000 * (i + 1) + 256 * k, r.nbytes)
                         for k, r in enumerate(wi.ranges)])
    rt.table.dirty.clear()  # "flushed"
    rt.set_step(StepInfo(num_tokens=4))
    return rt, log


def _fire(rt):
    for g in rt.launch_groups:
        rt.issue_launch(g)
    rt.join()


def test_cuda_one_fork_and_one_launch_per_group_eager():
    plan = _plan(ISSUES)
    rt, log = _fake_cuda(plan)
    off = rt.table.offsets
    _fire(rt)
    assert log == [("fork",), ("launch", "bulk", "side", off[0], off[2]),
                   ("fork",), ("launch", "copy", "side", off[2], off[3]),
                   ("fork",), ("launch", "bulk", "side", off[3], off[4]),
                   ("fork",), ("launch", "bulk", "side", off[4], off[6]),
                   ("join",)]
    s = rt.stats
    assert (s.issued, s.launches, s.joined) == (6, 4, 1)
    assert s.bytes_issued == sum(wi.nbytes for wi in plan.issues)
    # merging off: one fork and launch per issue, the same stats but launches
    rt2, log2 = _fake_cuda(plan, merge_fills=False)
    _fire(rt2)
    assert [x for x in log2 if x[0] == "launch"] == [
        ("launch", s.mode, "side", off[i], off[i + 1]) for i, s in enumerate(rt2.specs)]
    assert (rt2.stats.issued, rt2.stats.launches) == (6, 6)
    assert rt2.stats.bytes_issued == s.bytes_issued


def test_cuda_group_gate_skips_count_per_issue():
    plan = _plan(ISSUES, max_tokens=2)
    rt, log = _fake_cuda(plan)
    assert rt.issue_launch((0, 1)) is False
    assert rt.stats.skipped == {"too-many-tokens": 2} and log == []
    rt.set_step(StepInfo(num_tokens=1))
    rt.switch(False)
    assert rt.issue_launch((0, 1)) is False
    assert rt.stats.skipped["switched-off"] == 2 and rt.stats.launches == 0


def test_cuda_group_with_an_issue_without_ranges():
    issues = [_wi("A", "h", 1, 2), _wi("E", "h", 1, 0), _wi("B", "h", 1, 1)]
    rt, log = _fake_cuda(_plan(issues))
    assert rt.launch_groups == [(0, 1, 2)]
    assert rt.issue_launch((0, 1, 2))
    assert log == [("fork",), ("launch", "bulk", "side", 0, 3)]
    assert (rt.stats.issued, rt.stats.launches) == (2, 1)  # E has no rows
    only_empty, log = _fake_cuda(_plan([_wi("E", "h", 1, 0), _wi("F", "h", 1, 0)]))
    assert only_empty.issue_launch((0, 1)) is False and log == []


def test_cuda_indices_that_are_no_group_are_issued_one_by_one():
    plan = _plan(ISSUES)
    rt, log = _fake_cuda(plan)
    off = rt.table.offsets
    assert rt.issue_launch((1, 2))  # two kernels: bulk then copy
    assert [x for x in log if x[0] == "launch"] == [
        ("launch", "bulk", "side", off[1], off[2]), ("launch", "copy", "side", off[2], off[3])]
    assert rt.stats.launches == 2


@pytest.mark.parametrize("mode", CudaRuntime.CAPTURE_LAUNCHES)
def test_cuda_every_capture_launch_captures_one_fill_per_group(mode):
    """In a FULL capture each ``capture_launch`` enters a group as one fill
    over the group's rows: ``fork`` at once on the side stream,
    ``deferred`` on the side stream at the next hook, ``leaf``/
    ``launch-order`` on the model's stream at once (dependencies set back /
    to the launch-order port), ``leaf-deferred`` on the model's stream at
    the next hook with the dependencies saved at its own."""
    plan = _plan(ISSUES)
    rt, log = _fake_cuda(plan, capture_launch=mode)
    rt.fork_join.capturing = True
    rt.set_step(StepInfo(num_tokens=4, graph_mode="full"))
    off = rt.table.offsets
    stream = "side" if mode in ("fork", "deferred") else 77
    spans = [("bulk", off[0], off[2]), ("copy", off[2], off[3]), ("bulk", off[3], off[4]),
             ("bulk", off[4], off[6])]
    assert rt.issue_launch((0, 1))
    launched = [x for x in log if x[0] == "launch"]
    if mode in ("deferred", "leaf-deferred"):
        assert launched == [] and len(rt._deferred) == 1
        assert rt._deferred[0][:3] == (0, off[0], off[2])
    else:
        assert launched == [("launch", "bulk", stream, off[0], off[2])]
    for g in rt.launch_groups[1:]:
        rt.issue_launch(g)
    rt.join()
    assert rt._deferred == []
    assert [x for x in log if x[0] == "launch"] == [("launch", m, stream, b, e)
                                                  for m, b, e in spans]
    assert (rt.stats.issued, rt.stats.launches) == (6, 4)
    forks = sum(1 for x in log if x[0] == "fork")
    assert forks == (4 if mode in ("fork", "deferred") else 0)
    if mode == "launch-order":
        assert sum(1 for x in log if x[0] == "deps" and x[2] == ("LO",)) == 4
    if mode == "leaf":
        assert all(x == ("deps", ("prev",), (None,)) for x in log if x[0] == "deps")


# --- dry run, explain, installer ---------------------------------------------

def test_dry_run_records_one_fork_and_launch_per_group():
    plan = _plan(ISSUES)
    rt = DryRunRuntime(plan)
    rt.set_rows(1, [(0x1000, 512)])  # bound rows count over the plan's
    rt.set_step(StepInfo(num_tokens=4))
    assert rt.issue_launch((0, 1))
    rt.join()
    fork, launch, join = rt.events
    assert (fork.op, fork.window, fork.layer, fork.hook) == \
        ("fork", "A+B", 1, "attn.pre_all_reduce")
    assert (launch.op, launch.nbytes, launch.rows, launch.reason) == \
        ("launch", plan.issues[0].nbytes + 512, 2 + 1, "eager")
    assert join.op == "join"
    assert (rt.stats.issued, rt.stats.launches, rt.stats.bytes_issued) == (2, 1, launch.nbytes)
    rt.clear()
    rt.set_step(StepInfo(num_tokens=1000))
    assert not rt.issue_launch((0, 1))
    assert [(e.op, e.window, e.reason) for e in rt.events] == [
        ("skip", "A", "too-many-tokens"), ("skip", "B", "too-many-tokens")]
    assert rt.stats.skipped == {"too-many-tokens": 2}
    # captured while switched off: recorded, 0 bytes; eager: skipped per issue
    rt.clear()
    rt.switch(False)
    rt.set_step(StepInfo(num_tokens=4, graph_mode="full", capturing=True))
    assert rt.issue_launch((0, 1)) and rt.events[-1].reason == "switched-off"
    assert rt.events[-1].nbytes == 0
    rt.set_step(StepInfo(num_tokens=4))
    assert not rt.issue_launch((0, 1))
    assert rt.stats.skipped["switched-off"] == 2


def test_explain_step_merges_and_can_show_every_issue():
    plan = _plan(ISSUES)
    ev = explain_step(plan)
    assert [(e.op, e.window) for e in ev if e.op == "launch"] == [
        ("launch", "A+B"), ("launch", "C"), ("launch", "D"), ("launch", "A+B")]
    assert "A+B" in format_events(ev)
    ev = explain_step(plan, merge_fills=False)
    assert [e.window for e in ev if e.op == "launch"] == ["A", "B", "C", "D", "A", "B"]
    ev = explain_step(plan, fill_default="copy")
    assert [e.window for e in ev if e.op == "launch"] == ["A+B+C", "D", "A", "B"]


def test_a_plan_without_shared_hooks_explains_as_before():
    """Every shipped schedule has one issue per hook point and layer: its
    ``explain`` output is what it was before merging."""
    plan = _plan([ISSUES[0], ISSUES[3], ISSUES[4]])
    assert explain_step(plan) == explain_step(plan, merge_fills=False)


def test_make_runtime_dry_run_takes_the_profiles_default_mode():
    from l2sched.device import load_device
    prof = load_device("h200")
    plan = _plan(ISSUES)
    rt = make_runtime(plan, "dry-run", device_profile=prof)
    assert rt._fill_default == prof.fill_default
    assert rt.launch_groups == CudaRuntime(
        plan, fill=prof.fill_modes, fill_default=prof.fill_default).launch_groups


def _install_case(merge):
    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    from torch import nn

    from l2sched.runtime.install import HookSite, install

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 16)
            self.b = nn.Linear(16, 16)

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    layers = nn.ModuleList(Layer() for _ in range(2))
    w = lambda window, hook, layer, t: WindowIssue(  # noqa: E731
        window, hook, layer, 1 << 20, (ByteRange(layer, t, 0, -1),))
    plan = _plan([w("A", "a.exit", 0, "b.weight"), w("B", "a.exit", 0, "b.bias"),
                  w("C", "b.entry", 0, "a.weight"),
                  w("A", "a.exit", 1, "b.weight"), w("B", "a.exit", 1, "b.bias")])
    sites = {"a.exit": HookSite("a", "forward_post"), "b.entry": HookSite("b", "forward_pre")}
    rt = DryRunRuntime(plan, merge_fills=merge)
    rt.set_step(StepInfo(num_tokens=4))
    inst = install(layers, plan, sites, rt)
    x = torch.randn(2, 16)
    with torch.no_grad():
        for layer in layers:
            x = layer(x)
    rt.join()
    return plan, rt, inst


def test_installer_fires_a_group_with_one_action():
    plan, rt, inst = _install_case(True)
    try:
        assert [(e.op, e.window, e.layer) for e in rt.events if e.op == "launch"] == [
            ("launch", "A+B", 0), ("launch", "C", 0), ("launch", "A+B", 1)]
        launch = rt.events[1]
        assert launch.nbytes == 16 * 16 * 4 + 16 * 4 and launch.rows == 2  # both bound
        assert (rt.stats.issued, rt.stats.launches) == (5, 3)
        slot = next(s for s in inst.placed if s.issues[:2] == [0, 1])
        assert len(slot.actions) == 1 + (slot.join is True)
    finally:
        inst.remove()
    plan, rt, inst = _install_case(False)
    inst.remove()
    assert [e.window for e in rt.events if e.op == "launch"] == ["A", "B", "C", "A", "B"]
    assert (rt.stats.issued, rt.stats.launches) == (5, 5)


def test_a_runtime_without_groups_fires_every_issue():
    """A backend without ``launch_groups`` (a test double) gets one
    ``issue`` per issue, as before."""
    class Plain(DryRunRuntime):
        launch_groups = None

    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    from torch import nn

    from l2sched.runtime.install import HookSite, install
    layers = nn.ModuleList([nn.Linear(4, 4)])
    plan = _plan([WindowIssue(w, "x", 0, 1, (ByteRange(0, "weight", 0, -1),)) for w in "AB"])
    rt = Plain(plan)
    with install(layers, plan, {"x": HookSite("", "forward_pre")}, rt):
        layers[0](torch.zeros(1, 4))
    assert [e.window for e in rt.events if e.op == "launch"] == ["A", "B"]


def test_base_issue_launch_issues_one_by_one():
    from l2sched.runtime.base import RuntimeBase

    class Rec(RuntimeBase):
        def issue(self, index):
            self.seen.append(index)
            return index == 1

    rt = Rec(_plan(ISSUES))
    rt.seen = []
    assert rt.issue_launch((0, 1)) is True and rt.seen == [0, 1]


def test_adopt_regroups_for_the_new_plan():
    plan = _plan(ISSUES)
    rt = DryRunRuntime(plan)
    assert rt.launch_groups[0] == (0, 1)
    new = dataclasses.replace(plan, issues=tuple(
        dataclasses.replace(wi, kernel="copy" if wi.window == "B" else wi.kernel)
        for wi in plan.issues))
    assert rt.adopt(new)
    assert rt.launch_groups == [(0,), (1, 2), (3,), (4,), (5,)]


# --- bench ------------------------------------------------------------------

def test_bench_merge_variant_item():
    from l2sched.bench.arms import arm_specs, check_variants
    sched = "schedules/glm53-flash-h200-tp4-fit-idle.l2s"
    check_variants(["unmerged:merge=off", "m:merge=on,launch=deferred"], sched)
    for bad, msg in (("x:merge=maybe", "merge takes only"),
                     ("x:merge=off,merge=on", "merge given twice")):
        with pytest.raises(ValueError, match=msg):
            check_variants([bad], sched)
    arms = {a["name"]: a for a in arm_specs(sched, "", False, ["unmerged:merge=off"])}
    assert arms["unmerged"]["runtime"] == {"merge_fills": False}
    assert arms["unmerged"]["overrides"] == []


def test_the_split_fitted_schedule_fetches_the_same_bytes_in_the_same_launches():
    """benchmarks/merge/glm53-flash-h200-tp4-fit-idle-split.l2s (the before/after
    schedule of issue 48): the fitted schedule's bytes, range for range, in
    132 issues that merge into the fitted schedule's 90 launches (42 hooks
    with two windows); unmerged it is 132 launches."""
    from l2sched.compiler.compile import compile_plan
    from l2sched.device import load_device
    from l2sched.lang.resolve import load_schedule
    from l2sched.model.config import load_model_config
    from l2sched.model.inventory import analytical_inventory
    prof = load_device("h200")
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    fit = compile_plan(load_schedule("schedules/glm53-flash-h200-tp4-fit-idle.l2s", []), inv, 0)
    split = compile_plan(load_schedule(
        "benchmarks/merge/glm53-flash-h200-tp4-fit-idle-split.l2s", []), inv, 0)
    rng = lambda p: sorted(dataclasses.astuple(r) for wi in p.issues for r in wi.ranges)  # noqa: E731
    assert rng(fit) == rng(split)
    kw = dict(fill=prof.fill_modes, fill_default=prof.fill_default)
    assert (len(fit.issues), len(split.issues)) == (90, 132)
    assert len(CudaRuntime(fit, **kw).launch_groups) == 90
    groups = CudaRuntime(split, **kw).launch_groups
    assert len(groups) == 90 and sum(len(g) == 2 for g in groups) == 42
    assert len(CudaRuntime(split, merge_fills=False, **kw).launch_groups) == 132
