"""The Qwen3-MoE hook catalogue: the hook points a schedule may name, in
layer-timeline order, each with how it is installed on vLLM 0.33.0's
``Qwen3MoeDecoderLayer`` without editing vLLM (``Install``: file:line in
the ``vllm==0.33.0`` wheel, paths relative to ``vllm/``) and the graph
modes whose Python runs it.

The names are GLM-5.3's where the place in the layer is the same, so a
schedule's windows read the same across families.

Graph modes: ``Qwen3MoeModel`` carries ``@support_torch_compile``
(``qwen3_moe.py:434``), so with vLLM's default compilation mode Dynamo
traces the decoder layers and a Python hook would be traced into the graph
instead of running. The hooks run only with compilation mode NONE
(``enforce_eager``, or ``-O0`` with a FULL decode CUDA graph, whose capture
runs them once): ``eager`` and ``full``. PIECEWISE graphs exist only with
Dynamo's split graph, so ``piecewise`` is not one of their modes."""

from __future__ import annotations

from dataclasses import dataclass

from l2sched.model.adapters.qwen3_moe.kinds import LayerKind
from l2sched.model.adapters.records import Install

#: The graph modes (``l2sched.units.GRAPH_MODES``) whose Python runs a
#: Qwen3-MoE hook (module docstring).
HOOK_GRAPH_MODES = ("eager", "full")


@dataclass(frozen=True)
class HookPoint:
    """One hook point a schedule may name (``protocol.HookPointLike``):
    ``order`` in the layer's timeline, ``mlp`` the MLP kinds it exists in
    (empty = all), ``install`` the one way it is installed (every layer has
    the same attention, so no hook has two installs)."""

    name: str
    order: int
    description: str
    install: Install
    mlp: tuple[str, ...] = ()
    graph_modes: tuple[str, ...] = HOOK_GRAPH_MODES

    def exists_in(self, kind: LayerKind) -> bool:
        """True when this hook fires in a layer of ``kind``."""
        return not self.mlp or kind.mlp in self.mlp

    def install_for(self, kind: LayerKind) -> Install:
        """The install in a layer of ``kind``; ``KeyError`` when the hook
        does not exist there."""
        if not self.exists_in(kind):
            raise KeyError(f"hook {self.name} does not exist in {kind} layers")
        return self.install


_Q = "model_executor/models/qwen3_moe.py:"
_L = "model_executor/layers/linear.py:"
_R = "model_executor/layers/fused_moe/runner/moe_runner.py:"

#: The hook catalogue in timeline order.
HOOKS: tuple[HookPoint, ...] = (
    HookPoint("layer.entry", 0, "layer entry, before input_layernorm",
              Install("forward_pre_hook", "", _Q + "411 (Qwen3MoeDecoderLayer."
                      "forward)", note="args: positions, hidden_states, residual")),
    HookPoint("attn.after_first_proj", 10, "after the qkv_proj GEMM",
              Install("forward_hook", "self_attn.qkv_proj",
                      _Q + "334 (" + _L + "623)")),
    HookPoint("attn.before_core", 20, "right before the attention core (after "
              "q/k norm and rotary)",
              Install("forward_pre_hook", "self_attn.attn",
                      _Q + "345 (model_executor/layers/attention/attention.py:490)")),
    HookPoint("attn.after_core", 30, "right after the attention core",
              Install("forward_hook", "self_attn.attn",
                      _Q + "345 (model_executor/layers/attention/attention.py:584)")),
    HookPoint("attn.pre_all_reduce", 40, "between the o_proj GEMM and its "
              "all-reduce",
              Install("wrap_after", "self_attn.o_proj.quant_method.apply",
                      _L + "1815 (GEMM), :1818 (all-reduce)",
                      note="every LinearBase owns its quant-method instance, so "
                           "the wrapper is per layer")),
    HookPoint("attn.post_all_reduce", 50, "after the o_proj all-reduce",
              Install("forward_hook", "self_attn.o_proj", _L + "1818")),
    HookPoint("moe.after_gate", 60, "after the router gate GEMM",
              Install("forward_hook", "mlp.gate", _R + "914",
                      note="the MoE runner holds and calls the block's gate"),
              mlp=("moe",)),
    HookPoint("moe.before_experts", 70, "right before the routed experts (the "
              "expert stream)",
              Install("wrap_before", "mlp.experts.routed_experts.forward_modular",
                      _R + "637", note="module hooks on routed_experts never fire "
                      "(RoutedExperts.forward raises)"),
              mlp=("moe",)),
    HookPoint("moe.pre_all_reduce", 80, "between the MoE output and its "
              "all-reduce",
              Install("wrap_before", "mlp.experts._maybe_reduce_final_output",
                      _R + "794 (call), :515 (all-reduce)"),
              mlp=("moe",)),
    HookPoint("moe.post_all_reduce", 90, "after the MoE all-reduce",
              Install("forward_hook", "mlp.experts", _R + "689 (MoERunner.forward)"),
              mlp=("moe",)),
    HookPoint("mlp.pre_all_reduce", 80, "between the dense MLP's down_proj GEMM "
              "and its all-reduce",
              Install("wrap_after", "mlp.down_proj.quant_method.apply", _L + "1815"),
              mlp=("dense",)),
    HookPoint("mlp.post_all_reduce", 90, "after the dense MLP's all-reduce",
              Install("forward_hook", "mlp.down_proj", _L + "1818"),
              mlp=("dense",)),
    HookPoint("layer.exit", 100, "layer exit",
              Install("forward_hook", "", _Q + "431")),
)

HOOKS_BY_NAME: dict[str, HookPoint] = {h.name: h for h in HOOKS}
