"""Issue 43: hooked modules replaced after install (``Installation.follow``,
``runtime.slots.follow``), on small CPU module trees (tests/test_install.py's
layers): a wrapper that keeps the original as ``base_layer`` takes the
module hooks (whether it calls the original module or only its quant
method), a method wrapper on a wrapped object stays, a module replaced
outright loses its hooks (reported, taken out), a replaced join module is
reported as the join, ranges re-resolve their tensors, and ``remove()``
still restores every object. vLLM's own LoRA wrappers on the real
Qwen3-MoE tree: tests/test_vllm_lora.py."""

import pytest
from extras import TORCH_MISSING

torch = pytest.importorskip("torch", reason=TORCH_MISSING)
from test_install import SITES, _model, _plan  # noqa: E402
from tiny_modules import Proj  # noqa: E402
from torch import nn  # noqa: E402

from l2sched.runtime.dry_run import DryRunRuntime  # noqa: E402
from l2sched.runtime.gate import StepInfo  # noqa: E402
from l2sched.runtime.install import install, tensor_row  # noqa: E402


class Forwards(nn.Module):
    """Forwards attribute misses to ``base_layer``, as vLLM's
    ``BaseLayerWithLoRA`` does (``lora/layers/base.py``)."""

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["base_layer"], name)


class LoraLike(Forwards):
    """Like vLLM's ``RowParallelLinearWithLoRA``: keeps the original as
    ``base_layer`` and runs its GEMM through ``base_layer.quant_method``,
    never calling the original module (so its module hooks never fire)."""

    def __init__(self, base):
        super().__init__()
        self.base_layer = base
        self.delta = nn.Parameter(torch.zeros_like(base.weight))

    def forward(self, x):
        out = self.base_layer.quant_method.apply(self.base_layer, x)
        return out + x @ self.delta.t()


class CallsBase(LoraLike):
    """Like vLLM's ``ReplicatedLinearWithLoRA``: calls ``base_layer(x)``."""

    def forward(self, x):
        return self.base_layer(x) + x @ self.delta.t()


class Wrapped(Forwards):
    """A wrapper of a whole decoder layer that runs the layer's forward."""

    def __init__(self, base):
        super().__init__()
        self.base_layer = base

    def forward(self, x):
        return self.base_layer.forward(x)


def _fired(rt) -> list[tuple]:
    return [(e.window, e.layer) for e in rt.events if e.op == "fork"]


def _forward(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def _installed():
    """tests/test_install.py's layers and plan installed with a dry-run
    runtime, one forward run: ``(layers, plan, runtime, installation,
    input, the (window, layer) fired in that forward)``."""
    plan, layers, x = _plan(), _model(), torch.randn(2, 32)
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=2))
    inst = install(layers, plan, SITES, rt)
    _forward(layers, x)
    want = _fired(rt)
    assert len(want) == len(plan.issues)
    rt.clear()
    return layers, plan, rt, inst, x, want


@pytest.mark.parametrize("wrapper", [LoraLike, CallsBase])
def test_a_wrapper_takes_the_module_hooks(wrapper):
    layers, plan, rt, inst, x, want = _installed()
    originals = [layer.self_attn.in_proj for layer in layers]
    for layer in layers:  # window A fires at in_proj's forward hook
        layer.self_attn.in_proj = wrapper(layer.self_attn.in_proj)
    _forward(layers, x)
    if wrapper is LoraLike:  # the original's hook no longer fires
        assert [w for w in _fired(rt) if w[0] == "A"] == []
    rt.clear()
    changes = inst.follow(layers)
    assert [(c.layer, c.path, c.old, c.new, c.action, c.join) for c in changes] == [
        (i, "self_attn.in_proj", "Proj", wrapper.__name__, "moved", False)
        for i in range(3)]
    assert [plan.issues[i].window for c in changes for i in c.issues] == ["A"] * 3
    _forward(layers, x)
    assert _fired(rt) == want  # every issue once, in the same order
    assert all(not o._forward_hooks for o in originals)
    assert inst.follow(layers) == []  # nothing new
    inst.remove()
    assert all(not layer.self_attn.in_proj._forward_hooks for layer in layers)
    rt.clear()
    _forward(layers, x)
    assert rt.events == []


def test_a_method_wrapper_stays_on_a_wrapped_object():
    """Window C wraps ``mlp.quant_method.apply``; wrapping ``mlp`` leaves
    the quant method where it was, and the wrapper still calls it."""
    layers, plan, rt, inst, x, want = _installed()
    for layer in layers:
        layer.mlp = LoraLike(layer.mlp)
    assert inst.follow(layers) == []  # mlp.quant_method resolves to the same object
    _forward(layers, x)
    assert _fired(rt) == want
    inst.remove()


def test_a_module_replaced_outright_loses_its_hooks():
    layers, plan, rt, inst, x, want = _installed()
    old = layers[1].self_attn.o_proj
    layers[1].self_attn.o_proj = Proj(32, 32)  # window B: o_proj.quant_method.apply
    changes = inst.follow(layers)
    assert [(c.layer, c.path, c.kind, c.attribute, c.old, c.new, c.action)
            for c in changes] == [(1, "self_attn.o_proj.quant_method", "wrap_method",
                                   "apply", "QuantMethod", "QuantMethod", "lost")]
    assert "base_layer" in changes[0].reason
    assert [(plan.issues[i].window, plan.issues[i].layer) for i in changes[0].issues] \
        == [("B", 1)]
    assert "apply" not in old.quant_method.__dict__  # taken out, not left behind
    _forward(layers, x)
    assert _fired(rt) == [w for w in want if w != ("B", 1)]
    # window A of layer 1 fetches o_proj.weight: it binds the new module's
    a1 = next(i for i, wi in enumerate(plan.issues)
              if wi.window == "A" and wi.layer == 1)
    assert rt.rows[a1] == [tensor_row(layers[1].self_attn.o_proj.weight, 0, -1)]
    inst.remove()


def test_a_path_gone_is_lost():
    layers, plan, rt, inst, x, want = _installed()
    del layers[2].self_attn.in_proj
    changes = inst.follow(layers)
    assert [(c.layer, c.path, c.new, c.action, c.reason) for c in changes] == [
        (2, "self_attn.in_proj", None, "lost", "the path no longer resolves")]
    inst.remove()


def test_the_join_layer_replaced():
    """The last decoder layer wrapped: its exit hooks (window D and the
    join) move to the wrapper; replaced outright: the join is reported."""
    layers, plan, rt, inst, x, want = _installed()
    layers[2] = Wrapped(layers[2])
    changes = inst.follow(layers)
    assert [(c.path, c.kind, c.action, c.join) for c in changes] == [
        ("", "forward_post", "moved", True)]  # paths through it resolve as before
    _forward(layers, x)
    assert [e.op for e in rt.events][-1] == "join" and _fired(rt) == want
    layers[2] = _model()[2]
    changes = inst.follow(layers)
    assert any(c.join and c.action == "lost" for c in changes)
    inst.remove()
