"""GPU tests (H200 or any CUDA device with compute capability >= 9.0).

A captured FULL CUDA graph with the side stream replays correctly; outputs of a
small module tree are bitwise identical with and without the plan (eager and
graph); a PIECEWISE capture skips prefetch cleanly; the fill kernel runs over
odd tables; the persisting-L2 set-aside is clamped and read back."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from extras import TORCH_MISSING  # noqa: E402

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
from l2sched.runtime.set_aside import apply_set_aside  # noqa: E402

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


def test_kernel_runs_over_odd_tables():
    kern = K.get_kernel(0)
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
    ("evict_last", "bulk", "torch")])
def test_eager_bitwise_identical(policy, mode, sync):
    layers = _model()
    x = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x)
    ref2 = _fwd(layers, x)
    plan = _plan(len(layers), policy=policy)
    rt = CudaRuntime(plan, mode=mode, sync=sync)
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


@pytest.mark.parametrize("sync", ["driver", "torch"])
def test_full_graph_capture_with_side_stream_replays(sync):
    layers = _model()
    plan = _plan(len(layers))
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    refs = []
    xs = [torch.randn(8, D, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    for x in xs:
        refs.append(_fwd(layers, x))
    rt = CudaRuntime(plan, sync=sync)
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


def test_set_aside_clamped_and_read_back():
    from cuda.bindings import driver as drv
    dev = drv.cuDeviceGet(0)[1]
    dmax = drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev)[1]
    got = apply_set_aside(0, 1 << 40)  # far above the device max: clamped
    assert got is not None and 0 < got <= dmax
    assert apply_set_aside(0, 123) == got  # once per device
    # leave the process's limit as found for the other tests
    drv.cuCtxSetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
