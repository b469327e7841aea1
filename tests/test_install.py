"""Installer on CPU: install/remove round trip with exact restoration, refusal of
a second installation into a held slot, lazy binding and rebinding, range
clamping (property test on non-contiguous views), and dry-run order."""

import dataclasses

import pytest
from extras import TORCH_MISSING

torch = pytest.importorskip("torch", reason=TORCH_MISSING)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st
from tiny_modules import Proj  # noqa: E402
from torch import nn  # noqa: E402

from l2sched.compiler.plan import ByteRange, Plan, WindowIssue  # noqa: E402
from l2sched.errors import L2sInstallError
from l2sched.runtime.dry_run import DryRunRuntime
from l2sched.runtime.gate import StepInfo  # noqa: E402
from l2sched.runtime.install import (  # noqa: E402
    HookSite,
    clamp_range,
    install,
    storage_span_elems,
    tensor_row,
)
from l2sched.units import ALIGN


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.in_proj = Proj(d, d)
        self.o_proj = Proj(d, d)

    def forward(self, x):
        y = self.in_proj(x)
        if not hasattr(self, "w_uk"):
            self.w_uk = self.in_proj.weight.detach().t()  # created at first forward
        return self.o_proj(y)


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.self_attn = Attn(d)
        self.mlp = Proj(d, d)
        self.register_buffer("scale", torch.ones(d))

    def forward(self, x):
        return self.mlp(self.self_attn(x)) * self.scale


SITES = {
    "layer.entry": HookSite("", "forward_pre"),
    "attn.after_first_proj": HookSite("self_attn.in_proj", "forward_post"),
    "attn.pre_all_reduce": HookSite("self_attn.o_proj.quant_method", "wrap_method",
                                    "apply", position="after"),
    "moe.pre_all_reduce": HookSite("mlp.quant_method", "wrap_method", "apply",
                                   position="before"),
    "layer.exit": HookSite("", "forward_post"),
}


def _model(n=3, d=32):
    torch.manual_seed(0)
    return nn.ModuleList(Layer(d) for _ in range(n))


def _plan(n=3):
    issues = []
    for i in range(n):
        nxt = (i + 1) % n
        issues += [
            WindowIssue("A", "attn.after_first_proj", i, 1 << 20,
                        (ByteRange(i, "self_attn.o_proj.weight", 0, -1),)),
            WindowIssue("B", "attn.pre_all_reduce", i, 1 << 20,
                        (ByteRange(i, "mlp.weight", 0, 1000),
                         ByteRange(nxt, "self_attn.in_proj.weight", 16, 2048),
                         ByteRange(nxt, "scale", 0, -1))),
            WindowIssue("C", "moe.pre_all_reduce", i, 1 << 20,
                        (ByteRange(nxt, "self_attn.w_uk", 0, -1, lazy=True),)),
        ]
    issues.append(WindowIssue("D", "layer.exit", n - 1, 1 << 20,
                              (ByteRange(0, "self_attn.in_proj.weight", 0, 4096),)))
    return Plan(schedule="t", model="toy", device="h200", tp=1, tp_rank=0, ep=False,
                policy="evict_last", max_tokens=256, set_aside=0, num_layers=n,
                issues=tuple(issues))


def _snapshot(layers):
    snap = []
    for layer in layers:
        for name, m in layer.named_modules():
            snap.append((name, dict(m._forward_pre_hooks), dict(m._forward_hooks),
                         dict(m.__dict__)))
        for qm in (layer.self_attn.o_proj.quant_method, layer.mlp.quant_method,
                   layer.self_attn.in_proj.quant_method):
            snap.append(("qm", dict(qm.__dict__)))
    return snap


def test_install_remove_round_trip_restores_identity():
    layers = _model()
    # one instance-level attribute that already exists: must come back as is
    own = layers[1].mlp.quant_method.apply
    layers[1].mlp.quant_method.__dict__["apply"] = own
    before = _snapshot(layers)
    qm0 = layers[0].self_attn.o_proj.quant_method
    assert "apply" not in qm0.__dict__
    inst = install(layers, _plan(), SITES, DryRunRuntime(_plan()))
    assert "apply" in qm0.__dict__
    assert layers[0].self_attn.in_proj._forward_hooks
    inst.remove()
    assert "apply" not in qm0.__dict__
    assert layers[1].mlp.quant_method.__dict__["apply"] is own
    after = _snapshot(layers)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert a[0] == b[0]
        for da, db in zip(a[1:], b[1:]):
            assert da.keys() == db.keys()
            assert all(da[k] is db[k] for k in da)
    inst.remove()  # idempotent


def test_outputs_identical_and_dry_run_order():
    layers = _model()
    x = torch.randn(4, 32)
    ref = x
    for layer in layers:
        ref = layer(ref)
    plan = _plan()
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=4))
    with install(layers, plan, SITES, rt):
        y = x
        for layer in layers:
            y = layer(y)
    assert torch.equal(y, ref)
    ev = [(e.op, e.window, e.layer) for e in rt.events]
    want = []
    for i in range(3):
        want += [("fork", "A", i), ("launch", "A", i), ("fork", "B", i),
                 ("launch", "B", i), ("fork", "C", i), ("launch", "C", i)]
    want += [("fork", "D", 2), ("launch", "D", 2), ("join", "", -1)]
    assert ev == want


def test_double_install_refused_and_nothing_half_installed():
    layers = _model()
    plan = _plan()
    inst = install(layers, plan, SITES, DryRunRuntime(plan))
    snap = _snapshot(layers)
    with pytest.raises(L2sInstallError, match="already held"):
        install(layers, plan, SITES, DryRunRuntime(plan))
    after = _snapshot(layers)
    assert all(a[0] == b[0] for a, b in zip(snap, after))
    for a, b in zip(snap, after):
        for da, db in zip(a[1:], b[1:]):
            assert da.keys() == db.keys()
    inst.remove()
    inst2 = install(layers, plan, SITES, DryRunRuntime(plan))  # free again
    inst2.remove()


def test_missing_site_and_bad_path_refused():
    layers = _model()
    plan = _plan()
    with pytest.raises(L2sInstallError, match="no HookSite"):
        install(layers, plan, {"layer.entry": SITES["layer.entry"]}, DryRunRuntime(plan))
    bad = dict(SITES, **{"layer.exit": HookSite("nope.mod", "forward_post")})
    with pytest.raises(L2sInstallError, match="has no 'nope.mod'"):
        install(layers, plan, bad, DryRunRuntime(plan))
    # nothing left behind
    install(layers, plan, SITES, DryRunRuntime(plan)).remove()


def test_lazy_bind_then_rebind_on_storage_change():
    layers = _model()
    plan = _plan()
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=1))
    inst = install(layers, plan, SITES, rt)
    x = torch.randn(2, 32)
    y = x
    for layer in layers:
        y = layer(y)
    # C of layer 0 wants layer 1's w_uk, created later in the same forward:
    # unresolved at its first firing, bound at the second forward.
    c0 = next(i for i, wi in enumerate(plan.issues) if wi.window == "C" and wi.layer == 0)
    assert rt.rows[c0] in ([], [(0, 0)])  # nothing to fill yet
    y = x
    for layer in layers:
        y = layer(y)
    w = layers[1].self_attn.w_uk
    assert rt.rows[c0] == [tensor_row(w, 0, -1)]
    assert rt.rows[c0][0][1] == 32 * 32 * 4
    a1 = next(i for i, wi in enumerate(plan.issues) if wi.window == "A" and wi.layer == 1)
    old = rt.rows[a1]
    # weight reload into new storage: rows follow
    layers[1].self_attn.o_proj.weight = nn.Parameter(torch.randn(32, 32))
    for layer in layers:
        x = layer(x)
    new = rt.rows[a1]
    assert new != old
    assert new == [(layers[1].self_attn.o_proj.weight.data_ptr(), 32 * 32 * 4)]
    inst.remove()


def test_bound_rows_are_clamped_and_aligned():
    layers = _model()
    plan = _plan()
    rt = DryRunRuntime(plan)
    inst = install(layers, plan, SITES, rt)
    inst.bind_all()
    b0 = next(i for i, wi in enumerate(plan.issues) if wi.window == "B" and wi.layer == 0)
    rows = rt.rows[b0]
    w = layers[0].mlp.weight
    assert rows[0] == (w.data_ptr(), 992)  # 1000 rounded down to 16
    nxt = layers[1].self_attn.in_proj.weight
    assert rows[1] == (nxt.data_ptr() + 16, 2048)
    assert rows[2] == (layers[1].scale.data_ptr(), 128)
    for a, n in rows:
        assert a % ALIGN == 0 and n % ALIGN == 0
    inst.remove()


def test_match_discriminates_double_firing_module():
    class Op(nn.Module):
        def forward(self, x, fn=None):
            return x

    class L(nn.Module):
        def __init__(self):
            super().__init__()
            self.op = Op()
            self.fn_a, self.fn_b = object(), object()
            self.w = nn.Parameter(torch.randn(64))

        def forward(self, x):
            x = self.op(x, fn=self.fn_a)
            return self.op(x, fn=self.fn_b)

    layers = nn.ModuleList([L()])
    plan = Plan(schedule="t", model="toy", device="h200", tp=1, tp_rank=0, ep=False,
                policy="evict_last", max_tokens=8, set_aside=0, num_layers=1,
                issues=(WindowIssue("A", "p1", 0, 1, (ByteRange(0, "w", 0, -1),)),
                        WindowIssue("B", "p2", 0, 1, (ByteRange(0, "w", 0, 64),))))
    sites = {"p1": HookSite("op", "forward_pre",
                            match=lambda layer, a, kw: kw.get("fn") is layer.fn_a),
             "p2": HookSite("op", "forward_pre",
                            match=lambda layer, a, kw: kw.get("fn") is layer.fn_b)}
    rt = DryRunRuntime(plan)
    with install(layers, plan, sites, rt) as inst:
        assert inst.slots == 2  # one composed pre-hook + the join
        layers[0](torch.ones(3))
    assert [(e.op, e.window) for e in rt.events] == [
        ("fork", "A"), ("launch", "A"), ("fork", "B"), ("launch", "B"), ("join", "")]


# --- clamping ---------------------------------------------------------------

def test_storage_span():
    t = torch.zeros(6, 8)
    assert storage_span_elems(t.shape, t.stride()) == 48
    v = t[:, ::2]
    assert storage_span_elems(v.shape, v.stride()) == 1 + 5 * 8 + 3 * 2
    assert storage_span_elems((0, 4), (4, 1)) == 0
    assert clamp_range(0x1003, 100, 0, -1) == (0x1010, 80)
    assert clamp_range(0x1000, 64, 100, 16) == (0, 0)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(1, 12), cols=st.integers(1, 12),
    r0=st.integers(0, 3), c0=st.integers(0, 3),
    rs=st.integers(1, 3), cs=st.integers(1, 3),
    transpose=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.int8, torch.float64]),
    offset=st.integers(0, 600), nbytes=st.integers(-1, 900),
)
def test_rows_never_cross_storage(rows, cols, r0, c0, rs, cs, transpose, dtype,
                                  offset, nbytes):
    base = torch.zeros(rows + 4, cols + 4, dtype=dtype)
    v = base[r0:r0 + rows * rs:rs, c0:c0 + cols * cs:cs]
    if transpose:
        v = v.t()
    addr, n = tensor_row(v, offset, nbytes)
    st_ = base.untyped_storage()
    s_lo, s_hi = st_.data_ptr(), st_.data_ptr() + st_.nbytes()
    span = storage_span_elems(v.shape, v.stride()) * v.element_size()
    v_lo = v.data_ptr()
    if n == 0:
        assert addr == 0
        return
    assert addr % 16 == 0 and n % 16 == 0 and n > 0
    # inside the storage, inside the view's span, inside the requested range
    assert s_lo <= addr and addr + n <= s_hi
    assert v_lo <= addr and addr + n <= v_lo + span
    assert addr >= v_lo + offset
    if nbytes >= 0:
        assert addr + n <= v_lo + offset + nbytes
    # maximal: no further 16-byte block fits
    lo = v_lo + offset
    hi = min(v_lo + span, s_hi, v_lo + offset + nbytes if nbytes >= 0 else 1 << 62)
    assert addr - 16 < lo and addr + n + 16 > hi


def test_per_layer_joins_keep_the_side_stream_inside_each_layer():
    """``join_on=[layers...]``: a join at the end of every layer, before any
    issue hooked on that layer's exit (which is joined at the next layer's
    end), and after them on the last layer, so the forward ends joined."""
    layers = _model()
    plan = _plan()
    plan = dataclasses.replace(plan, issues=plan.issues + (
        WindowIssue("E", "layer.exit", 1, 1 << 20,
                    (ByteRange(2, "self_attn.in_proj.weight", 0, 4096),)),))
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=4))
    with install(layers, plan, SITES, rt, join_on=list(layers)):
        y = torch.randn(4, 32)
        for layer in layers:
            y = layer(y)
    ev = [(e.op, e.window, e.layer) for e in rt.events if e.op != "fork"]
    per_layer = [[("launch", w, i) for w in "ABC"] for i in range(3)]
    want = (per_layer[0] + [("join", "", -1)]
            + per_layer[1] + [("join", "", -1), ("launch", "E", 1)]
            + per_layer[2] + [("launch", "D", 2), ("join", "", -1)])
    assert ev == want
