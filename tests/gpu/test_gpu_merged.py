"""GPU tests of issue 48, one fill launch per hook point (H200 or any CUDA
device with compute capability >= 9.0, torch + nvidia-cutlass-dsl).

A plan with two windows at one hook point of every layer: eagerly, each
hook makes ONE launch of the fill kernel over the rows of both windows (the
device table holds both issues' rows, contiguously, in that span), and the
model's outputs are bitwise those without a plan; in a FULL capture every
``capture_launch`` records one fill kernel node per hook instead of one per
window (``merge_fills=False``), and the replays are bitwise the model's."""

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
from l2sched.runtime.cuda import CudaRuntime  # noqa: E402
from l2sched.runtime.gate import StepInfo  # noqa: E402
from l2sched.runtime.install import HookSite, install  # noqa: E402

D = 1024
COPY = {"mode": "copy", "grid": 66, "threads": 32, "chunk": 32768, "stages": 4}


def Proj(n, m):
    return _Proj(n, m, dtype=torch.bfloat16, scale=n ** -0.5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = Proj(D, 2 * D)
        self.o_proj = Proj(2 * D, D)
        self.mlp = Proj(D, D)

    def forward(self, x):
        x = x + self.o_proj(torch.relu(self.in_proj(x)))
        return x + self.mlp(x)


SITES = {
    "attn.pre_all_reduce": HookSite("o_proj.quant_method", "wrap_method", "apply",
                                    position="after"),
    "layer.exit": HookSite("", "forward_post"),
}


def _plan(n):
    """Per layer: windows A and B at ``attn.pre_all_reduce`` (one kernel),
    then C at ``layer.exit``; 3n issues in 2n launch groups."""
    issues = []
    for i in range(n):
        nxt = (i + 1) % n
        issues += [
            WindowIssue("A", "attn.pre_all_reduce", i, 1 << 24,
                        (ByteRange(i, "mlp.weight", 0, -1),
                         ByteRange(nxt, "in_proj.weight", 4096, 1 << 20))),
            WindowIssue("B", "attn.pre_all_reduce", i, 1 << 24,
                        (ByteRange(nxt, "o_proj.weight", 0, -1),)),
            WindowIssue("C", "layer.exit", i, 1 << 24,
                        (ByteRange(nxt, "in_proj.weight", 1 << 20, 1 << 20),)),
        ]
    return Plan(schedule="gpu-merged", model="toy", device="h200", tp=1, tp_rank=0,
                ep=False, policy="evict_last", max_tokens=64, set_aside=0,
                num_layers=n, issues=tuple(issues))


def _model(n=4):
    torch.manual_seed(1)
    return nn.ModuleList(Layer() for _ in range(n)).cuda()


def _fwd(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def _spy(rt, seen):
    """Wrap the runtime's bound side-stream launches (after ``prepare``) so
    every launch appends ``(issue, begin, end)`` to ``seen``."""
    def wrap(i, f):
        def launch(b, e):
            seen.append((i, b, e))
            return f(b, e)
        return launch
    rt._launch_of = [wrap(i, f) for i, f in enumerate(rt._launch_of)]


def test_two_windows_at_one_hook_are_one_launch_over_both_rows():
    layers = _model()
    n = len(layers)
    plan = _plan(n)
    x = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    ref = _fwd(layers, x)
    rt = CudaRuntime(plan, **COPY)
    assert rt.launch_groups == [g for i in range(n) for g in ((3 * i, 3 * i + 1), (3 * i + 2,))]
    rt.set_step(StepInfo(num_tokens=8))
    assert rt.prepare(), K.disabled_reason()
    seen = []
    _spy(rt, seen)
    with install(layers, plan, SITES, rt):
        outs = [_fwd(layers, x) for _ in range(2)]
    torch.cuda.synchronize()
    assert rt.enabled, K.disabled_reason()
    for o in outs:
        assert torch.equal(o, ref)
    off = rt.table.offsets
    want = [(g[0], off[g[0]], off[g[-1] + 1]) for g in rt.launch_groups]
    assert seen == want * 2  # one launch per hook point, over every row of its windows
    assert (rt.stats.issued, rt.stats.launches) == (2 * len(plan.issues), 2 * 2 * n)
    assert rt.stats.bytes_issued == 2 * sum(rt.table.nbytes)
    table = rt.table._table.cpu().tolist()
    for g in rt.launch_groups:
        rows = [tuple(r) for j in g for r in rt.table.rows[j]]
        assert len(rows) == off[g[-1] + 1] - off[g[0]]  # every range bound
        assert all(a and nb for a, nb in rows)
        assert [tuple(r) for r in table[off[g[0]]:off[g[-1] + 1]]] == rows
    # A's rows, then B's: both windows' bytes are in the one span
    a, b = rt.launch_groups[0]
    assert sum(nb for _, nb in rt.table.rows[a]) == D * D * 2 + (1 << 20)
    assert sum(nb for _, nb in rt.table.rows[b]) == 2 * D * D * 2


def _graph_kernels(g) -> int:
    """Kernel nodes of a torch CUDA graph captured with ``keep_graph=True``."""
    from cuda.bindings import runtime as cudart
    ok = cudart.cudaError_t.cudaSuccess
    graph = cudart.cudaGraph_t(init_value=g.raw_cuda_graph())
    err, _, n = cudart.cudaGraphGetNodes(graph, 0)
    assert err == ok, err
    err, nodes, n = cudart.cudaGraphGetNodes(graph, n)
    assert err == ok, err
    kernel = cudart.cudaGraphNodeType.cudaGraphNodeTypeKernel
    return sum(1 for nd in nodes[:n] if cudart.cudaGraphNodeGetType(nd)[1] == kernel)


@pytest.mark.parametrize("launch", CudaRuntime.CAPTURE_LAUNCHES)
def test_a_captured_step_has_one_fill_node_per_hook_point(launch):
    layers = _model()
    n = len(layers)
    plan = _plan(n)
    x_static = torch.randn(8, D, dtype=torch.bfloat16, device="cuda")
    xs = [torch.randn(8, D, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    refs = [_fwd(layers, x) for x in xs]
    kernels, graphs = {}, {}
    for merge in (True, False):
        rt = CudaRuntime(plan, capture_launch=launch, merge_fills=merge, **COPY)
        with install(layers, plan, SITES, rt):
            rt.set_step(StepInfo(num_tokens=8))
            _fwd(layers, x_static)  # eager: binds the rows
            torch.cuda.synchronize()
            before = (rt.stats.issued, rt.stats.launches)
            rt.set_step(StepInfo(num_tokens=8, graph_mode="full"))
            try:
                g = torch.cuda.CUDAGraph(keep_graph=True)
            except TypeError:
                pytest.skip("torch.cuda.CUDAGraph has no keep_graph")
            with torch.cuda.graph(g):
                y_static = _fwd(layers, x_static)
            assert rt.enabled, (launch, K.disabled_reason())
            assert rt._deferred == []
            assert rt.stats.issued - before[0] == len(plan.issues)
            assert rt.stats.launches - before[1] == (2 * n if merge else 3 * n)
        kernels[merge] = _graph_kernels(g)
        graphs[merge] = (g, y_static, rt)
    assert kernels[False] - kernels[True] == n, kernels  # one fewer fill per layer
    for merge, (g, y_static, _rt) in graphs.items():
        if hasattr(g, "instantiate"):
            g.instantiate()
        for x, ref in zip(xs, refs):
            x_static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(y_static, ref), (launch, merge)

