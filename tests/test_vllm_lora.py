"""Issue 43: the plugin keeps its promise under LoRA, with vLLM 0.33.0's
real LoRA manager and ``*WithLoRA`` wrappers on the real
``Qwen3MoeForCausalLM`` (CPU, TP2 gloo ranks, tests/test_qwen3_moe_vllm.py's
config, CPU substitutions and forwards), ``enable_lora`` with the linear
targets (``qkv_proj``, ``o_proj``, ``gate``, ``gate_up_proj``,
``down_proj``; vLLM's ``FusedMoEWithLoRA`` of the experts has no CPU
kernel).

Each rank does what vLLM's GPU model runner does: the model loader builds
the model (``get_model_loader(...).load_model``, dummy weights, the plugin
registered as vLLM registers it, so it installs at
``process_weights_after_loading``), then ``load_lora_model`` (the runner's
LoRA step: ``LoRAModelManager._create_lora_modules`` wraps the targets), then
a decode-shaped forward with no adapter active:

- every hooked module LoRA wrapped is hooked again at its wrapper: one INFO
  line names them; every issue the summary line counts fires, once, in the
  adapter's timeline order with the real all-reduces; the output is bitwise
  the one before LoRA wrapped the model (no adapter active);
- a reload under LoRA (the plugin's reload step, as at a wake-up) installs
  the same plan, bound through the wrappers;
- another plugin having replaced one hooked module outright (a new
  ``RowParallelLinear`` at layer 0's ``mlp.down_proj``, not a wrapper of
  it) before LoRA: one WARNING line per window that cannot fire, naming
  it, then the summary line again with the issues that can fire, which are
  the ones that fire;
- the last decoder layer (where the fills are joined) replaced by a module
  that is no wrapper: one ``prefetch OFF`` line, the plan removed.

Slow (about a minute: two ranks, three loads each); ``-m vllm``.
"""

from __future__ import annotations

import os

import pytest
import test_qwen3_moe_plugin as qp
import test_qwen3_moe_vllm as qv
from vllm_cpu import plugin_log_records, run_ranks, vllm_available

from l2sched.model.adapters import get_adapter

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]
AD = get_adapter("qwen3_moe")
TARGETS = ["qkv_proj", "o_proj", "gate", "gate_up_proj", "down_proj"]
LORA = {"enable_lora": True, "max_loras": 1, "max_lora_rank": 8,
        "lora_target_modules": TARGETS}


def load_with_plugin(ctx, path: str, trace: list):
    """The model as vLLM's model runner loads it (``get_model_loader(
    load_config).load_model``, with ``ctx.vllm_config``'s load format), the
    plugin registered as vLLM registers it and configured with the schedule
    at ``path`` (dry-run backend), with tests/test_qwen3_moe_vllm.py's CPU
    substitutions recording into ``trace``. The class-level one (the
    experts' reference forward) comes before the load: the plugin installs
    during the load and wraps the experts' bound ``forward_modular`` then;
    the all-reduce is wrapped once, after the load."""
    import torch
    import vllm.distributed.parallel_state as ps
    from vllm.model_executor.model_loader import get_model_loader

    import l2sched.vllm as registration

    registration.register()
    all_reduce = ps.GroupCoordinator.all_reduce
    qv._cpu_substitutions(torch.nn.Module(), trace)
    ps.GroupCoordinator.all_reduce = all_reduce
    cfg = ctx.vllm_config
    cfg.additional_config = {"l2sched": {"schedule": path, "backend": "dry-run"}}
    cfg.compilation_config.static_forward_context.clear()  # another model
    model = get_model_loader(cfg.load_config).load_model(
        vllm_config=cfg, model_config=cfg.model_config)
    qv._cpu_substitutions(model, trace)
    return model


def with_lora(model, cfg):
    """The model runner's LoRA step (``LoRAModelRunnerMixin.load_lora_model``),
    then no adapter active for ``qv.TOKENS`` decode tokens."""
    import torch
    from vllm.v1.worker.lora_model_runner_mixin import LoRAModelRunnerMixin

    runner = LoRAModelRunnerMixin()
    runner.lora_config = cfg.lora_config
    model = runner.load_lora_model(model, cfg, torch.device("cpu"))
    runner._set_active_loras((0,) * qv.TOKENS, (0,) * qv.TOKENS, set())
    return model


def replace_outright(model, name: str) -> None:
    """What another plugin might do: put a new ``RowParallelLinear`` (the
    same weights and CPU GEMM) where ``name`` is, not a wrapper of it."""
    import torch
    from vllm.lora.utils import replace_submodule
    from vllm.model_executor.layers.linear import RowParallelLinear
    from vllm.utils.torch_utils import set_default_torch_dtype

    old = model.get_submodule(name)
    with torch.device("cpu"), set_default_torch_dtype(torch.bfloat16):
        new = RowParallelLinear(old.input_size, old.output_size, bias=False,
                                reduce_results=old.reduce_results,
                                prefix=f"{name}.replaced")
    with torch.no_grad():
        new.weight.copy_(old.weight)
    new.cpu_linear = old.cpu_linear
    replace_submodule(model, name, new)


def _passthrough(layer):
    """A module standing for decoder layer ``layer``, which it holds as
    ``inner`` (not ``base_layer``: no wrapper in vLLM's sense), as another
    plugin might."""
    import torch

    class Passthrough(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

    return Passthrough(layer)


def _scenario(ctx, d: str, change: str | None) -> dict:
    from l2sched.vllm import plugin

    path = os.path.join(d, "q.l2s")
    records = plugin_log_records()
    trace: list = []
    model = load_with_plugin(ctx, path, trace)
    qv.fill_weights(model)
    plain = qv._forward(model, ctx.vllm_config)  # the plan installed at load
    inst = plugin.installed_for(model)
    assert inst is not None, records
    if change == "down_proj":  # another plugin, not a wrapper of the original
        replace_outright(model, "model.layers.0.mlp.down_proj")
    elif change == "join":  # the last decoder layer, where the fills are joined
        model.model.layers[3] = _passthrough(model.model.layers[3])
    model = with_lora(model, ctx.vllm_config)
    qv.record_events(inst.runtime, trace)
    trace.clear()
    out = qv._forward(model, ctx.vllm_config)
    res = {"records": list(records), "trace": list(trace), "same": out == plain,
           "issues": [(wi.window, wi.hook, wi.layer) for wi in inst.plan.issues],
           "lost": sorted(getattr(inst, "lost", ())), "summary": inst.summary,
           "wrapped": sorted({type(m).__name__ for m in model.modules()
                              if type(m).__name__.endswith("WithLoRA")}),
           "bound": _bound(inst)}
    res["installed"] = plugin.installed_for(model) is not None
    if change is None:
        # a reload under LoRA (wake_up, reload_weights) compiles against the
        # wrapped tree: the same plan, bound to the same tensors
        res["plan"] = _ranges(inst.plan)
        again = plugin.reactivate(model)
        res["reloaded"] = None if again is None else _ranges(again.plan)
        if again is not None:  # (the runtime may be the one kept: runtime.adopt)
            again.runtime.clear()
            qv._forward(model, ctx.vllm_config)
            res["reload_fired"] = len([e for e in again.runtime.events
                                       if e.op == "fork"])
            res["reload_bound"] = _bound(again)
            inst = again
    inst.retire()
    plugin.INSTALLED.clear()
    return res


def _ranges(plan) -> list:
    return [(wi.window, wi.hook, wi.layer, [(r.layer, r.tensor, r.offset, r.nbytes)
                                            for r in wi.ranges]) for wi in plan.issues]


def _bound(inst) -> list:
    """The issues (indices) whose byte ranges are all bound to a tensor."""
    return [i for i, rows in enumerate(inst.runtime.rows)
            if rows and all(n > 0 for _a, n in rows)]


def _rank(ctx) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "q.l2s"), "w") as f:
            f.write(qp.plugin_schedule(ctx.tp))
        return {"wrapped": _scenario(ctx, d, None),
                "replaced": _scenario(ctx, d, "down_proj"),
                "join": _scenario(ctx, d, "join")}


_CACHE: dict = {}


def _run() -> list[dict]:
    if not _CACHE:
        _CACHE["tp2"] = run_ranks(_rank, qv.TINY, 2, device="cpu", timeout=900,
                                  architecture=qv.ARCH, engine_kw=LORA)
    return _CACHE["tp2"]


def _installed_line(records, rank):
    """The summary line of the load (one)."""
    lines = [x for x in records if " installed, backend" in x
             and x.startswith(f"INFO l2sched: TP rank {rank}/2: schedule every_hook")]
    assert len(lines) == 1, records
    return lines[0]


#: Hook point -> the module its hook is on, for the hooks on LoRA targets
#: (the adapter's install targets).
MOVED = {"attn.after_first_proj": ("self_attn.qkv_proj", "QKVParallelLinear",
                                   "MergedQKVParallelLinearWithLoRA"),
         "attn.post_all_reduce": ("self_attn.o_proj", "RowParallelLinear",
                                  "RowParallelLinearWithLoRA"),
         "moe.after_gate": ("mlp.gate", "GateLinear", "ReplicatedLinearWithLoRA"),
         "mlp.post_all_reduce": ("mlp.down_proj", "RowParallelLinear",
                                 "RowParallelLinearWithLoRA")}


def follow_line(rank: int, issues) -> str:
    """The INFO line expected when LoRA wraps the hooked modules of a plan
    with ``issues`` (``(window, hook, layer)``, plan order)."""
    layers: dict[str, set] = {}
    for _w, hook, layer in issues:
        if hook in MOVED:
            assert AD.HOOKS_BY_NAME[hook].install.target == MOVED[hook][0]
            layers.setdefault(hook, set()).add(layer)
    moved = "; ".join(
        f"{MOVED[h][0]} {MOVED[h][1]} -> {MOVED[h][2]} in {len(ls)} "
        f"layer{'s' if len(ls) > 1 else ''} (hook moved to the wrapper)"
        for h, ls in layers.items())
    return (f"INFO l2sched: TP rank {rank}/2: hooked modules were wrapped after the "
            "plugin installed (found when vLLM's LoRA manager returned); the hooks "
            f"follow them: {moved}; {len(issues)} of {len(issues)} issues can fire")


def _issues_in(line: str) -> int:
    return int(line.split(" issues, ")[0].rsplit(" ", 1)[1])


def test_lora_wrapped_hooks_follow_and_every_planned_issue_fires():
    for rank, r in enumerate(_run()):
        got = r["wrapped"]
        assert got["wrapped"] == ["MergedColumnParallelLinearWithLoRA",
                                  "MergedQKVParallelLinearWithLoRA",
                                  "ReplicatedLinearWithLoRA",
                                  "RowParallelLinearWithLoRA"]
        line = _installed_line(got["records"], rank)
        planned = _issues_in(line)
        assert planned == len(got["issues"]) == 24
        # every planned issue fires once (on 2af54cc: 21 of 24), where the
        # adapter's timeline puts it
        fired = [e for e in got["trace"] if e[:2] == ("l2s", "fork")]
        assert len(fired) == planned, f"rank {rank}: {len(fired)} of {planned} fired"
        issued = {(h, layer) for _w, h, layer in got["issues"]}
        want = [e for e in qv.expected_order(AD.layer_kinds(qv.TINY), 2)
                if e[0] != "fork" or (e[1], e[2]) in issued]
        assert qv.observed_order(got["trace"]) == want, f"rank {rank}"
        assert got["same"], f"rank {rank}: LoRA with no adapter changed the output"
        follow = [x for x in got["records"] if "the hooks follow them" in x]
        assert follow == [follow_line(rank, got["issues"])], got["records"]
        assert {h for _w, h, _l in got["issues"]} >= set(MOVED)
        assert not [x for x in got["records"] if x.startswith(("WARNING l2sched: TP",
                                                                "ERROR"))]
        assert got["bound"] == list(range(planned))  # through the wrappers


def test_a_reload_under_lora_installs_the_same_plan():
    """The plugin's reload step (a wake-up, ``reload_weights``) reads the
    LoRA-wrapped tree: its tensors keep their names (``base_layer`` left
    out: ``inventory.unwrapped``), so the plan and its bytes are the ones
    installed at load; every issue fires and binds. On 2af54cc the names
    had ``base_layer`` in them and the windows took other tensors."""
    for rank, r in enumerate(_run()):
        got = r["wrapped"]
        assert got["reloaded"] == got["plan"], f"rank {rank}"
        assert got["reload_fired"] == len(got["plan"]) == 24
        assert got["reload_bound"] == list(range(24))


def test_a_module_replaced_outright_is_one_warning_per_window_and_not_counted():
    for rank, r in enumerate(_run()):
        got = r["replaced"]
        _installed_line(got["records"], rank)
        fired = [e for e in got["trace"] if e[:2] == ("l2s", "fork")]
        again = [x for x in got["records"] if "with the hooks that can fire: " in x]
        assert len(again) == 1 and _issues_in(again[0]) == len(fired) == 22, \
            (len(fired), got["records"])
        lost = {got["issues"][i] for i in got["lost"]}
        assert {(w, h) for w, h, _layer in lost} == {
            ("dense_0", "mlp.pre_all_reduce"), ("dense_1", "mlp.post_all_reduce")}
        warn = [x for x in got["records"] if x.startswith("WARNING l2sched: TP")]
        assert warn == [
            f"WARNING l2sched: TP rank {rank}/2: window {w} cannot fire in layer 0 "
            f"(hook point {h}): {p} ({old}) of layer 0 was replaced by {new} after "
            "the plugin installed (it does not keep the original as base_layer; found "
            "when vLLM's LoRA manager returned)" for w, h, p, old, new in (
                ("dense_0", "mlp.pre_all_reduce", "mlp.down_proj.quant_method",
                 "UnquantizedLinearMethod", "UnquantizedLinearMethod"),
                ("dense_1", "mlp.post_all_reduce", "mlp.down_proj",
                 "RowParallelLinear", "RowParallelLinearWithLoRA"))], got["records"]
        assert got["summary"] in again[0]
        assert [x for x in got["records"] if "the hooks follow them" in x][0].endswith(
            "; 22 of 24 issues can fire")
        assert {(e[2], e[4], e[3]) for e in fired} == set(got["issues"]) - lost


def test_the_join_module_replaced_turns_prefetch_off_in_one_line():
    """The last decoder layer (its exit joins the fills) replaced by a module
    that is no wrapper: one ``prefetch OFF`` line naming it, the plan
    removed, the forward fills nothing."""
    for rank, r in enumerate(_run()):
        got = r["join"]
        off = [x for x in got["records"] if "prefetch OFF" in x]
        assert off == [
            f"ERROR l2sched: TP rank {rank}/2: prefetch OFF: the decoder layer "
            "(Qwen3MoeDecoderLayer) of layer 3 was replaced by Passthrough after the "
            "plugin installed (it does not keep the original as base_layer; found "
            "when vLLM's LoRA manager returned); the fills are joined there (the "
            "plan was removed)"], got["records"]
        assert not got["installed"]
        assert not [e for e in got["trace"] if e[0] == "l2s"]
