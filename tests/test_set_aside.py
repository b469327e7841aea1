"""Issue 17 item 2: the persisting-L2 set-aside is device-wide hardware state.
Each plan's request is applied or refused with a log line, withdrawing it
restores the limit that was in force before, and concurrent plans on one
device resolve to the largest request, whatever their order. Runs on CPU
with a fake ``cuda.bindings.driver``."""

from __future__ import annotations

import sys
import types

import pytest

from l2sched.runtime import set_aside as SA

MAX = 39_321_600  # the lent H200's CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
MB = 10**6


class FakeDriver(types.ModuleType):
    """The part of ``cuda.bindings.driver`` the set-aside uses, over one
    device-wide limit per device; ``fail_set`` makes cuCtxSetLimit fail."""

    def __init__(self, limit=0, dmax=MAX):
        super().__init__("cuda.bindings.driver")
        ok = types.SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_INVALID_VALUE=1)
        self.CUresult = ok
        self.CUlimit = types.SimpleNamespace(CU_LIMIT_PERSISTING_L2_CACHE_SIZE="L")
        self.CUdevice_attribute = types.SimpleNamespace(
            CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE="M")
        self.limits = {}
        self.initial, self.dmax = limit, dmax
        self.fail_set = False
        self.set_calls = []
        self._current = []

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGet(self, i):
        return (0, i)

    def cuDeviceGetAttribute(self, attr, dev):
        assert attr == "M"
        return (0, self.dmax)

    def cuDevicePrimaryCtxRetain(self, dev):
        return (0, ("ctx", dev))

    def cuDevicePrimaryCtxRelease(self, dev):
        return (0,)

    def cuCtxPushCurrent(self, ctx):
        self._current.append(ctx[1])
        return (0,)

    def cuCtxPopCurrent(self):
        self._current.pop()
        return (0, None)

    def cuCtxSetLimit(self, limit, value):
        assert limit == "L"
        if self.fail_set:
            return (1,)
        self.set_calls.append(value)
        self.limits[self._current[-1]] = min(int(value), self.dmax)
        return (0,)

    def cuCtxGetLimit(self, limit):
        assert limit == "L"
        return (0, self.limits.get(self._current[-1], self.initial))

    def cuCtxResetPersistingL2Cache(self):
        self.resets = getattr(self, "resets", 0) + 1
        return (0,)


@pytest.fixture
def drv(monkeypatch):
    fake = FakeDriver()
    cuda = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = fake
    cuda.bindings = bindings
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)
    SA.reset_ledger()
    yield fake
    SA.reset_ledger()


def _lines(caplog):
    out = [r.getMessage() for r in caplog.records if "set-aside" in r.getMessage()]
    caplog.clear()
    return out


def test_item02_every_request_is_applied_and_zero_restores(drv, caplog):
    """The issue's sequence: 40 MB, 20 MB, 0, max on device 0."""
    caplog.set_level("INFO", logger="l2sched")
    drv.initial = 1_048_576  # someone's limit before any plan (restored at the end)
    assert SA.apply_set_aside(0, 40 * MB, capturing=False) == MAX  # clamped
    assert len(_lines(caplog)) == 1
    assert SA.apply_set_aside(0, 20 * MB, capturing=False) == 20 * MB
    lines = _lines(caplog)
    assert len(lines) == 1 and "20,000,000 B" in lines[0], lines
    # 0 withdraws the request: the limit before the first request comes back
    assert SA.apply_set_aside(0, 0, capturing=False) == 1_048_576
    lines = _lines(caplog)
    assert len(lines) == 1 and "restored" in lines[0], lines
    assert SA.apply_set_aside(0, -1, capturing=False) == MAX
    assert drv.limits[0] == MAX
    assert SA.release_set_aside(0) == 1_048_576
    assert drv.limits[0] == 1_048_576
    assert SA.in_force(0) is None  # no request left: the ledger forgets device 0


def test_item02_concurrent_plans_resolve_to_the_largest_request(drv, caplog):
    caplog.set_level("INFO", logger="l2sched")
    for order in (("A", "B"), ("B", "A")):
        SA.reset_ledger()
        drv.limits.clear()
        req = {"A": 20 * MB, "B": 30 * MB}
        for owner in order:
            SA.apply_set_aside(0, req[owner], owner, capturing=False)
        assert drv.limits[0] == 30 * MB, order
        assert SA.in_force(0) == 30 * MB
        assert SA.release_set_aside(0, "B") == 20 * MB
        assert SA.release_set_aside(0, "A") == 0
        assert drv.limits[0] == 0
    # a smaller request while a larger one is in force: applied as "at
    # least", and the line says whose request is in force
    caplog.clear()
    SA.apply_set_aside(0, 30 * MB, "B", capturing=False)
    SA.apply_set_aside(0, 20 * MB, "A", capturing=False)
    line = _lines(caplog)[-1]
    assert "A requests 20,000,000 B" in line and "in force 30,000,000 B" in line
    assert "B's" in line, line
    # devices are independent
    assert SA.apply_set_aside(1, 5 * MB, "C", capturing=False) == 5 * MB
    assert drv.limits[0] == 30 * MB and drv.limits[1] == 5 * MB


def test_item02_refused_requests_change_nothing_and_say_so(drv, caplog):
    caplog.set_level("INFO", logger="l2sched")
    assert SA.apply_set_aside(0, 20 * MB, "A", capturing=False) == 20 * MB
    caplog.clear()
    assert SA.apply_set_aside(0, 30 * MB, "B", capturing=True) is None
    lines = _lines(caplog)
    assert len(lines) == 1 and "refused" in lines[0] and "capture" in lines[0]
    assert drv.limits[0] == 20 * MB and SA.in_force(0) == 20 * MB
    drv.fail_set = True
    assert SA.apply_set_aside(0, 30 * MB, "B", capturing=False) is None
    lines = _lines(caplog)
    assert len(lines) == 1 and "refused" in lines[0] and "cuCtxSetLimit" in lines[0]
    assert SA.in_force(0) == 20 * MB
    drv.fail_set = False
    # the same request again is no driver call
    n = len(drv.set_calls)
    assert SA.apply_set_aside(0, 20 * MB, "A", capturing=False) == 20 * MB
    assert len(drv.set_calls) == n


def test_item02_no_driver_is_a_refusal_not_a_crash(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    SA.reset_ledger()
    caplog.set_level("INFO", logger="l2sched")
    assert SA.apply_set_aside(0, 20 * MB, "A", capturing=False) is None
    assert len(_lines(caplog)) == 1
    assert SA.in_force(0) is None


def test_item02_prediction_for_the_lint(drv):
    """What will be in force after a plan's request, before it is made."""
    assert SA.planned_set_aside(0, 0, "A") == 0
    assert SA.planned_set_aside(0, 20 * MB, "A") == 20 * MB
    SA.apply_set_aside(0, 30 * MB, "B", capturing=False)
    assert SA.planned_set_aside(0, 20 * MB, "A") == 30 * MB
    assert SA.planned_set_aside(0, 0, "A") == 30 * MB
    assert SA.planned_set_aside(0, -1, "A") == -1
    assert SA.planned_set_aside(0, 10 * MB, "B") == 10 * MB  # B replaces its own
    assert SA.planned_set_aside(1, 0, "A") == 0


def test_item02_plugin_lints_with_what_will_be_in_force(drv):
    from l2sched.lang.resolve import load_schedule
    from l2sched.vllm.plugin import set_aside_for_lint

    s = load_schedule("schedules/glm53-flash-sm120-tp4.l2s")
    assert s.set_aside == 0
    same, note = set_aside_for_lint(s, 0, "me")
    assert same is s and note == ""
    SA.apply_set_aside(0, 30 * MB, "another plan", capturing=False)
    got, note = set_aside_for_lint(s, 0, "me")
    assert got.set_aside == 30 * MB and "another plan" in note, note


def test_reset_persisting_lines_calls_the_driver(drv, monkeypatch, caplog):
    assert SA.reset_persisting_lines(0) is True and drv.resets == 1
    monkeypatch.setattr(drv, "cuCtxResetPersistingL2Cache", lambda: (1,))
    caplog.set_level("WARNING", logger="l2sched")
    assert SA.reset_persisting_lines(0) is False  # refused: a log line, no raise
    assert "not reset" in caplog.text


def test_bench_replays_give_each_arm_its_own_set_aside(drv):
    """The fit proof's confound (benchmarks/results/h200-2026-12-01-fit-proof.md):
    one arm's ``set_aside max`` stayed in force for every arm. During replays
    each arm now has its own set-aside, and persisting lines are demoted
    before every replay."""
    import types as T

    from l2sched.bench.isolation import SetAsideIsolation
    from l2sched.bench.run import _replay_interleaved
    drv.initial = 0
    # what the runtimes requested at prepare(): the fitted arm asked for the maximum
    SA.apply_set_aside(0, -1, "plan fit", capturing=False)
    closed = []

    class Runtime:
        def __init__(self, owner):
            self.owner = owner

        def close(self):
            closed.append(self.owner)
            SA.release_set_aside(0, self.owner, capturing=False)

    iso = SetAsideIsolation({"none": 0, "fit": -1, "prev": 0}, device=0)
    assert iso.active
    iso.start([None, Runtime("plan fit"), Runtime("plan prev")])
    assert closed == ["plan fit", "plan prev"] and SA.in_force(0) is None
    in_force = {}

    class Graph:
        def __init__(self, name):
            self.name = name

        def replay(self):
            in_force.setdefault(self.name, set()).add(drv.limits.get(0, drv.initial))

    class Event:
        def __init__(self, **kw):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):
            return 0.001

    torch = T.SimpleNamespace(cuda=T.SimpleNamespace(Event=Event, synchronize=lambda: None))
    args = T.SimpleNamespace(warmup=1, replays=3, lead_us=0.0)
    graphs = {k: Graph(k) for k in ("none", "fit", "prev")}
    times, _ = _replay_interleaved(graphs, {}, {}, args, torch, before=iso.before)
    iso.close()
    assert in_force == {"none": {0}, "fit": {MAX}, "prev": {0}}
    assert all(len(v) == 3 for v in times.values())
    assert drv.resets == 12 and iso.record()["resets"] == 12  # one per replay
    assert SA.in_force(0) is None and drv.limits[0] == 0  # the limit before it all


def test_bench_replays_without_a_set_aside_change_nothing(drv):
    from l2sched.bench.isolation import SetAsideIsolation
    iso = SetAsideIsolation({"none": 0, "compiled": 0}, device=0)
    iso.start([object()])
    iso.before("compiled")
    iso.close()
    assert not iso.active and drv.set_calls == [] and not hasattr(drv, "resets")
    assert not SetAsideIsolation({"fit": -1}, dry=True).active
