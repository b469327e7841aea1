"""GPU tests (H200 or any CUDA device with compute capability >= 9.0).

A captured FULL CUDA graph with the side stream replays correctly; outputs of a
small module tree are bitwise identical with and without the plan (eager and
graph); a PIECEWISE capture skips prefetch cleanly; the fill kernel runs over
odd tables; the persisting-L2 set-aside is clamped and read back."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from extras import GPU_MISSING, TORCH_MISSING  # noqa: E402

torch = pytest.importorskip("torch", reason=TORCH_MISSING)

_ok = torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _ok, reason="needs a CUDA GPU with sm >= 9.0 "
                                 "(and pip install -e '.[gpu]')")]

from tiny_modules import Proj as _Proj  # noqa: E402
from torch import nn  # noqa: E402

from l2sched.compiler.plan import ByteRange, Plan, WindowIssue  # noqa: E402
from l2sched.runtime import kernel as K  # noqa: E402
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.gate import StepInfo
from l2sched.runtime.install import HookSite, install  # noqa: E402
from l2sched.runtime.set_aside import apply_set_aside, release_set_aside  # noqa: E402

D = 1024


def Proj(n, m):
    """bf16 ``tiny_modules.Proj`` scaled to unit-ish outputs."""
    return _Proj(n, m, dtype=torch.bfloat16, scale=n ** -0.5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = Proj(D, 2 * D)
        self.o_proj = Proj(2 * D, D)
        self.mlp = Proj(D, D)

    def forward(self, x):
        h = torch.relu(self.in_proj(x))
        if not hasattr(self, "w_lazy"):
            self.w_lazy = self.in_proj.weight.detach()[:, ::2]  # strided, lazy
        x = x + self.o_proj(h)
        return x + self.mlp(x)


SITES = {
    "attn.after_first_proj": HookSite("in_proj", "forward_post"),
    "attn.pre_all_reduce": HookSite("o_proj.quant_method", "wrap_method", "apply",
                                    position="after"),
    "layer.exit": HookSite("", "forward_post"),
}


def _plan(n, max_tokens=64, policy="evict_last"):
    issues = []
    for i in range(n):
        nxt = (i + 1) % n
        issues += [
            WindowIssue("A", "attn.after_first_proj", i, 1 << 24,
                        (ByteRange(i, "o_proj.weight", 0, -1),)),
            WindowIssue("B", "attn.pre_all_reduce", i, 1 << 24,
                        (ByteRange(i, "mlp.weight", 0, -1),
                         ByteRange(nxt, "in_proj.weight", 4096, 1 << 20),
                         ByteRange(nxt, "w_lazy", 0, -1, lazy=True))),
        ]
    issues.append(WindowIssue("C", "layer.exit", n - 1, 1 << 24,
                              (ByteRange(0, "in_proj.weight", 0, -1),)))
    return Plan(schedule="gpu-test", model="toy", device="h200", tp=1, tp_rank=0,
                ep=False, policy=policy, max_tokens=max_tokens, set_aside=0,
                num_layers=n, issues=tuple(issues))


def _model(n=4):
    torch.manual_seed(1)
    return nn.ModuleList(Layer() for _ in range(n)).cuda()


def _fwd(layers, x):
    for layer in layers:
        x = layer(x)
    return x


COPY = {"mode": "copy", "grid": 66, "threads": 32, "chunk": 32768, "stages": 4}


@pytest.mark.parametrize("shape", [{}, COPY, dict(COPY, grid=3, stages=2, chunk=4096),
                                   {"mode": "load", "grid": 64, "threads": 128,
                                    "chunk": 128}])
def test_kernel_runs_over_odd_tables(shape):
    kern = K.get_kernel(0, **shape)
    assert kern is not None, K.disabled_reason()
    buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    p = buf.data_ptr()
    rows = [(p, 16), (p + 16, 16384 * 3 + 32), (p + (1 << 20), 0), (p + 4096, 8 << 19),
            (p + 7, 100)]  # the last one is masked to 16 B by the kernel
    table = torch.tensor(rows, dtype=torch.int64, device="cuda")
    s = torch.cuda.Stream()
    for b, e in [(0, 5), (0, 0), (2, 3), (4, 5)]:
        kern.launch(table.data_ptr(), b, e, s.cuda_stream)
    s.synchronize()
    torch.cuda.synchronize()


@pytest.mark.parametrize("policy,mode,sync", [
    ("evict_last", "bulk", "auto"), ("evict_normal", "bulk", "auto"),
    ("evict_first", "bulk", "auto"), ("evict_last", "load", "auto"),
    ("evict_last", "bulk", "torch"), ("evict_last", "copy", "auto"),
    ("evict_normal", "copy", "torch")])
def test_eager_bitwise_identical(policy, mode, sync):
    layers = _model()
    x = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x)
    ref2 = _fwd(layers, x)
    plan = _plan(len(layers), policy=policy)
    rt = CudaRuntime(plan, sync=sync, **(COPY if mode == "copy" else {"mode": mode}))
    rt.set_step(StepInfo(num_tokens=8))
    with install(layers, plan, SITES, rt):
        outs = [_fwd(layers, x) for _ in range(3)]
    torch.cuda.synchronize()
    assert torch.equal(ref, ref2)
    for o in outs:
        assert torch.equal(o, ref)
    assert rt.enabled, K.disabled_reason()
    assert rt.stats.issued == 3 * len(plan.issues)
    assert rt.stats.joined == 3
    # the lazy strided view got bound on the second forward
    b0 = rt.rows[1]
    assert b0[2][1] > 0 and all(a % 16 == 0 and n % 16 == 0 for a, n in b0)


@pytest.mark.parametrize("sync,mode", [("driver", "bulk"), ("torch", "bulk"),
                                       ("driver", "copy"), ("driver", "load")])
def test_full_graph_capture_with_side_stream_replays(sync, mode):
    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    refs = []
    xs = [torch.randn(8, D, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    for x in xs:
        refs.append(_fwd(layers, x))
    rt = CudaRuntime(plan, sync=sync, **(COPY if mode == "copy" else {"mode": mode}))
    with install(layers, plan, SITES, rt):
        # warm-up forwards right before capture: bind, but no fills
        rt.set_step(StepInfo(num_tokens=8, graph_mode="full", warmup=True))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                _fwd(layers, x_static)
        torch.cuda.current_stream().wait_stream(s)
        assert rt.stats.issued == 0 and rt.stats.skipped.get("warmup", 0) > 0
        rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_static = _fwd(layers, x_static)
        assert rt.stats.issued == len(plan.issues)  # captured, not skipped
        assert rt.sync == sync
    # the installation is gone; the graph still holds the fills
    for _ in range(3):
        for x, ref in zip(xs, refs):
            x_static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(y_static, ref)


def test_bound_launch_ffi_and_generic_over_odd_tables():
    # PrefetchKernel.bind (the runtime's launch) on both launch paths
    buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    p = buf.data_ptr()
    rows = [(p, 16), (p + 16, 16384 * 3 + 32), (p + (1 << 20), 0), (p + 7, 100)]
    table = torch.tensor(rows, dtype=torch.int64, device="cuda")
    s = torch.cuda.Stream()
    paths = 0
    for ffi in (True, False):
        kern = K.get_kernel(0, ffi=ffi)
        if kern is None:
            continue
        paths += 1
        launch = kern.bind(table.data_ptr(), s.cuda_stream)
        for b, e in [(0, 4), (0, 0), (2, 3), (3, 4)]:
            launch(b, e)
    s.synchronize()
    assert paths >= 1, K.disabled_reason()


def _one_issue_plan():
    return Plan(schedule="gpu-order", model="toy", device="h200", tp=1, tp_rank=0,
                ep=False, policy="evict_last", max_tokens=64, set_aside=0, num_layers=1,
                issues=(WindowIssue("A", "x", 0, 1 << 20,
                                    (ByteRange(0, "w", 0, 1 << 20),)),))


@pytest.mark.parametrize("sync", ["driver", "torch"])
def test_fork_and_join_order_streams(sync):
    # fork: the side stream runs after the current stream's earlier work;
    # join: the current stream runs after everything on the side stream so
    # far (the done event is recorded at the join, not after each launch).
    w = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    rt = CudaRuntime(_one_issue_plan(), sync=sync)
    rt.set_step(StepInfo(num_tokens=1))
    assert rt.set_rows(0, [(w.data_ptr(), 1 << 20)]), K.disabled_reason()
    side = rt.side
    a = torch.zeros(1 << 16, device="cuda")
    b = torch.zeros_like(a)
    c = torch.zeros_like(a)
    for k in range(1, 4):
        torch.cuda._sleep(20_000_000)  # ~10 ms at 2 GHz: a race would show
        a.fill_(k)
        assert rt.issue(0)
        with torch.cuda.stream(side):  # after the fork: sees a == k
            b.copy_(a)
            torch.cuda._sleep(20_000_000)
            c.fill_(k)
        rt.join()
        d = c.clone()  # after the join: sees c == k
        torch.cuda.synchronize()
        assert torch.all(b == k) and torch.all(d == k), (sync, k)
    assert rt.stats.issued == 3 and rt.stats.joined == 3
    assert rt.stats.bytes_issued == 3 * (1 << 20)


def test_piecewise_capture_skips_and_captures_cleanly():
    layers = _model(2)
    plan = _plan(2)
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x_static)
    rt = CudaRuntime(plan)
    with install(layers, plan, SITES, rt):
        rt.set_step(StepInfo(num_tokens=8, graph_mode="piecewise"))
        _fwd(layers, x_static)  # eager, uncaptured piecewise batch: fills
        issued = rt.stats.issued
        assert issued == len(plan.issues)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = _fwd(layers, x_static)
        assert rt.stats.issued == issued
        assert rt.stats.skipped["piecewise-capture"] == len(plan.issues)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ref)


def test_gates_in_eager():
    layers = _model(2)
    plan = _plan(2, max_tokens=4)
    rt = CudaRuntime(plan)
    x = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    with install(layers, plan, SITES, rt):
        rt.set_step(StepInfo(num_tokens=8))
        _fwd(layers, x)
        rt.set_step(StepInfo(num_tokens=4, is_prefill=True))
        _fwd(layers, x)
    assert rt.stats.issued == 0
    assert rt.stats.skipped == {"too-many-tokens": len(plan.issues),
                                "prefill": len(plan.issues)}


def _limit_now():
    """The persisting-L2 limit of device 0's primary context (B)."""
    from cuda.bindings import driver as drv
    dev = drv.cuDeviceGet(0)[1]
    ctx = drv.cuDevicePrimaryCtxRetain(dev)[1]
    drv.cuCtxPushCurrent(ctx)
    try:
        return int(drv.cuCtxGetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE)[1])
    finally:
        drv.cuCtxPopCurrent()
        drv.cuDevicePrimaryCtxRelease(dev)


def test_item02_set_aside_applied_clamped_and_restored():
    """Issue 17 item 2 on the device: every request is applied (clamped to the
    device maximum), a later request of the same plan replaces the earlier,
    and withdrawing the last request restores the limit found before."""
    from cuda.bindings import driver as drv
    dev = drv.cuDeviceGet(0)[1]
    dmax = drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev)[1]
    torch.cuda.init()
    before = _limit_now()
    big = apply_set_aside(0, 1 << 40, "A", capturing=False)  # far above the max
    assert big is not None and 0 < big <= dmax and _limit_now() == big
    small = apply_set_aside(0, 8 << 20, "A", capturing=False)
    assert small is not None and small < big and _limit_now() == small
    other = apply_set_aside(0, -1, "B", capturing=False)  # the largest wins
    assert other == big
    assert release_set_aside(0, "B") == small
    assert release_set_aside(0, "A") == before and _limit_now() == before


def test_item02_runtime_close_restores_the_set_aside():
    """A plan's runtime requests its set-aside at prepare() and withdraws it
    at close() (the plugin closes it when the plan is removed)."""
    from dataclasses import replace

    before = _limit_now()
    rt = CudaRuntime(replace(_plan(2), set_aside=-1))
    assert rt.prepare()
    assert _limit_now() > 0
    rt.close()
    assert _limit_now() == before


def test_bench_set_aside_isolation_on_the_device():
    """Each arm's replays run with its own set-aside (``bench.isolation``):
    the driver resets persisting lines without error, the limit follows the
    arm, and closing restores the limit found before."""
    from l2sched.bench.isolation import SetAsideIsolation
    from l2sched.runtime.set_aside import reset_persisting_lines

    torch.cuda.init()
    before = _limit_now()
    assert reset_persisting_lines(0)
    iso = SetAsideIsolation({"none": 0, "fit": -1}, device=0)
    iso.before("fit")
    assert _limit_now() > 0
    iso.before("none")
    assert _limit_now() == before
    iso.before("fit")
    iso.close()
    assert _limit_now() == before
    assert iso.record()["resets"] == 3 and iso.record()["refused"] == 0


def _table_rows(rt):
    """The device table's rows as ``(address, bytes)`` per issue."""
    t = rt.table._table.cpu().tolist()
    return [[tuple(t[r]) for r in range(b, e)]
            for b, e in zip(rt.table.offsets, rt.table.offsets[1:])]


def test_item01_captured_table_follows_a_reload_before_the_next_replay():
    """Issue 17 item 1 on the device: a FULL graph is captured with the
    plan; a reload moves a weight's storage; the reload path (the plugin's:
    hooks out, ``runtime.adopt`` of the recompiled plan, a new installation,
    every row bound at once) rewrites the device table before any replay, so
    the graph's fills read the new addresses; outputs stay bitwise equal."""
    from dataclasses import replace

    from l2sched.runtime.install import tensor_row

    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    rt = CudaRuntime(plan)
    inst = install(layers, plan, SITES, rt)
    rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _fwd(layers, x_static)  # binds (eager fills)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y_static = _fwd(layers, x_static)
    table_ptr = rt.table.device_ptr
    # the reload: o_proj of layer 2 gets new storage
    w = layers[2].o_proj.weight
    old = w.data  # the graph's GEMM still reads it: keep it alive (vLLM
    w.data = old.clone()  # copies reloads into the old storage for that)
    assert w.data_ptr() != old.data_ptr()
    inst.remove()
    new_plan = replace(plan, schedule="gpu-test-reloaded")
    assert rt.adopt(new_plan)
    inst = install(layers, new_plan, SITES, rt)
    inst.bind_all()
    assert rt.flush()
    assert rt.table.device_ptr == table_ptr  # the graph's table
    i = next(k for k, wi in enumerate(new_plan.issues)
             if wi.window == "A" and wi.layer == 2)
    assert _table_rows(rt)[i][0] == tensor_row(w, 0, -1)
    ref = _fwd(layers, x_static.clone())
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_static, ref)
    inst.remove()
    rt.retire()
    assert all(r == (0, 0) for rows in _table_rows(rt) for r in rows)
    g.replay()  # a retired runtime's captured fills read a zeroed table
    torch.cuda.synchronize()


def test_copy_mode_lands_the_bytes_it_was_given():
    """The copy kernel's copies complete before it exits: right after it,
    an L2-hot re-read of the filled buffer is as fast as a hot read, and the
    buffer's contents are untouched (data is copied out, never written)."""
    kern = K.get_kernel(0, **COPY)
    assert kern is not None, K.disabled_reason()
    w = torch.randint(0, 1 << 30, (8 << 20,), dtype=torch.int32, device="cuda")  # 32 MiB
    before = w.clone()
    table = torch.tensor([[w.data_ptr(), w.numel() * 4]], dtype=torch.int64,
                         device="cuda")
    s = torch.cuda.current_stream()
    kern.launch(table.data_ptr(), 0, 1, s.cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(w, before)


def test_per_window_fill_kernels_in_one_runtime():
    """Issues with different fill kernels in one plan each launch their own
    kernel; outputs stay bitwise identical."""
    import dataclasses
    layers = _model()
    x = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x)
    plan = _plan(len(layers))
    kernels = {"A": "copy", "B": "load", "C": ""}
    plan = dataclasses.replace(plan, issues=tuple(
        dataclasses.replace(wi, kernel=kernels[wi.window]) for wi in plan.issues))
    from l2sched.device import FillMode
    fill = {"copy": FillMode("copy", 66, 32, 32768, 4, 3000.0, 1.0, 3.0),
            "load": FillMode("load", 264, 128, 128, 1, 3000.0, 1.0, 3.0),
            "bulk": FillMode("bulk", 264, 32, 16384, 1, 2000.0, 0.3, 3.0)}
    rt = CudaRuntime(plan, fill=fill, fill_default="bulk")
    assert {s.mode for s in rt.specs} == {"copy", "load", "bulk"}
    rt.set_step(StepInfo(num_tokens=8))
    with install(layers, plan, SITES, rt):
        outs = [_fwd(layers, x) for _ in range(2)]
    torch.cuda.synchronize()
    assert rt.enabled, K.disabled_reason()
    assert len(rt.kernels) == 3
    for o in outs:
        assert torch.equal(o, ref)


def test_kernel_times_measures_the_body_kernels_alone():
    """``TimingBench.kernel_times`` reports the body's own kernels: a 256 MiB
    in-place add behind the flush takes about what CUDA events around it
    say (within 15%, never more: events also hold the launch), and a body
    without a kernel of its own is an error."""
    from l2sched.bench.timing import TimingBench, stats

    b = TimingBench(torch, reps=7)
    x = torch.zeros(64 << 20, dtype=torch.float32, device="cuda")
    body = lambda: x.add_(1)  # noqa: E731
    body()
    cupti = stats(b.kernel_times(b.flush, body))["median"]
    events = stats(b.timed(b.flush, body)[1])["median"]
    assert 0.85 * events <= cupti <= events + 1.0, (cupti, events)
    with pytest.raises(RuntimeError, match="no kernel of its own"):
        b.kernel_times(b.flush, b.flush)


def _graph_shape(g) -> dict:
    """Of a torch CUDA graph captured with ``keep_graph=True``: its kernel
    nodes, the kernel nodes nothing depends on (leaves), and the edges from
    a kernel's launch-order port."""
    from cuda.bindings import runtime as cudart
    ok = cudart.cudaError_t.cudaSuccess
    graph = cudart.cudaGraph_t(init_value=g.raw_cuda_graph())
    err, _, n = cudart.cudaGraphGetNodes(graph, 0)
    assert err == ok, err
    err, nodes, n = cudart.cudaGraphGetNodes(graph, n)
    assert err == ok, err
    kernel = cudart.cudaGraphNodeType.cudaGraphNodeTypeKernel
    kernels = {int(nd) for nd in nodes[:n] if cudart.cudaGraphNodeGetType(nd)[1] == kernel}
    out = cudart.cudaGraphGetEdges(graph, 0)
    assert out[0] == ok, out[0]
    out = cudart.cudaGraphGetEdges(graph, out[-1])
    assert out[0] == ok, out[0]
    m = out[-1]
    sources = {int(f) for f in out[1][:m]}
    order = sum(1 for e in out[3][:m] if int(e.from_port) == 2)  # LAUNCH_ORDER
    return {"kernels": len(kernels), "leaves": len(kernels - sources), "launch_order": order}


@pytest.mark.parametrize("mode", ["copy", "bulk"])
def test_capture_launches_capture_every_fill_and_replay_bitwise(mode):
    """Issue 36: every ``capture_launch`` (``runtime.capture_nodes``) puts
    each fill of a FULL capture into the graph (as many kernel nodes as
    ``fork``), none is lost or held at the end, and replays are bitwise
    those of the model without a plan; the leaf choices leave every fill a
    kernel that nothing depends on, ``launch-order`` adds one launch-order
    edge per fill that has a next node (the plan's last fill follows the
    model's last kernel); eager forwards launch at once on the side stream."""
    shape = COPY if mode == "copy" else {"mode": mode}
    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    xs = [torch.randn(8, D, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
    refs = [_fwd(layers, x) for x in xs]
    graphs, shapes = {}, {}
    for launch in CudaRuntime.CAPTURE_LAUNCHES:
        rt = CudaRuntime(plan, capture_launch=launch, **shape)
        with install(layers, plan, SITES, rt):
            rt.set_step(StepInfo(num_tokens=8))
            for _ in range(2):  # eager: binds rows (the lazy one at the 2nd), launches at once
                _fwd(layers, x_static)
                assert rt._deferred == []
            torch.cuda.synchronize()
            before = rt.stats.issued
            rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
            try:
                g = torch.cuda.CUDAGraph(keep_graph=True)
            except TypeError:
                pytest.skip("torch.cuda.CUDAGraph has no keep_graph")
            with torch.cuda.graph(g):
                y_static = _fwd(layers, x_static)
            assert rt.enabled, launch
            assert rt._deferred == []  # the join launched the last one
            assert rt.stats.issued - before == len(plan.issues)
        graphs[launch] = (g, y_static)
        shapes[launch] = _graph_shape(g)
    fills = len(plan.issues)
    base = shapes["fork"]
    for launch, got in shapes.items():
        assert got["kernels"] == base["kernels"], (launch, shapes)
    assert base["leaves"] <= 2, shapes  # the model's last kernel (and the last fill)
    for launch in ("leaf", "leaf-deferred"):  # every fill (the model's last kernel has one)
        assert shapes[launch]["leaves"] >= fills, shapes
    # the plan's last fill follows the model's last kernel: no next node, no edge
    assert shapes["launch-order"]["launch_order"] == fills - 1, shapes
    assert shapes["fork"]["launch_order"] == 0
    for launch, (g, y_static) in graphs.items():
        if hasattr(g, "instantiate"):
            g.instantiate()
        for x, ref in zip(xs, refs):
            x_static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(y_static, ref), launch


def test_issue32_live_limits_are_the_devices():
    """Issue 32: the device limits are read from the GPU (the driver) and
    agree with torch's device properties; on the lent H200 they are the
    H200's: 232,448 B opt-in shared memory per block (227 KiB, CUDA C
    Programming Guide, compute capability 9.0), 132 SMs, L2 62,914,560 B,
    persisting-L2 maximum 39,321,600 B (the h200 profile). The shipped copy
    shape compiles and launches with the fitted (here: unchanged) shape."""
    from l2sched.device import load_device
    from l2sched.runtime.limits import read_device_limits
    lim = read_device_limits(0)
    p = torch.cuda.get_device_properties(0)
    assert lim.sm_count == p.multi_processor_count
    assert lim.l2_bytes == p.L2_cache_size
    assert lim.compute_capability == (p.major, p.minor)
    optin = getattr(p, "shared_memory_per_block_optin", None)
    if optin is not None:
        assert lim.smem_per_block_optin_bytes == optin
    if p.name == "NVIDIA H200":
        assert (lim.smem_per_block_optin_bytes, lim.sm_count, lim.l2_bytes,
                lim.persisting_l2_max_bytes, lim.compute_capability) == \
            (232_448, 132, 62_914_560, 39_321_600, (9, 0))
        h = load_device("h200").limits
        assert (h.smem_per_block_optin_bytes, h.sm_count, h.l2_bytes,
                h.persisting_l2_max_bytes) == (lim.smem_per_block_optin_bytes,
                                               lim.sm_count, lim.l2_bytes,
                                               lim.persisting_l2_max_bytes)
    fm = load_device("h200").fill_mode("copy")
    kern = K.get_kernel(0, mode="copy", grid=fm.grid, threads=fm.threads,
                        chunk=fm.chunk, stages=fm.stages)
    assert kern is not None, K.disabled_reason()
    assert kern.spec.smem_bytes <= lim.smem_per_block_optin_bytes
    x = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
    tab = torch.tensor([[x.data_ptr(), x.numel()]], dtype=torch.int64, device="cuda")
    kern.launch(tab.data_ptr(), 0, 1, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()


@pytest.mark.parametrize("shape", [COPY, {"mode": "load", "grid": 1056, "threads": 128,
                                          "chunk": 128}])
def test_issue31_switch_word_stops_a_fill_at_once(shape):
    """A fill kernel reads its switch word first: with the word 0 a 256 MiB
    fill (copy and load modes wait until the lines land) ends in a small
    fraction of the time it takes with the word 1."""
    from l2sched.runtime.switch import SwitchWord

    kern = K.get_kernel(0, **shape)
    assert kern is not None, K.disabled_reason()
    buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    table = torch.tensor([(buf.data_ptr(), buf.numel())], dtype=torch.int64,
                         device="cuda")
    word = SwitchWord(torch, 0)
    s = torch.cuda.Stream()
    launch = kern.bind(table.data_ptr(), s.cuda_stream, word.ptr)

    def timed(on):
        assert word.set(on)
        launch(0, 1)  # the first launch after a switch is not timed
        times = []
        for _ in range(9):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(s)
            launch(0, 1)
            b.record(s)
            b.synchronize()
            times.append(a.elapsed_time(b))
        return sorted(times)

    # the fastest switched-off launch against the median switched-on one: a
    # neighbour on the GPU (the full GPU suite) delayed single launches
    # (one failure in a full run, 2026-12-03; passed alone 4 times)
    on, off = timed(True), timed(False)
    assert off[0] < 0.25 * on[4], (on, off)


def test_issue31_switch_in_a_captured_graph_without_recapture():
    """One FULL graph captured with the plan's fills: replays with the switch
    off, on and off again stay bitwise equal to the reference; switching
    inside a capture is refused and changes nothing."""
    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    xs = [torch.randn(8, D, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
    refs = [_fwd(layers, x) for x in xs]
    rt = CudaRuntime(plan, **COPY)
    with install(layers, plan, SITES, rt):
        rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
        _fwd(layers, x_static)  # eager: binds every row
        torch.cuda.synchronize()
        assert rt.switch(False) and not rt.fills_on
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_static = _fwd(layers, x_static)
            refused = rt.switch(True)
        assert not refused and not rt.fills_on
        assert rt.stats.issued >= 2 * len(plan.issues) - 1  # captured while off
        issued = rt.stats.issued
        _fwd(layers, x_static)  # eager while off: nothing launched
        assert rt.stats.issued == issued and rt.stats.skipped.get("switched-off")
    for on in (False, True, False, True):
        assert rt.switch(on)
        for x, ref in zip(xs, refs):
            x_static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(y_static, ref)


def test_issue31_switch_word_made_under_inference_mode_switches_outside_it():
    """vLLM runs forwards under torch.inference_mode, where the runtime makes
    its switch word at the first fill; the switch RPC writes it outside that
    mode (an inference tensor would refuse the in-place write)."""
    from l2sched.runtime.switch import SwitchWord

    with torch.inference_mode():
        word = SwitchWord(torch, 0)
    assert word.set(False) and int(word.tensor.item()) == 0
    with torch.inference_mode():
        assert word.set(True)
    assert int(word.tensor.item()) == 1


def test_issue31_replay_ab_times_a_captured_graph_with_the_switch():
    """``replay.replay_ab`` on a real FULL graph holding the plan's fills,
    with the runtime's switch: every arm gets one positive time per round,
    the fills move bytes only in the ``on`` arm (runtime stats stay those of
    the capture: replays launch no Python), and outputs stay bitwise equal."""
    import types

    from l2sched.vllm.replay import replay_ab, time_replays

    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x_static)
    rt = CudaRuntime(plan, **COPY)
    with install(layers, plan, SITES, rt):
        rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
        _fwd(layers, x_static)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_static = _fwd(layers, x_static)
    desc = types.SimpleNamespace(cg_mode=types.SimpleNamespace(name="FULL"),
                                 num_tokens=8, num_reqs=8)
    runner = types.SimpleNamespace(cudagraph_manager=types.SimpleNamespace(
        graphs={_Hashable(desc): g}))
    states = []
    got = replay_ab(runner, [8], rounds=3, warmup=1, replays=5,
                    switch=lambda on: states.append(rt.switch(on)))
    assert all(states) and len(states) == 3 * 4
    assert sorted(got[8]) == ["off", "off2", "on"]
    assert all(len(v) == 3 and min(v) > 0 for v in got[8].values())
    assert time_replays(g, 3) > 0
    torch.cuda.synchronize()
    assert torch.equal(y_static, ref)


class _Hashable:
    """A descriptor stand-in that can key a dict (vLLM's are frozen
    dataclasses)."""

    def __init__(self, ns):
        self.__dict__.update(vars(ns))


# -- issue 48: programmatic-launch chains ----------------------------------------

#: ``x[i] += 1`` for ``i < n``, after ``griddepcontrol.wait`` (waits for the
#: kernel before it when launched with programmatic stream serialization).
#: Hand-written PTX (ISA 7.8, sm_90; checked with ptxas for sm_90 and sm_120),
#: so the test needs no compiler: the driver JIT-compiles it.
_PDL_PTX = b"""
.version 7.8
.target sm_90
.address_size 64

.visible .entry l2s_add_one(
	.param .u64 l2s_add_one_x,
	.param .u32 l2s_add_one_n
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<5>;

	griddepcontrol.wait;
	ld.param.u64 	%rd1, [l2s_add_one_x];
	ld.param.u32 	%r1, [l2s_add_one_n];
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mad.lo.s32 	%r5, %r2, %r3, %r4;
	setp.ge.u32 	%p1, %r5, %r1;
	@%p1 bra 	$L_done;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r5, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f1, [%rd4];
	add.f32 	%f2, %f1, 0f3F800000;
	st.global.f32 	[%rd4], %f2;
$L_done:
	ret;
}
"""


def _add_one_launcher():
    """``launch(x, pdl)``: ``x += 1`` (float32, contiguous) on the current
    stream by ``cuLaunchKernelEx``, with
    ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` when ``pdl``."""
    import ctypes

    drv = pytest.importorskip("cuda.bindings.driver", reason=GPU_MISSING)
    ok = drv.CUresult.CUDA_SUCCESS
    torch.zeros(1, device="cuda")  # the primary context is current
    err, mod = drv.cuModuleLoadData(_PDL_PTX + b"\0")
    if err != ok:
        pytest.skip(f"cannot load the PDL test kernel: {err}")
    err, fn = drv.cuModuleGetFunction(mod, b"l2s_add_one")
    assert err == ok, err

    def launch(x, pdl: bool):
        n = x.numel()
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (n + 127) // 128, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 128, 1, 1
        cfg.sharedMemBytes = 0
        cfg.hStream = drv.CUstream(torch.cuda.current_stream().cuda_stream)
        if pdl:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg.attrs, cfg.numAttrs = [attr], 1
        else:
            cfg.numAttrs = 0
        args = ((x.data_ptr(), n), (ctypes.c_void_p, ctypes.c_uint32))
        err, = drv.cuLaunchKernelEx(cfg, fn, args, 0)
        assert err == ok, err

    launch._module = mod  # keep the module loaded with the launcher
    return launch


@pytest.mark.parametrize("launch", ["fork", "deferred", "leaf"])
@pytest.mark.parametrize("pdl", [True, False])
def test_programmatic_launch_after_hook_is_detected(launch, pdl):
    """Issue 48: in a FULL capture, a fill whose hook is followed by a kernel
    launched with programmatic stream serialization is counted
    (``stats.programmatic_late``, ``pdl_watch.late``); the same graph with
    that kernel launched plainly is not (negative control). Detection stays
    on, the fill is captured and the graph replays the model's result."""
    add_one = _add_one_launcher()
    w = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    rt = CudaRuntime(_one_issue_plan(), capture_launch=launch)
    rt.set_step(StepInfo(num_tokens=1))
    assert rt.set_rows(0, [(w.data_ptr(), 1 << 20)]), K.disabled_reason()
    x = torch.arange(4096, dtype=torch.float32, device="cuda")

    def step():
        y = x * 2          # K: the hooked kernel
        assert rt.issue(0)  # the hook
        add_one(y, pdl)    # K+1
        rt.join()
        return y

    ref = step()  # eager: nothing asked of the driver
    torch.cuda.synchronize()
    assert torch.equal(ref, torch.arange(4096, dtype=torch.float32, device="cuda") * 2 + 1)
    assert rt.pdl_watch.checked == set() and rt.stats.programmatic_late == 0
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    rt.set_step(StepInfo(num_tokens=1, graph_mode="full", capturing=True))
    with torch.cuda.graph(g):
        y_static = step()
    rt.set_step(StepInfo(num_tokens=1))
    assert rt.enabled and rt.pdl_watch.on, (launch, pdl)
    assert rt.pdl_watch.checked == {0}
    assert rt.stats.programmatic_late == (1 if pdl else 0), (launch, pdl, rt.pdl_watch.late)
    x.copy_(torch.arange(4096, dtype=torch.float32, device="cuda") + 1)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_static, (torch.arange(4096, dtype=torch.float32, device="cuda") + 1)
                       * 2 + 1)
