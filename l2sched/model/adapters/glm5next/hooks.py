"""The GLM-5.3 hook catalogue: the hook points a schedule may name, in
layer-timeline order, each with how it is installed on vLLM 0.33.0 without
editing vLLM (``Install``: file:line in the ``vllm==0.33.0`` wheel, paths
relative to ``vllm/``) and the graph modes whose Python runs it."""

from __future__ import annotations

from dataclasses import dataclass

from l2sched.model.adapters.glm5next.kinds import LayerKind
from l2sched.units import GRAPH_MODES


@dataclass(frozen=True)
class Install:
    """How a hook point is installed on one attention/MLP kind of layer.

    ``mechanism`` is one of:

    - ``forward_pre_hook``: ``module.register_forward_pre_hook`` on ``target``;
    - ``forward_hook``: ``module.register_forward_hook`` on ``target``;
    - ``wrap_before`` / ``wrap_after``: replace the instance attribute
      ``target`` (a bound method, ``getattr`` path from the layer) with a
      wrapper that runs the hook before / after calling the original.

    ``target`` is an attribute path relative to ``model.layers.{i}``
    (``""`` = the decoder layer itself). ``attention``/``mlp`` restrict the
    layer kinds this install applies to (empty = all). ``source`` is the vLLM
    file:line the install relies on.
    """

    mechanism: str
    target: str
    source: str
    attention: tuple[str, ...] = ()
    mlp: tuple[str, ...] = ()
    note: str = ""

    def applies_to(self, kind: LayerKind) -> bool:
        """True when this install is the one to use in a layer of ``kind``."""
        return (not self.attention or kind.attention in self.attention) and (
            not self.mlp or kind.mlp in self.mlp
        )


@dataclass(frozen=True)
class HookPoint:
    """One hook point a schedule may name.

    ``order`` is the position in the layer's decode timeline (smaller fires
    earlier); carry-over may only flow to a window whose hook fires later.
    ``attention``/``mlp`` restrict the layer kinds it exists in (empty = all).
    ``installs`` says how to install it per layer kind (exactly one applies to
    each kind it exists in); ``graph_modes`` are the modes (``GRAPH_MODES``)
    whose Python runs it; ``piecewise`` says where it lands in a breakable
    (PIECEWISE) capture.
    """

    name: str
    order: int
    description: str
    attention: tuple[str, ...] = ()
    mlp: tuple[str, ...] = ()
    installs: tuple[Install, ...] = ()
    graph_modes: tuple[str, ...] = GRAPH_MODES
    piecewise: str = ""

    def exists_in(self, kind: LayerKind) -> bool:
        """True when this hook fires in a layer of ``kind``."""
        return (not self.attention or kind.attention in self.attention) and (
            not self.mlp or kind.mlp in self.mlp
        )

    def install_for(self, kind: LayerKind) -> Install:
        """The ``Install`` to use in a layer of ``kind``. Raises ``KeyError``
        when the hook does not exist in that kind."""
        for inst in self.installs:
            if self.exists_in(kind) and inst.applies_to(kind):
                return inst
        raise KeyError(f"hook {self.name} does not exist in {kind} layers")


_SEG_ATTN = ("in the segment opened by the previous layer's last eager break "
             "(KDA core or MLA core); fork and join there")
_SEG_POST = ("in the segment after this layer's attention core; it runs to the "
             "next layer's core, so a window here may span o_proj, the FFN and "
             "the next layer's first projection")

#: The hook catalogue in timeline order (install points in the ``vllm==0.33.0`` wheel;
#: docs/sources.md#vllm-glm5next).
HOOKS: tuple[HookPoint, ...] = (
    HookPoint(
        "layer.entry", 0, "layer entry, before the attention mHC pre",
        installs=(Install("forward_pre_hook", "", "models/glm5next/common/"
                          "model.py:529 (Glm5NextDecoderLayer.forward)",
                          note="args: positions, hidden, residual, post, comb"),),
        piecewise=_SEG_ATTN),
    HookPoint(
        "attn.after_first_proj", 10,
        "after the attention's first projection (KDA in_proj_qkvbfg_a, "
        "MLA fused_qkv_a_proj)",
        installs=(
            Install("forward_hook", "self_attn.in_proj_qkvbfg_a",
                    "models/glm5next/common/kda.py:460", attention=("kda",)),
            Install("forward_hook", "self_attn.fused_qkv_a_proj",
                    "model_executor/layers/mla.py:183", attention=("mla",)),
        ),
        piecewise=_SEG_ATTN),
    HookPoint(
        "attn.before_core", 20, "right before the attention core",
        installs=(
            Install("wrap_before", "self_attn._forward",
                    "models/glm5next/common/kda.py:491 (@eager_break_during_"
                    "capture at kda.py:501)", attention=("kda",),
                    note="the instance wrapper runs outside the eager break"),
            Install("forward_pre_hook", "self_attn.mla_attn.mla_attn",
                    "model_executor/layers/mla.py:244 (MLAAttention.forward)",
                    attention=("mla",),
                    note="fires after the indexer, before the KV-cache write "
                         "and the eager-break core"),
        ),
        piecewise="last point of the segment before the core's eager break: a "
                  "fork here must join before the break, so nothing overlaps "
                  "the core"),
    HookPoint(
        "attn.after_core", 30, "right after the attention core",
        installs=(
            Install("wrap_after", "self_attn._forward",
                    "models/glm5next/common/kda.py:491", attention=("kda",)),
            Install("forward_hook", "self_attn.mla_attn.mla_attn",
                    "model_executor/layers/mla.py:244", attention=("mla",),
                    note="fires after the W_UV bmm"),
        ),
        piecewise="first point of the segment after the core's eager break"),
    HookPoint(
        "attn.pre_all_reduce", 40, "between the o_proj GEMM and its all-reduce",
        installs=(Install("wrap_after", "self_attn.o_proj.quant_method.apply",
                          "model_executor/layers/linear.py:1815 (GEMM), "
                          ":1818 (all-reduce)",
                          note="every LinearBase owns its UnquantizedLinearMethod "
                               "instance, so the wrapper is per layer"),),
        piecewise=_SEG_POST),
    HookPoint(
        "attn.post_all_reduce", 50, "after the o_proj all-reduce",
        installs=(Install("forward_hook", "self_attn.o_proj",
                          "model_executor/layers/linear.py:1818"),),
        piecewise=_SEG_POST),
    HookPoint(
        "moe.after_gate", 60, "after the router gate GEMM", mlp=("moe",),
        installs=(Install("forward_hook", "mlp.gate",
                          "model_executor/layers/fused_moe/runner/moe_runner.py:"
                          "914", note="inside the opaque custom op "
                          "vllm::moe_forward_shared: fires because compilation "
                          "mode is NONE (no Dynamo)"),),
        piecewise=_SEG_POST),
    HookPoint(
        "moe.before_experts", 70, "right before the routed experts (the "
        "expert stream)", mlp=("moe",),
        installs=(Install("wrap_before",
                          "mlp.experts.routed_experts.forward_modular",
                          "model_executor/layers/fused_moe/runner/moe_runner.py:"
                          "637", note="module hooks on routed_experts never "
                          "fire (RoutedExperts.forward raises); inside "
                          "vllm::moe_forward_shared"),),
        piecewise=_SEG_POST),
    HookPoint(
        "moe.pre_all_reduce", 80,
        "between the MoE output (shared + routed) and its all-reduce",
        mlp=("moe",),
        installs=(Install("wrap_before",
                          "mlp.experts._maybe_reduce_final_output",
                          "model_executor/layers/fused_moe/runner/moe_runner.py:"
                          "794 (call), :515 (all-reduce)",
                          note="called with the summed tensor, outside the "
                               "custom op"),),
        piecewise=_SEG_POST),
    HookPoint(
        "moe.post_all_reduce", 90, "after the MoE all-reduce", mlp=("moe",),
        installs=(Install("forward_hook", "mlp.experts",
                          "model_executor/layers/fused_moe/runner/moe_runner.py:"
                          "689 (MoERunner.forward)"),),
        piecewise=_SEG_POST),
    HookPoint(
        "mlp.pre_all_reduce", 80,
        "between the dense MLP's down_proj GEMM and its all-reduce",
        mlp=("dense",),
        installs=(Install("wrap_after", "mlp.down_proj.quant_method.apply",
                          "model_executor/layers/linear.py:1815"),),
        piecewise=_SEG_POST),
    HookPoint(
        "mlp.post_all_reduce", 90, "after the dense MLP's all-reduce",
        mlp=("dense",),
        installs=(Install("forward_hook", "mlp.down_proj",
                          "model_executor/layers/linear.py:1818"),),
        piecewise=_SEG_POST),
    HookPoint(
        "layer.exit", 100, "layer exit",
        installs=(Install("forward_hook", "", "models/glm5next/common/model.py:"
                          "634", note="the layer's hc_post is deferred into the "
                          "next layer's mHC pre (except the last layer)"),),
        piecewise=_SEG_POST),
)

HOOKS_BY_NAME: dict[str, HookPoint] = {h.name: h for h in HOOKS}
