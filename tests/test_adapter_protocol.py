"""The model-adapter protocol: the GLM adapter honours ``ModelAdapter``, and
a toy model family (``tests/toy_adapter.py``), registered at run time,
goes through every stage: config validation, inventory (analytical and
live), ``check``/resolve of a ``model toy`` schedule (its own selectors
and hooks), lint, compile, and the dry-run install the vLLM plugin uses,
with no file outside tests/ naming it."""

import json

import pytest
from extras import TORCH_MISSING

from l2sched.compiler.compile import compile_plan, schedule_inventory
from l2sched.errors import L2sModelError, L2sSemanticError
from l2sched.lang.resolve import load_schedule_text
from l2sched.lint import run_lint
from l2sched.model.adapters import (
    DEFAULT_ADAPTER,
    ModelAdapter,
    adapter_for,
    adapter_names,
    get_adapter,
    register_adapter,
    unregister_adapter,
)
from l2sched.model.adapters.protocol import MEMBERS, missing_members
from l2sched.model.config import default_config, validate_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory
from toy_adapter import CONFIG, ToyAdapter, toy_model

TOY = """schedule toy_demo

model toy
device h200
tp 1

window A at toy.after_mix budget 1MB layers first {
    this ffn.w_in, ffn.w_out
}

window B at toy.before_experts budget 1MB layers experts {
    next norm.weight, mix.weight
}

window C at toy.entry budget 1MB layers experts {
    this ffn.router
}
"""

H = 64
W_IN = W_OUT = 2 * H * H * 4
MIX = H * H * 4
NORM = H * 4
ROUTER = 4 * H * 4


@pytest.fixture
def toy():
    register_adapter("toy", ToyAdapter())
    try:
        yield get_adapter("toy")
    finally:
        unregister_adapter("toy")


def test_shipped_adapters_honour_the_protocol():
    for name in adapter_names():
        ad = get_adapter(name)
        assert missing_members(ad) == []
        assert isinstance(ad, ModelAdapter)
        assert ad.NAME == name
    assert DEFAULT_ADAPTER in adapter_names()
    # every record the stages read is there on the default adapter's catalogue
    ad = get_adapter(DEFAULT_ADAPTER)
    kinds = ad.layer_kinds(default_config())
    for kind in set(kinds):
        assert all(sel in ad.SELECTORS for sel in ad.kind_selector(kind))
        for op in ad.decode_timeline(kind):
            for hook in op.hooks_before + op.hooks_after:
                assert ad.HOOKS_BY_NAME[hook].exists_in(kind)


def test_register_refuses_what_does_not_honour_the_protocol():
    class Half:
        NAME = "half"
        HOOKS = ()

    with pytest.raises(TypeError, match="missing ARCHITECTURES"):
        register_adapter("half", Half())
    assert "half" not in adapter_names()
    with pytest.raises(ValueError, match="shipped"):
        register_adapter(DEFAULT_ADAPTER, get_adapter(DEFAULT_ADAPTER))
    assert len(MEMBERS) == len(set(MEMBERS)) > 20


def test_toy_registry_and_config(toy):
    assert "toy" in adapter_names()
    assert adapter_for("ToyForCausalLM") is toy
    assert adapter_for(None, "toy") is toy
    assert default_config("toy")["toy_layer_types"] == ["dense", "sparse"]
    # the toy's own check runs, GLM's (mhc, NoPE, ...) does not
    validate_config(CONFIG, adapter=toy)
    with pytest.raises(L2sModelError, match="hidden_size: must be a multiple of 16"):
        validate_config(dict(CONFIG, hidden_size=60), adapter=toy)
    with pytest.raises(L2sModelError, match="must be at most 8"):
        validate_config(dict(CONFIG, num_hidden_layers=9), adapter=toy)
    with pytest.raises(L2sModelError, match="missing key 'n_routed_experts'.*toy"):
        validate_config({"hidden_size": 64, "num_hidden_layers": 2}, adapter=toy)


def test_toy_inventory(toy):
    inv = analytical_inventory(CONFIG, tp=1, ep=False)  # adapter from architectures
    assert inv.model == "toy" and inv.model_name == "Toy-2L"
    assert [str(k) for k in inv.kinds] == ["dense", "sparse"]
    assert [(t.path, t.nbytes) for t in inv.tensors(0)] == [
        ("norm.weight", NORM), ("mix.weight", MIX), ("ffn.w_in", W_IN),
        ("ffn.w_out", W_OUT)]
    # consumption order, not spec order: the router is read before the experts
    assert [t.path for t in inv.tensors(1)] == [
        "norm.weight", "mix.weight", "ffn.router", "ffn.experts"]
    assert inv.tensor(1, "ffn.experts").experts == (0, 4)
    assert inv.tensor(1, "ffn.router").replicated
    tp2 = analytical_inventory(CONFIG, tp=2, ep=False, adapter="toy")
    assert tp2.tensor(0, "mix.weight").nbytes == MIX // 2
    with pytest.raises(L2sModelError, match="hidden_size = 64 is not divisible"):
        analytical_inventory(CONFIG, tp=3, ep=False, adapter="toy")


def test_toy_schedule_uses_the_adapters_selectors_and_hooks(toy):
    s = load_schedule_text(TOY, "toy.l2s")
    assert s.model == "toy"
    assert {w.name: w.layers for w in s.windows} == {"A": (0,), "B": (1,), "C": (1,)}
    # GLM's selectors and hooks mean nothing to the toy
    bad = TOY.replace("layers first", "layers kda")
    with pytest.raises(L2sSemanticError) as e:
        load_schedule_text(bad, "toy.l2s")
    assert ("unknown layer selector 'kda' (one of: all, first, experts, an index or "
            "a range)") in str(e.value)
    bad = TOY.replace("at toy.after_mix", "at attn.pre_all_reduce")
    with pytest.raises(L2sSemanticError, match="unknown hook point 'attn.pre_all_reduce'"):
        load_schedule_text(bad, "toy.l2s")
    # the toy's hook exists only in its sparse layers (``exists_in``)
    bad = TOY.replace("at toy.entry budget 1MB layers experts",
                      "at toy.before_experts budget 1MB layers first")
    with pytest.raises(L2sSemanticError, match="hook point 'toy.before_experts' does "
                                               r"not fire in layers 0 \(dense\)"):
        load_schedule_text(bad, "toy.l2s")


def _plan(toy):
    s = load_schedule_text(TOY, "toy.l2s")
    inv = schedule_inventory(s)
    return s, inv, compile_plan(s, inv, 0)


def test_toy_compile_and_lint(toy):
    s, inv, plan = _plan(toy)
    got = [(wi.window, wi.hook, wi.layer, wi.nbytes,
            [(r.layer, r.tensor, r.offset, r.nbytes) for r in wi.ranges])
           for wi in plan.issues]
    # hook order within a layer comes from the toy's HOOKS (entry < after_mix
    # < before_experts), not the declaration order
    assert got == [
        ("A", "toy.after_mix", 0, W_IN + W_OUT,
         [(0, "ffn.w_in", 0, W_IN), (0, "ffn.w_out", 0, W_OUT)]),
        ("C", "toy.entry", 1, ROUTER, [(1, "ffn.router", 0, ROUTER)]),
        ("B", "toy.before_experts", 1, NORM + MIX,
         [(0, "norm.weight", 0, NORM), (0, "mix.weight", 0, MIX)]),
    ]
    run = run_lint(s, inv, device_profile=load_device("h200"), tokens=4)
    assert not run.has_errors, [f.message for f in run.findings]
    ops = {d["op"] for d in run.sg.nodes.values()}
    assert {"toy.mix", "toy.route", "toy.experts"} <= ops
    assert "toy.all_reduce" in ops  # present, inactive at tp 1


def test_toy_dry_run_install_fills_in_hook_order(toy):
    torch = pytest.importorskip("torch", reason=TORCH_MISSING)
    from l2sched.model.inventory import live_inventory
    from l2sched.runtime.dry_run import DryRunRuntime
    from l2sched.runtime.gate import StepInfo
    from l2sched.runtime.sites import hook_sites, install_plan

    s, inv, plan = _plan(toy)
    model = toy_model(torch)
    live = live_inventory(model, 1, False, adapter="toy")
    assert live.diff(inv) == []
    assert set(hook_sites(toy.layer_kinds(CONFIG)[1], "toy")) == {
        "toy.entry", "toy.after_mix", "toy.before_experts"}
    x = torch.randn(3, H)
    ref = model(x)
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=3))
    installed = install_plan(model.layers, live, plan, rt)
    try:
        y = model(x)
    finally:
        installed.remove()
    assert torch.equal(y, ref)
    ev = [(e.op, e.window, e.layer, e.hook, e.nbytes) for e in rt.events]
    assert ev == [
        ("fork", "A", 0, "toy.after_mix", 0),
        ("launch", "A", 0, "toy.after_mix", W_IN + W_OUT),
        ("fork", "C", 1, "toy.entry", 0),
        ("launch", "C", 1, "toy.entry", ROUTER),
        ("fork", "B", 1, "toy.before_experts", 0),
        ("launch", "B", 1, "toy.before_experts", NORM + MIX),
        ("join", "", -1, "", 0),
    ]
    # removed exactly: the wrapped method is the class's again
    assert "run_experts" not in vars(model.layers[1].ffn)
    assert json.loads(toy.default_config_text()) == CONFIG
    # a hook site the plan uses gone from layer 0: an install error of the
    # runtime (nothing installed); the vLLM plugin's install calls it drift
    from l2sched.errors import L2sInstallError
    from l2sched.runtime.sites import MissingHookSites
    from l2sched.vllm import sites as vllm_sites
    from l2sched.vllm.drift import VllmDrift

    del model.layers[0].mix
    with pytest.raises(MissingHookSites) as e:
        install_plan(model.layers, live, plan, DryRunRuntime(plan))
    assert isinstance(e.value, L2sInstallError)
    assert e.value.sites == ["mix of Layer (hook point toy.after_mix) on layer 0"]
    with pytest.raises(VllmDrift, match="hook site mix of Layer "):
        vllm_sites.install_plan(model.layers, live, plan, DryRunRuntime(plan))


class _NoLiveNoDocs:
    """The toy without the opt-in capabilities and optional members: no
    live tree, no hooks document, no PP refusal; every other member is the
    toy's."""

    NAME = "toy_core"
    _GONE = ("DECODER_LAYER_PATHS", "decoder_layers", "live_layer_kind",
             "live_spec", "hooks_markdown", "PIPELINE_PARALLEL_REFUSAL")

    def __init__(self):
        self._toy = ToyAdapter()

    def __getattr__(self, name):
        if name in self._GONE:
            raise AttributeError(name)
        return getattr(self._toy, name)


def test_capabilities_are_opt_in_and_named_when_missing():
    """The core protocol is what every stage needs; a live module tree and
    the hooks document are capabilities of their own. An adapter without
    them registers, and check/inventory/lint work; a command that needs one
    names the adapter and what it lacks. The optional members fall back to
    the protocol's defaults."""
    from l2sched.cli.docs import hooks_md_text
    from l2sched.model.adapters.protocol import (
        AdapterCapabilityError,
        HooksDocument,
        LiveModel,
        optional_member,
    )
    from l2sched.model.inventory import live_inventory

    core = _NoLiveNoDocs()
    assert not isinstance(core, LiveModel) and not isinstance(core, HooksDocument)
    assert isinstance(ToyAdapter(), LiveModel)
    register_adapter("toy_core", core)
    try:
        inv = analytical_inventory(CONFIG, tp=1, ep=False, adapter="toy_core")
        assert inv.model == "toy_core"
        with pytest.raises(AdapterCapabilityError) as e:
            live_inventory([], 1, False, adapter="toy_core")
        assert str(e.value) == (
            "adapter 'toy_core' has no LiveModel capability (DECODER_LAYER_PATHS, "
            "decoder_layers, live_layer_kind, live_spec missing), which the live "
            "inventory needs")
        with pytest.raises(AdapterCapabilityError, match="'toy_core' has no "
                           "HooksDocument capability .hooks_markdown missing., "
                           "which `l2sched docs hooks` needs"):
            hooks_md_text("toy_core")
    finally:
        unregister_adapter("toy_core")
    assert optional_member(core, "PIPELINE_PARALLEL_REFUSAL") == ""
    assert optional_member(core, "EXCLUDED_BUFFERS") == ("cos_sin_cache",)
    assert optional_member(core, "lazy_paths")(None) == ()
    assert optional_member(core, "canonical_path")(
        ["mlp.experts.gate.weight", "mlp.gate.weight"]) == "mlp.gate.weight"
    with pytest.raises(KeyError):
        optional_member(core, "HOOKS")  # a core member has no default
