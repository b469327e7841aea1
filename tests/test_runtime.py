"""Runtime on CPU: the gate decision table, the dry-run record, explain, and the
no-GPU fallback (prefetch disabled with one log line, no exception)."""

import logging

import pytest
from extras import GPU_MISSING, TORCH_MISSING

from l2sched.cli.explain import format_events
from l2sched.compiler.plan import ByteRange, Plan, WindowIssue
from l2sched.runtime import make_runtime
from l2sched.runtime.dry_run import DryRunRuntime, explain_step
from l2sched.runtime.gate import StepInfo, gate, gate_pair
from l2sched.units import GRAPH_MODES


def _plan(max_tokens=256, issues=None, policy="evict_last", set_aside=0):
    if issues is None:
        issues = (
            WindowIssue("A", "attn.after_first_proj", 3, 20_000_000,
                        (ByteRange(3, "self_attn.o_proj.weight", 0, 4096),)),
            WindowIssue("B", "attn.pre_all_reduce", 3, 50_000_000,
                        (ByteRange(3, "mlp.gate.weight", 0, 8192),
                         ByteRange(4, "self_attn.in_proj.weight", 0, 1 << 20))),
            WindowIssue("C", "moe.pre_all_reduce", 3, 15_000_000,
                        (ByteRange(4, "self_attn.w_uk", 0, -1, lazy=True),)),
        )
    return Plan(schedule="t", model="glm5next", device="h200", tp=1, tp_rank=0,
                ep=False, policy=policy, max_tokens=max_tokens, set_aside=set_aside,
                num_layers=5, issues=tuple(issues))


# --- gate -------------------------------------------------------------------

@pytest.mark.parametrize("step,capturing,expect", [
    (StepInfo(num_tokens=1), False, (True, "eager")),
    (StepInfo(num_tokens=256), False, (True, "eager")),
    (StepInfo(num_tokens=257), False, (False, "too-many-tokens")),
    (StepInfo(num_tokens=None), False, (True, "eager")),
    (StepInfo(num_tokens=8, is_prefill=True), False, (False, "prefill")),
    (StepInfo(num_tokens=8, is_prefill=True), True, (False, "prefill")),
    (StepInfo(num_tokens=8, graph_mode="full"), True, (True, "full-capture")),
    # vLLM V2 says NONE during a FULL capture: capture still prefetches
    (StepInfo(num_tokens=8, graph_mode="none"), True, (True, "full-capture")),
    (StepInfo(num_tokens=8, graph_mode="piecewise"), True, (False, "piecewise-capture")),
    # an uncaptured piecewise-mode batch size runs eagerly: prefetch
    (StepInfo(num_tokens=8, graph_mode="piecewise"), False, (True, "eager")),
    (StepInfo(num_tokens=8, graph_mode="full", warmup=True), False, (False, "warmup")),
    (StepInfo(num_tokens=8, graph_mode="piecewise", warmup=True), False, (False, "warmup")),
    (StepInfo(num_tokens=512, graph_mode="full"), True, (False, "too-many-tokens")),
])
def test_gate_table(step, capturing, expect):
    d = gate(step, capturing=capturing, max_tokens=256)
    assert (d.issue, d.reason) == expect


def test_gate_disabled_wins():
    d = gate(StepInfo(num_tokens=1), capturing=False, max_tokens=256, enabled=False)
    assert (d.issue, d.reason) == (False, "disabled")


def test_gate_pair_equals_gate_for_every_step():
    # CudaRuntime.issue decides through gate_pair (once per StepInfo) and asks
    # for the capture state only when the pair differs: it must be gate().
    import itertools
    for n, pre, mode, warm, cap_field in itertools.product(
            (None, 1, 256, 257), (False, True), GRAPH_MODES, (False, True),
            (None, False, True)):
        step = StepInfo(num_tokens=n, is_prefill=pre, graph_mode=mode,
                        warmup=warm, capturing=cap_field)
        nocap, cap = gate_pair(step, 256)
        for capturing, d in ((False, nocap), (True, cap)):
            want = gate(step, capturing=capturing if cap_field is None else cap_field,
                        max_tokens=256)
            assert d == want, (step, capturing)
        if nocap is not cap:  # only then may the capture state matter
            assert (nocap.issue, nocap.reason) != (cap.issue, cap.reason)


def test_cuda_runtime_rejects_unknown_sync():
    from l2sched.runtime.cuda import CudaRuntime
    with pytest.raises(ValueError):
        CudaRuntime(_plan(), sync="cupy")


def test_cuda_runtime_takes_every_capture_launch_and_rejects_others():
    """Issue 36: ``capture_launch`` is one of ``CAPTURE_LAUNCHES`` (checked
    at construction, before any GPU work); the default is ``fork``."""
    from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES
    from l2sched.runtime.cuda import CudaRuntime
    assert CudaRuntime(_plan()).capture_launch == "fork"
    for launch in CAPTURE_LAUNCHES:
        assert CudaRuntime(_plan(), capture_launch=launch).capture_launch == launch
    with pytest.raises(ValueError, match="unknown capture launch 'leaves'.*launch-order"):
        CudaRuntime(_plan(), capture_launch="leaves")


# --- dry run ----------------------------------------------------------------

def test_dry_run_records_fork_launch_join_in_order():
    plan = _plan()
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=4))
    assert rt.issue(0) and rt.issue(plan.issues[1]) and rt.issue(2)
    rt.join()
    rt.join()  # nothing pending: no second join
    ops = [(e.op, e.window, e.layer) for e in rt.events]
    assert ops == [("fork", "A", 3), ("launch", "A", 3), ("fork", "B", 3),
                   ("launch", "B", 3), ("fork", "C", 3), ("launch", "C", 3),
                   ("join", "", -1)]
    assert [e.order for e in rt.events] == list(range(7))
    launches = [e for e in rt.events if e.op == "launch"]
    assert [e.nbytes for e in launches] == [4096, 8192 + (1 << 20), 0]
    assert rt.stats.issued == 3 and rt.stats.joined == 1


def test_dry_run_uses_bound_rows_and_skips():
    plan = _plan(max_tokens=16)
    rt = DryRunRuntime(plan)
    rt.set_rows(2, [(0x1000, 4096 * 3)])
    rt.set_step(StepInfo(num_tokens=4))
    rt.issue(2)
    assert rt.events[-1].nbytes == 4096 * 3 and rt.events[-1].rows == 1
    rt.set_step(StepInfo(num_tokens=17))
    assert not rt.issue(0)
    assert rt.events[-1].op == "skip" and rt.events[-1].reason == "too-many-tokens"
    rt.set_step(StepInfo(num_tokens=1, graph_mode="piecewise", capturing=True))
    assert not rt.issue(0)
    assert rt.stats.skipped == {"too-many-tokens": 1, "piecewise-capture": 1}


def test_step_provider_is_consulted_per_issue():
    steps = iter([StepInfo(num_tokens=1), StepInfo(is_prefill=True)])
    rt = DryRunRuntime(_plan(), step_provider=lambda: next(steps))
    assert rt.issue(0) is True
    assert rt.issue(0) is False


def test_explain_step_order_and_format():
    plan = _plan()
    ev = explain_step(plan)
    assert [e.op for e in ev] == ["fork", "launch"] * 3 + ["join"]
    text = format_events(ev)
    assert "attn.pre_all_reduce" in text and "1056768" in text
    assert text.splitlines()[0].split()[:3] == ["#", "op", "layer"]
    ev2 = explain_step(plan, StepInfo(num_tokens=1000))
    assert {e.op for e in ev2} == {"skip"}


def test_make_runtime_backends():
    plan = _plan()
    assert isinstance(make_runtime(plan, "dry-run"), DryRunRuntime)
    with pytest.raises(ValueError):
        make_runtime(plan, "tpu")


# --- no GPU: disabled, one log line, never an exception ----------------------

def test_cuda_runtime_without_gpu_disables_with_one_log_line(caplog):
    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    from l2sched.runtime import kernel as K
    from l2sched.runtime.cuda import CudaRuntime
    K.reset_for_tests()
    plan = _plan()
    with caplog.at_level(logging.INFO):
        rt = CudaRuntime(plan)
        rt.set_step(StepInfo(num_tokens=1))
        assert rt.set_rows(0, [(4096, 4096)]) is False
        assert rt.issue(0) is False
        assert rt.issue(1) is False
        rt.join()
        rt2 = CudaRuntime(plan)
        assert rt2.issue(0) is False
    lines = [r for r in caplog.records if "disabled" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert "no CUDA device" in lines[0].getMessage()
    assert K.get_kernel(0) is None
    K.reset_for_tests()


def test_kernel_module_imports_nothing_heavy():
    import subprocess
    import sys
    code = ("import sys, l2sched.runtime.kernel, l2sched.runtime, l2sched.runtime.install; "
            "bad=[m for m in ('torch','cutlass') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_policy_disables(caplog):
    from l2sched.runtime import kernel as K
    K.reset_for_tests()
    with caplog.at_level(logging.WARNING):
        assert K.get_kernel(0, policy="evict_sometimes", check_device=False) is None
    assert "unknown cache policy" in caplog.text
    K.reset_for_tests()


def test_ffi_kernel_calls_the_bare_tvm_ffi_function():
    # Compile-only (no GPU): the TVM-FFI path must call the tvm_ffi.Function
    # itself, not the DSL's Python wrappers (4.8.x adds two frames per call).
    pytest.importorskip("cutlass", reason=GPU_MISSING)
    pytest.importorskip("tvm_ffi", reason=GPU_MISSING)
    import os
    import subprocess
    import sys
    code = (
        "import tvm_ffi\n"
        "from l2sched.runtime import kernel as K\n"
        "k = K.get_kernel(0, check_device=False, ffi=True)\n"
        "assert k is not None and k.ffi, K.disabled_reason()\n"
        "f = k._ffi_call\n"
        "bare = isinstance(f, tvm_ffi.Function) and "
        "type(f).__call__ is tvm_ffi.Function.__call__\n"
        "slot = getattr(f, '__self__', None) is not None and "
        "isinstance(f.__self__, tvm_ffi.Function)\n"
        "assert bare or slot, type(f)\n"
        "assert callable(k.bind(0, 0, 0))\n"
        "print('ok')\n")
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr[-3000:]


@pytest.mark.parametrize("mode, shape", [
    ("copy", {"grid": 66, "threads": 32, "chunk": 32768, "stages": 4}),
    ("copy", {"grid": 8, "threads": 32, "chunk": 16384, "stages": 2}),
    ("load", {"grid": 1056, "threads": 128, "chunk": 128}),
    ("bulk", {}),
])
def test_every_fill_mode_compiles_without_a_gpu(mode, shape):
    """Compile-only (no GPU; nvidia-cutlass-dsl 4.8 here, 4.3.5 on the lent
    GPU, where tests/gpu runs the kernels): each fill mode traces and
    compiles for sm_90a with each cache policy (the lab's forms:
    tests/test_lab_kernels.py)."""
    pytest.importorskip("cutlass", reason="needs nvidia-cutlass-dsl: pip install -e '.[gpu]'")
    from extras import assert_fill_kernels_compile
    assert_fill_kernels_compile(mode, shape, ("evict_last", "evict_first"))


@pytest.mark.parametrize("mode, shape", [
    ("copy", {"grid": 66, "threads": 32, "chunk": 32768, "stages": 4}),
    ("load", {"grid": 1056, "threads": 128, "chunk": 128}),
    ("bulk", {}),
])
def test_every_fill_mode_compiles_for_sm120(mode, shape):
    """Issue 32: the users' RTX PRO 6000 (sm_120): each fill mode, in the
    shape ``runtime.kernel.fit_spec`` gives it under the SM120's limits
    (``extras.SM120``: the copy shape's 4 x 32 KiB stages become 3), traces
    and compiles for sm_120a with each cache policy (compile-only: an sm_120a
    cubin does not load on the lent sm_90 GPU)."""
    from extras import SM120
    _compile_fitted(mode, shape, SM120, "sm_120a")


def _compile_fitted(mode, shape, limits, arch):
    """Compile ``mode`` for ``arch`` in the shape ``fit_spec`` gives it under
    ``limits`` (a copy shape that does not fit gets fewer stages)."""
    pytest.importorskip("cutlass", reason="needs nvidia-cutlass-dsl: pip install -e '.[gpu]'")
    from extras import assert_fill_kernels_compile
    from l2sched.runtime import kernel as K
    if mode == "copy":
        fitted = K.fit_spec(K.KernelSpec(mode, shape["grid"], shape["threads"], shape["chunk"],
                                         shape["stages"]), limits)
        assert fitted is not None and fitted.smem_bytes <= limits.smem_per_block_optin_bytes
        assert fitted.stages < shape["stages"]
        shape = {**shape, "chunk": fitted.chunk, "stages": fitted.stages}
    assert_fill_kernels_compile(mode, shape, ("evict_last", "evict_first"), arch=arch)



@pytest.mark.parametrize("mode, shape", [
    ("copy", {"grid": 66, "threads": 32, "chunk": 32768, "stages": 4}),
    ("load", {"grid": 1056, "threads": 128, "chunk": 128}),
    ("bulk", {}),
])
def test_every_fill_mode_compiles_for_gb10(mode, shape):
    """Issue 45: DGX Spark's GB10 (sm_121): each fill mode, fitted to the
    shipped gb10 profile's shared memory per block (the copy shape's
    4 x 32 KiB stages become 3), traces and compiles for sm_121a with each
    cache policy (compile-only; benchmarks/results/compile-arch-2026-12-05)."""
    from l2sched.device import load_device
    gb10 = load_device("gb10").limits
    assert gb10 is not None and gb10.compute_capability == (12, 1)
    _compile_fitted(mode, shape, gb10, "sm_121a")

def test_kernel_spec_is_checked_and_keys_the_cache():
    from l2sched.device.limits import DeviceLimits
    from l2sched.runtime import kernel as K
    # the H200's limits (227 KiB per block, CUDA C Programming Guide, 9.0):
    # 4 x 64 KiB + barriers does not fit; no limit is assumed without them
    h200 = DeviceLimits(232_448, 132, 62_914_560, 39_321_600, (9, 0), "test")
    with pytest.raises(ValueError, match="copy mode"):
        K.KernelSpec("copy", chunk=65536, stages=4).check(h200)
    assert K.KernelSpec("copy", chunk=65536, stages=4).check().stages == 4
    with pytest.raises(ValueError, match="unknown fill mode"):
        K.KernelSpec("dma").check()
    with pytest.raises(ValueError, match="multiple of 16"):
        K.KernelSpec(chunk=100).check()
    a = K.KernelSpec("load", 1056, 128, 128)
    assert a != K.KernelSpec("bulk", 1056, 128, 128)  # the mode is part of the key
    assert hash(a) == hash(K.KernelSpec("load", 1056, 128, 128))


# --- item 1: a reload hands the runtime a recompiled plan ---------------------

@pytest.mark.parametrize("backend", ["cuda", "dry-run"])
def test_item01_adopt_takes_a_plan_of_the_same_layout_only(backend):
    from dataclasses import replace

    plan = _plan()
    rt = make_runtime(plan, backend)
    rt.set_rows(0, [(4096, 4096)])
    again = replace(plan, schedule="t2", max_tokens=8)
    assert rt.adopt(again)
    assert rt.plan is again and rt.rows == [[], [], []]
    assert rt.index_of(again.issues[1]) == 1
    if backend == "cuda":
        assert rt.rows is rt.table.rows and rt.table.dirty == {0, 1, 2}
    other = replace(plan, issues=plan.issues[:2])
    assert not rt.adopt(other) and rt.plan is again
    fewer = replace(plan, issues=(plan.issues[0], replace(
        plan.issues[1], ranges=plan.issues[1].ranges[:1]), plan.issues[2]))
    assert not rt.adopt(fewer)
    assert not rt.adopt(replace(plan, policy="evict_normal"))


def test_item01_retire_disables_for_good():
    rt = DryRunRuntime(_plan())
    rt.set_step(StepInfo(num_tokens=1))
    rt.retire()
    rt.retire()
    assert not rt.issue(0) and rt.stats.skipped == {"disabled": 1}


def test_issue31_switch_in_the_dry_run_backend():
    """The run-time switch: off, an eager step issues nothing (skip
    ``switched-off``) while a captured step still records every launch,
    moving 0 bytes (its kernels exit at once until switched on); on again,
    both move their bytes. No recapture is needed to switch."""
    plan = _plan()
    rt = DryRunRuntime(plan)
    assert rt.fills_on and rt.switch(False) and not rt.fills_on
    n = len(plan.issues)
    rt.set_step(StepInfo(num_tokens=1))
    for i in range(n):
        assert not rt.issue(i)
    rt.join()
    assert [e.op for e in rt.events] == ["skip"] * n
    assert {e.reason for e in rt.events} == {"switched-off"}
    assert rt.stats.skipped == {"switched-off": n}
    rt.clear()
    rt.set_step(StepInfo(num_tokens=1, graph_mode="full", capturing=True))
    for i in range(n):
        assert rt.issue(i)
    rt.join()
    launches = [e for e in rt.events if e.op == "launch"]
    assert len(launches) == n and all(e.nbytes == 0 and e.reason == "switched-off"
                                      for e in launches)
    assert rt.events[-1].op == "join"
    rt.clear()
    assert rt.switch(True)
    for step in (StepInfo(num_tokens=1), StepInfo(num_tokens=1, graph_mode="full",
                                                  capturing=True)):
        rt.set_step(step)
        for i in range(n):
            assert rt.issue(i)
        rt.join()
    launches = [e for e in rt.events if e.op == "launch"]
    assert len(launches) == 2 * n
    assert sum(e.nbytes for e in launches) == 2 * sum(wi.nbytes for wi in plan.issues)
    assert "switched-off" not in {e.reason for e in launches}
