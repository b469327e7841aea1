"""Model adapter for vLLM 0.33.0's GLM-5.3 (``vllm/models/glm5next``).

Source of every fact: ``../shared/docs/vllm-glm5next-map.md`` (sections 0-3),
which was checked against the real vLLM code on a CPU-only host; line numbers
below are from the ``vllm==0.33.0`` wheel, paths relative to ``vllm/``.

What this module holds, all as data:

- ``layer_kinds(config)``: the kind (KDA/MLA attention, dense/MoE MLP) of every
  decoder layer.
- ``HOOKS``: the hook catalogue a schedule may name, each with how it is
  installed on vLLM 0.33.0 without editing vLLM (``Install``) and which graph
  modes run it.
- ``decode_timeline(kind)``: the ordered operations (``Op``) of one decode step
  of a layer, with the tensors each reads and the hooks that fire around it.
- ``layer_specs(...)``/``consumption_order(...)``: the analytical per-rank
  tensor shapes of one layer and their decode order (used by
  ``l2sched.inventory``), and the live-model facts (``LAZY_TENSORS``,
  ``canonical_path``, ``derive_lazy``, ``live_entry``) ``live_inventory``
  needs; ``resolve_path``/``decoder_layers`` find install targets.
- ``KERNEL_PATTERNS``: op -> kernel-name regexes for later calibration from
  torch-profiler traces (unverified: taken from vLLM source names).

``python -m l2sched.adapters.glm5next --hooks-md`` prints ``docs/hooks.md``.
Paths of tensors and modules are relative to ``model.layers.{i}``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

NAME = "glm5next"

#: ``architectures[0]`` / ``model_type`` values of a ``config.json`` this
#: adapter serves (text-only and multimodal checkpoints).
ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
MODEL_TYPES = ("glm5_next_text", "glm5_next")

#: Attention kinds and MLP kinds, as used by layer selectors in schedules.
ATTENTION_KINDS = ("kda", "mla")
MLP_KINDS = ("dense", "moe")

#: Graph modes a hook can run in. ``eager``: Python runs every step.
#: ``full``: a FULL CUDA graph (uniform decode batches, the default
#: ``FULL_AND_PIECEWISE`` mode); Python runs once at capture time and the
#: kernels it launched replay every step. ``piecewise``: a breakable
#: (PIECEWISE) graph (mixed/prefill batches); Python runs at capture time into
#: the current graph segment, and each ``eager_break_during_capture`` region
#: ends a segment (map section 0.2 and 3).
GRAPH_MODES = ("eager", "full", "piecewise")


@dataclass(frozen=True)
class LayerKind:
    """The kind of one decoder layer: ``attention`` in ``ATTENTION_KINDS``,
    ``mlp`` in ``MLP_KINDS``. ``str()`` gives e.g. ``kda+moe``."""

    attention: str
    mlp: str

    def __str__(self) -> str:
        return f"{self.attention}+{self.mlp}"


#: The three layer kinds GLM-5.3-Flash has (MLA+dense does not occur, map 0.4).
FLASH_KINDS = (LayerKind("kda", "dense"), LayerKind("kda", "moe"),
               LayerKind("mla", "moe"))


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

#: The hook catalogue in timeline order (map document, section 3).
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


def layer_kinds(config: Mapping) -> list[LayerKind]:
    """Layer kinds of every decoder layer, from a HF text config dict.

    Reads ``num_hidden_layers`` (default 45), ``layer_types`` (default:
    ``idx % 4 == 3`` -> MLA, as ``Glm5NextTextConfig.__post_init__`` does) and
    ``mlp_layer_types`` (default: first 3 dense). Returns one ``LayerKind``
    per layer. Raises ``ValueError`` on a value it does not know.
    """
    n = int(config.get("num_hidden_layers", 45))
    attn: Sequence[str] = config.get("layer_types") or [
        "linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)
    ]
    mlp: Sequence[str] = config.get("mlp_layer_types") or (
        ["dense"] * min(3, n) + ["sparse"] * max(n - 3, 0)
    )
    attn_map = {"linear_attention": "kda", "indexed_attention": "mla",
                "full_attention": "mla"}
    mlp_map = {"dense": "dense", "sparse": "moe"}
    kinds = []
    for i in range(n):
        if attn[i] not in attn_map:
            raise ValueError(f"layer_types[{i}] = {attn[i]!r} is not one of "
                             f"{sorted(attn_map)}")
        if mlp[i] not in mlp_map:
            raise ValueError(f"mlp_layer_types[{i}] = {mlp[i]!r} is not one of "
                             f"{sorted(mlp_map)}")
        kinds.append(LayerKind(attn_map[attn[i]], mlp_map[mlp[i]]))
    return kinds


# --------------------------------------------------------------------------
# Decode timeline
# --------------------------------------------------------------------------

#: Op classes. ``gemm``: memory-bound GEMM (weight bytes dominate at decode
#: batch sizes). ``small``: latency-bound small kernel (norms, mHC mixes,
#: tiny projections, routing, indexer steps). ``attention_core``: the
#: attention kernel proper (reads state/caches, not weights). ``collective``:
#: a TP all-reduce. ``expert_stream``: the routed-expert kernels (read the
#: weights of the experts the router picked). ``shared_expert``: the shared
#: expert, on its own (aux) CUDA stream in decode.
OP_CLASSES = ("gemm", "small", "attention_core", "collective", "expert_stream",
              "shared_expert")

#: When an op runs. Empty = always. An op whose condition is false is
#: skipped, but the hooks attached to it still fire at its position.
CONDITIONS = ("", "tp>1", "tp>1 or ep", "layer==0", "layer>0", "layer==last")


def condition_holds(condition: str, layer: int, n_layers: int, tp: int,
                    ep: bool) -> bool:
    """Whether an ``Op.condition`` (``CONDITIONS``) holds in layer ``layer``
    of ``n_layers`` at TP size ``tp`` (``ep``: expert parallel, DP = 1).
    Raises ``KeyError`` for an unknown condition."""
    return {
        "": True, "tp>1": tp > 1, "tp>1 or ep": tp > 1 or (ep and tp > 1),
        "layer==0": layer == 0, "layer>0": layer > 0,
        "layer==last": layer == n_layers - 1,
    }[condition]


@dataclass(frozen=True)
class Op:
    """One operation of a layer's decode step.

    ``name`` is unique within a layer kind; ``cls`` is in ``OP_CLASSES``;
    ``reads`` lists the weight tensors it reads (inventory paths relative to
    the layer; a tensor absent from a given config is ignored);
    ``hooks_before``/``hooks_after`` are the hook points (``HOOKS``) that fire
    right before / after it; ``stream`` is ``main`` or ``aux``;
    ``eager_break`` is True when the op runs inside an
    ``eager_break_during_capture`` region; ``condition`` is in ``CONDITIONS``;
    ``source`` is the vLLM file:line.
    """

    name: str
    cls: str
    description: str
    source: str
    reads: tuple[str, ...] = ()
    hooks_before: tuple[str, ...] = ()
    hooks_after: tuple[str, ...] = ()
    stream: str = "main"
    eager_break: bool = False
    condition: str = ""


_M = "models/glm5next/common/"
_FM = "model_executor/layers/fused_moe/"

_HC_ATTN = ("hc_attn_fn", "hc_attn_scale", "hc_attn_base",
            "input_layernorm.weight")
_HC_FFN = ("hc_ffn_fn", "hc_ffn_scale", "hc_ffn_base",
           "post_attention_layernorm.weight")

_PROLOGUE = (
    Op("mhc.attn_pre", "small",
       "mHC pre for attention: layer 0 mhc_pre_op (hc_expand + hc_pre); other "
       "layers mhc_fused_post_pre_op = previous layer's deferred hc_post + "
       "hc_pre + input RMSNorm in one kernel",
       _M + "model.py:566-591", reads=_HC_ATTN, hooks_before=("layer.entry",)),
)

_KDA = (
    Op("kda.in_proj", "gemm", "in_proj_qkvbfg_a GEMM (q, k, v, b, f_a, g_a)",
       _M + "kda.py:460", reads=("self_attn.in_proj_qkvbfg_a.weight",),
       hooks_after=("attn.after_first_proj",)),
    Op("kda.f_b_proj", "small", "f_b_proj GEMM on the f_a slice",
       _M + "kda.py:477", reads=("self_attn.f_b_proj.weight",)),
    Op("kda.g_b_proj", "small", "g_b_proj GEMM on the g_a slice",
       _M + "kda.py:480", reads=("self_attn.g_b_proj.weight",)),
    Op("kda.conv", "small",
       "causal_conv1d_update over the merged q|k|v conv weight",
       _M + "kda.py:637-650", reads=("self_attn._merged_conv_weight",),
       hooks_before=("attn.before_core",), eager_break=True),
    Op("kda.recurrent", "attention_core",
       "fused_recurrent_kda: in-kernel gate from A_log/dt_bias, in-kernel "
       "beta sigmoid; writes core_attn_out", _M + "kda.py:751-778",
       reads=("self_attn.A_log", "self_attn.dt_bias"),
       hooks_after=("attn.after_core",), eager_break=True),
    Op("kda.o_norm", "small", "o_norm (FusedRMSNormGated, sigmoid gate g2)",
       _M + "kda.py:497", reads=("self_attn.o_norm.weight",)),
)

_MLA = (
    Op("mla.fused_qkv_a_proj", "gemm",
       "fused_qkv_a_proj GEMM (q_a | kv_a), replicated",
       "model_executor/layers/mla.py:183",
       reads=("self_attn.fused_qkv_a_proj.weight",),
       hooks_after=("attn.after_first_proj",)),
    Op("mla.q_kv_rmsnorm", "small", "fused_q_kv_rmsnorm (one Triton kernel)",
       "model_executor/layers/mla.py:204-215",
       reads=("self_attn.q_a_layernorm.weight", "self_attn.kv_a_layernorm.weight")),
    Op("mla.q_b_proj", "gemm", "q_b_proj GEMM", "model_executor/layers/mla.py:221",
       reads=("self_attn.q_b_proj.weight",)),
    Op("mla.indexer.wq_b", "gemm", "indexer wq_b GEMM (replicated)",
       _M + "attention.py:300", reads=("self_attn.indexer.wq_b.weight",)),
    Op("mla.indexer.wk_weights_proj", "small",
       "indexer wk | weights_proj GEMM (replicated)", _M + "attention.py:305",
       reads=("self_attn.indexer.wk_weights_proj.weight",)),
    Op("mla.indexer.weights_fp32", "small",
       "torch.mm(hidden.float(), _wp_fp32): fp32 head gate",
       _M + "attention.py:307-314", reads=("self_attn.indexer._wp_fp32",)),
    Op("mla.indexer.k_norm", "small", "_fused_indexer_k_norm (LayerNorm fp32)",
       _M + "attention.py:316",
       reads=("self_attn.indexer.k_norm.weight", "self_attn.indexer.k_norm.bias")),
    Op("mla.indexer.fwht_quant", "small", "fwht128_quant_fp8 and "
       "_fused_indexer_weight_scale", _M + "attention.py:350-356"),
    Op("mla.indexer.kpool_gate", "small",
       "F.linear(hidden, index_kpool_compress_gate)", _M + "attention.py:361",
       reads=("self_attn.indexer.index_kpool_compress_gate",)),
    Op("mla.indexer.topk", "small",
       "sparse_attn_indexer_kpool: kpool compress + cache insert, tail cache, "
       "fp8 paged MQA logits, top-k into topk_indices_buffer",
       "models/glm5next/nvidia/sparse_indexer.py:107",
       reads=("self_attn.indexer.index_kpool_compress_ape",), eager_break=True),
    Op("mla.kv_cache_update", "small", "unified_mla_kv_cache_update (captured)",
       "model_executor/layers/attention/mla_attention.py:1438-1481",
       hooks_before=("attn.before_core",)),
    Op("mla.uk_bmm", "gemm", "W_UK_T bmm (q absorption); W_UK_T is a strided "
       "view of kv_b_proj.weight", "model_executor/layers/attention/"
       "mla_attention.py:1096", reads=("self_attn.mla_attn.mla_attn.W_UK_T",),
       eager_break=True),
    Op("mla.sparse_decode", "attention_core",
       "impl.forward_mqa: sparse MLA decode kernel",
       "model_executor/layers/attention/mla_attention.py:1134", eager_break=True),
    Op("mla.uv_bmm", "gemm", "W_UV bmm (_v_up_proj); W_UV is a strided view of "
       "kv_b_proj.weight", "model_executor/layers/attention/mla_attention.py:1435",
       reads=("self_attn.mla_attn.mla_attn.W_UV",),
       hooks_after=("attn.after_core",), eager_break=True),
)

_O_PROJ = (
    Op("attn.o_proj", "gemm", "o_proj GEMM (RowParallelLinear)",
       "model_executor/layers/linear.py:1815", reads=("self_attn.o_proj.weight",),
       hooks_after=("attn.pre_all_reduce",)),
    Op("attn.all_reduce", "collective", "o_proj all-reduce "
       "(tensor_model_parallel_all_reduce)", "model_executor/layers/linear.py:1818",
       hooks_after=("attn.post_all_reduce",), condition="tp>1"),
    Op("mhc.ffn_pre", "small", "mhc_fused_post_pre_op for the FFN: post-attention "
       "hc_post + FFN hc_pre + post_attention_layernorm RMSNorm",
       _M + "model.py:608-618", reads=_HC_FFN),
)

_DENSE = (
    Op("mlp.gate_up_proj", "gemm", "dense gate_up_proj GEMM",
       _M + "model.py:214", reads=("mlp.gate_up_proj.weight",)),
    Op("mlp.act", "small", "SiluAndMulWithClamp (swiglu_limit)", _M + "model.py:215"),
    Op("mlp.down_proj", "gemm", "dense down_proj GEMM",
       "model_executor/layers/linear.py:1815", reads=("mlp.down_proj.weight",),
       hooks_after=("mlp.pre_all_reduce",)),
    Op("mlp.all_reduce", "collective", "dense MLP all-reduce",
       "model_executor/layers/linear.py:1818",
       hooks_after=("mlp.post_all_reduce",), condition="tp>1"),
)

_MOE = (
    Op("moe.shared.gate_up_proj", "shared_expert",
       "shared expert gate_up GEMM, launched first on the aux stream "
       "(tokens <= VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD = 256)",
       _FM + "runner/shared_experts.py:142-161",
       reads=("mlp.shared_experts.gate_up_proj.weight",), stream="aux"),
    Op("moe.shared.act", "shared_expert", "shared expert SiluAndMulWithClamp",
       _FM + "runner/shared_experts.py:142-161", stream="aux"),
    Op("moe.shared.down_proj", "shared_expert",
       "shared expert down GEMM (reduce_results=False: no all-reduce of its own)",
       _FM + "runner/shared_experts.py:142-161",
       reads=("mlp.shared_experts.down_proj.weight",), stream="aux"),
    Op("moe.gate", "gemm", "router gate GEMM (GateLinear, fp32 logits)",
       _FM + "runner/moe_runner.py:914", reads=("mlp.gate.weight",),
       hooks_after=("moe.after_gate",)),
    Op("moe.routing", "small", "router.select_experts: sigmoid, "
       "e_score_correction_bias, top-k, renorm, routed_scaling_factor",
       _FM + "runner/moe_runner.py:630-635",
       reads=("mlp.gate.e_score_correction_bias",),
       hooks_after=("moe.before_experts",)),
    Op("moe.align", "small", "moe_align_block_size (token/expert sort)",
       _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts._expert_map",)),
    Op("moe.w13", "expert_stream", "routed experts w13 GEMM (Triton fused_moe); "
       "reads only the picked experts' slices", _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts.w13_weight",)),
    Op("moe.act", "small", "routed experts clamp SiLU-mul",
       _FM + "routed_experts.py:1369-1404"),
    Op("moe.w2", "expert_stream", "routed experts w2 GEMM (Triton fused_moe); "
       "reads only the picked experts' slices", _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts.w2_weight",)),
    Op("moe.sum", "small", "top-k weighted sum; then the main stream waits for "
       "the shared expert's event and adds shared_output + fused_output",
       _FM + "runner/moe_runner.py:645-647,789-792",
       hooks_after=("moe.pre_all_reduce",)),
    Op("moe.all_reduce", "collective", "MoE all-reduce "
       "(_maybe_reduce_final_output; runs when the MoE TP or EP size > 1, and "
       "with DP = 1 the EP size is the TP size, so under EP it is the same "
       "call on the same TP group)", _FM + "runner/moe_runner.py:515",
       hooks_after=("moe.post_all_reduce",), condition="tp>1"),
)

_EPILOGUE = (
    Op("mhc.post_last", "small", "last layer only: mhc_post_op + hc_contract "
       "(other layers defer hc_post into the next layer's mHC pre)",
       _M + "model.py:629-632", hooks_after=("layer.exit",),
       condition="layer==last"),
)


def decode_timeline(kind: LayerKind) -> tuple[Op, ...]:
    """The ordered ops of one decode step of a layer of ``kind`` (mHC path,
    CUDA, no sequence parallelism; map section 2). On CUDA the shared expert
    is launched on the aux stream before the router gate; on CPU it runs
    inline after routing (NO_OVERLAP), which this timeline does not model."""
    attn = _KDA if kind.attention == "kda" else _MLA
    mlp = _DENSE if kind.mlp == "dense" else _MOE
    return _PROLOGUE + attn + _O_PROJ + mlp + _EPILOGUE


# --------------------------------------------------------------------------
# Kernel-name mapping (calibration data)
# --------------------------------------------------------------------------

#: Op name -> regexes (``re.search``) for the CUDA kernel names a
#: torch-profiler trace shows for it on an H200. UNVERIFIED: derived from the
#: Triton/CUDA function names in the vLLM 0.33.0 sources, not from a trace;
#: calibrate before relying on them. GEMM kernel names depend on the cuBLAS
#: heuristic (nvjet/cutlass/sm90_xmma), so GEMM ops share one pattern and are
#: told apart by position in the trace.
KERNEL_PATTERNS: dict[str, tuple[str, ...]] = {
    "mhc.attn_pre": (r"mhc|hc_pre|tilelang",),
    "mhc.ffn_pre": (r"mhc|hc_pre|tilelang",),
    "mhc.post_last": (r"mhc|hc_post|tilelang",),
    "kda.conv": (r"_causal_conv1d_update_kernel",),
    "kda.recurrent": (r"fused_recurrent_gated_delta_rule|fused_recurrent_kda",),
    "kda.o_norm": (r"rms_norm_gated|layer_norm_fwd",),
    "mla.q_kv_rmsnorm": (r"q_kv_rmsnorm",),
    "mla.indexer.fwht_quant": (r"_fwht_quant_kernel",),
    "mla.indexer.topk": (r"kpool|paged_mqa_logits|top_?k",),
    "mla.kv_cache_update": (r"concat_and_cache_mla|cache",),
    "mla.sparse_decode": (r"flashmla|sparse|mla",),
    "moe.align": (r"moe_align_block_size",),
    "moe.w13": (r"fused_moe_kernel",),
    "moe.w2": (r"fused_moe_kernel",),
    "moe.routing": (r"topk|grouped_topk",),
    "attn.all_reduce": (r"cross_device_reduce|[Aa]ll[Rr]educe",),
    "mlp.all_reduce": (r"cross_device_reduce|[Aa]ll[Rr]educe",),
    "moe.all_reduce": (r"cross_device_reduce|[Aa]ll[Rr]educe",),
}
#: Pattern for every op of class ``gemm`` (and shared-expert GEMMs).
GEMM_KERNEL_PATTERN = r"nvjet|gemm|cutlass|sm90_xmma|splitK"


# --------------------------------------------------------------------------
# Tensors: analytical shapes and live-model facts
# --------------------------------------------------------------------------

#: Element sizes in bytes of the dtypes this model uses.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4,
               "int64": 8}

#: Config keys the analytical inventory reads, with their JSON types
#: (``int`` excludes ``bool``). ``None`` in the tuple = the key may be null.
REQUIRED_KEYS: dict[str, tuple[type | None, ...]] = {
    "hidden_size": (int,), "intermediate_size": (int,),
    "moe_intermediate_size": (int,), "num_hidden_layers": (int,),
    "num_attention_heads": (int,), "n_shared_experts": (int, None),
    "n_routed_experts": (int,), "kv_lora_rank": (int,), "q_lora_rank": (int,),
    "qk_rope_head_dim": (int,), "qk_nope_head_dim": (int,), "v_head_dim": (int,),
    "index_head_dim": (int,), "index_n_heads": (int,), "index_kpool": (int,),
    "linear_head_dim": (int,), "linear_num_heads": (int,),
    "linear_conv_kernel_dim": (int,), "hc_mult": (int,), "mhc": (bool,),
    "topk_method": (str,),
}
#: Keys read when present (else derived as ``Glm5NextTextConfig`` does).
OPTIONAL_KEYS: dict[str, tuple[type | None, ...]] = {
    "layer_types": (list, None), "mlp_layer_types": (list, None),
    "torch_dtype": (str, None), "dtype": (str, None),
}


#: Lazily created tensors (exist only after the first forward or after
#: ``process_weights_after_loading``): path -> (attention kind, the tensor
#: whose storage it views or ``""`` when it has its own storage, source).
LAZY_TENSORS: dict[str, tuple[str, str, str]] = {
    "self_attn._merged_conv_weight": (
        "kda", "", "models/glm5next/common/kda.py:558-567 (first _forward)"),
    "self_attn.indexer._wp_fp32": (
        "mla", "", "models/glm5next/common/attention.py:307-313 (first forward)"),
    "self_attn.mla_attn.mla_attn.W_UK_T": (
        "mla", "self_attn.kv_b_proj.weight",
        "model_executor/layers/attention/mla_attention.py:1349 "
        "(process_weights_after_loading)"),
    "self_attn.mla_attn.mla_attn.W_UV": (
        "mla", "self_attn.kv_b_proj.weight",
        "model_executor/layers/attention/mla_attention.py:1347 "
        "(process_weights_after_loading)"),
}


def canonical_path(paths: Sequence[str]) -> str:
    """The canonical name of a tensor reachable under several module aliases:
    the path with the fewest components, then the lexicographically smallest.

    E.g. ``self_attn.kv_b_proj.weight`` over
    ``self_attn.mla_attn.mla_attn.kv_b_proj.weight`` and ``mlp.gate.weight``
    over ``mlp.experts.gate.weight`` (map section 1c/1e)."""
    return min(paths, key=lambda p: (p.count("."), p))


@dataclass(frozen=True)
class TensorSpec:
    """Analytical facts of one tensor of one layer on one TP rank, before
    byte counting (``l2sched.inventory`` turns it into a ``TensorEntry``):
    ``path`` relative to the layer, ``dtype`` name, per-rank ``shape``,
    ``replicated`` (same full tensor on every TP rank), ``replicated_rows``
    (leading-dim rows identical on every rank, for partly replicated tensors),
    ``lazy``, ``view_of``, ``decode_read`` and ``experts`` as in
    ``TensorEntry``."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    replicated: bool
    replicated_rows: int = 0  # leading-dim rows identical on every TP rank
    lazy: bool = False
    view_of: str = ""
    decode_read: bool = True
    experts: tuple[int, int] | None = None


def _div(a: int, b: int, what: str) -> int:
    if a % b:
        raise ValueError(f"{what} = {a} is not divisible by the TP size {b}")
    return a // b


def expert_range(n_experts: int, ep_size: int, ep_rank: int) -> tuple[int, int]:
    """Global expert ids ``[start, stop)`` owned by ``ep_rank`` under linear
    expert placement: ``n // ep_size`` each, the remainder on the last rank
    (``fused_moe/expert_map_manager.py:22-90`` ``determine_expert_map``)."""
    base = n_experts // ep_size
    start = ep_rank * base
    stop = n_experts if ep_rank == ep_size - 1 else start + base
    return start, stop


def layer_specs(cfg: Mapping[str, Any], kind: LayerKind, tp: int, ep: bool,
                tp_rank: int) -> list[TensorSpec]:
    """Analytical per-rank tensors of one layer of ``kind``, in module order.

    ``cfg`` is a validated text config; ``tp`` the TP size; ``ep`` True for
    ``--enable-expert-parallel`` with DP = 1 (EP size = ``tp``). Shapes follow
    the vLLM constructors cited in map section 1. Raises ``ValueError`` when a
    dimension does not divide by ``tp``."""
    dt = model_dtype(cfg)
    h = cfg["hidden_size"]
    n = cfg["hc_mult"]
    mix = (2 + n) * n
    specs: list[TensorSpec] = []
    add = specs.append
    if cfg["mhc"]:
        for part in ("attn", "ffn"):
            add(TensorSpec(f"hc_{part}_fn", "float32", (mix, n * h), True))
            add(TensorSpec(f"hc_{part}_base", "float32", (mix,), True))
            add(TensorSpec(f"hc_{part}_scale", "float32", (3,), True))
    # RMSNorm weights, passed as norm_weight into the mHC kernels (map 1a).
    add(TensorSpec("input_layernorm.weight", dt, (h,), True))
    add(TensorSpec("post_attention_layernorm.weight", dt, (h,), True))
    if kind.attention == "kda":
        hd, nh, k = (cfg["linear_head_dim"], cfg["linear_num_heads"],
                     cfg["linear_conv_kernel_dim"])
        p = _div(hd * nh, tp, "linear_head_dim*linear_num_heads")
        nhl = _div(nh, tp, "linear_num_heads")
        a = "self_attn."
        add(TensorSpec(a + "in_proj_qkvbfg_a.weight", dt, (3 * p + nhl + 2 * hd, h),
                  False, replicated_rows=2 * hd))
        add(TensorSpec(a + "f_b_proj.weight", dt, (p, hd), False))
        add(TensorSpec(a + "dt_bias", "float32", (p,), False))
        for c in "qkv":
            add(TensorSpec(a + f"{c}_conv1d.weight", "float32", (p, 1, k), False,
                      decode_read=False))
        add(TensorSpec(a + "A_log", "float32", (1, 1, nhl, 1), False))
        add(TensorSpec(a + "g_b_proj.weight", dt, (p, hd), False))
        add(TensorSpec(a + "o_norm.weight", dt, (hd,), True))
        add(TensorSpec(a + "o_proj.weight", dt, (h, p), False))
        add(TensorSpec(a + "_merged_conv_weight", "float32", (3 * p, k), False,
                  lazy=True))
    else:
        ql, kvl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
        nope, rope, vd = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                          cfg["v_head_dim"])
        nl = _div(cfg["num_attention_heads"], tp, "num_attention_heads")
        ihd, inh = cfg["index_head_dim"], cfg["index_n_heads"]
        a = "self_attn."
        add(TensorSpec(a + "fused_qkv_a_proj.weight", dt, (ql + kvl + rope, h), True))
        add(TensorSpec(a + "q_a_layernorm.weight", dt, (ql,), True))
        add(TensorSpec(a + "q_b_proj.weight", dt, (nl * (nope + rope), ql), False))
        add(TensorSpec(a + "kv_a_layernorm.weight", dt, (kvl,), True))
        add(TensorSpec(a + "kv_b_proj.weight", dt, (nl * (nope + vd), kvl), False,
                  decode_read=False))
        add(TensorSpec(a + "o_proj.weight", dt, (h, nl * vd), False))
        i = a + "indexer."
        add(TensorSpec(i + "index_kpool_compress_ape", "float32",
                  (cfg["index_kpool"], ihd), True))
        # Created with an explicit dtype=torch.bfloat16 (attention.py:224-226).
        add(TensorSpec(i + "index_kpool_compress_gate", "bfloat16", (ihd, h), True))
        add(TensorSpec(i + "wq_b.weight", dt, (ihd * inh, ql), True))
        add(TensorSpec(i + "wk_weights_proj.weight", dt, (ihd + inh, h), True))
        add(TensorSpec(i + "k_norm.weight", "float32", (ihd,), True))
        add(TensorSpec(i + "k_norm.bias", "float32", (ihd,), True))
        add(TensorSpec(i + "_wp_fp32", "float32", (h, inh), True, lazy=True))
        m = a + "mla_attn.mla_attn."
        # Scalar KV-cache quantisation scales every MLAAttention registers as
        # buffers (model_executor/layers/attention/attention.py:133-139); fp32,
        # identical on every rank, not read by any op modelled here.
        for sc in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale"):
            add(TensorSpec(m + sc, "float32", (), True, decode_read=False))
        add(TensorSpec(m + "W_UK_T", dt, (nl, nope, kvl), False, lazy=True,
                  view_of=a + "kv_b_proj.weight"))
        add(TensorSpec(m + "W_UV", dt, (nl, kvl, vd), False, lazy=True,
                  view_of=a + "kv_b_proj.weight"))
    if kind.mlp == "dense":
        inter = _div(cfg["intermediate_size"], tp, "intermediate_size")
        add(TensorSpec("mlp.gate_up_proj.weight", dt, (2 * inter, h), False))
        add(TensorSpec("mlp.down_proj.weight", dt, (h, inter), False))
    else:
        e, im = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        add(TensorSpec("mlp.gate.weight", dt, (e, h), True))
        if cfg["topk_method"] == "noaux_tc":
            add(TensorSpec("mlp.gate.e_score_correction_bias", "float32", (e,), True))
        ns = cfg["n_shared_experts"]
        if ns:
            si = _div(im * ns, tp, "moe_intermediate_size*n_shared_experts")
            add(TensorSpec("mlp.shared_experts.gate_up_proj.weight", dt, (2 * si, h),
                      False))
            add(TensorSpec("mlp.shared_experts.down_proj.weight", dt, (h, si), False))
        r = "mlp.experts.routed_experts."
        if ep and tp > 1:
            lo, hi = expert_range(e, tp, tp_rank)
            add(TensorSpec(r + "w13_weight", dt, (hi - lo, 2 * im, h), False,
                      experts=(lo, hi)))
            add(TensorSpec(r + "w2_weight", dt, (hi - lo, h, im), False,
                      experts=(lo, hi)))
            # Global -> local expert id map (-1 = not on this rank), a
            # non-persistent buffer (routed_experts.py:272).
            add(TensorSpec(r + "_expert_map", "int32", (e,), False))
        else:
            ir = _div(im, tp, "moe_intermediate_size")
            add(TensorSpec(r + "w13_weight", dt, (e, 2 * ir, h), False,
                      experts=(0, e)))
            add(TensorSpec(r + "w2_weight", dt, (e, h, ir), False, experts=(0, e)))
    return specs


def model_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype vLLM serves unquantized weights in: ``torch_dtype`` or
    ``dtype`` of the config (``"auto"``/absent -> ``bfloat16``)."""
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return {"auto": "bfloat16", "bf16": "bfloat16", "half": "float16",
            "fp16": "float16", "float": "float32"}.get(name, name)


def consumption_order(kind: LayerKind, paths: Sequence[str]) -> list[str]:
    """``paths`` (tensors of one layer of ``kind``) in decode consumption
    order: each tensor at the first ``Op`` of ``decode_timeline(kind)`` that
    reads it; tensors no op reads (not read in decode, e.g. the
    ``q/k/v_conv1d`` params and ``kv_b_proj.weight``, read only through its
    views) follow, in the given order."""
    present = set(paths)
    out: list[str] = []
    seen: set[str] = set()
    for op in decode_timeline(kind):
        for p in op.reads:
            if p in present and p not in seen:
                out.append(p)
                seen.add(p)
    out.extend(p for p in paths if p not in seen)
    return out


def decode_reads(kind: LayerKind) -> set[str]:
    """Every tensor path some op of ``decode_timeline(kind)`` reads."""
    return {p for op in decode_timeline(kind) for p in op.reads}


def default_config() -> dict[str, Any]:
    """The embedded GLM-5.3-Flash text config (validated), as
    ``l2sched.inventory.load_model_config(None)`` returns it."""
    from l2sched.inventory import load_model_config

    return load_model_config(None)


#: Tensors identical on every TP rank (not TP-sharded by construction): the
#: mHC mixes and norms, KDA ``o_norm``, MLA ``fused_qkv_a_proj`` (disable_tp),
#: the MLA norms, the whole indexer (ReplicatedLinear / disable_tp) and the
#: router gate (map section 1). Prefixes end with ``.`` or ``_``.
REPLICATED_PATHS = (
    "hc_", "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.o_norm.weight", "self_attn.fused_qkv_a_proj.weight",
    "self_attn.q_a_layernorm.weight", "self_attn.kv_a_layernorm.weight",
    "self_attn.indexer.", "mlp.gate.", "self_attn.mla_attn.mla_attn._",
)
#: Tensors whose last rows are replicated: path -> the attribute of
#: ``self_attn`` whose value x 2 is the replicated row count (f_a and g_a,
#: ``replicated_shard_ids=(4, 5)``, ``kda.py:239-254``).
PARTLY_REPLICATED = {"self_attn.in_proj_qkvbfg_a.weight": "head_dim"}


#: Buffers ``live_inventory`` leaves out: rotary caches are caches, not
#: weights, and are never prefetched (the MLA indexer's ``cos_sin_cache`` is
#: ``(max_position_embeddings, 0)``, 0 B, since GLM-5.3 is NoPE).
EXCLUDED_BUFFERS = ("cos_sin_cache",)


def _is_replicated(path: str) -> bool:
    return any(path == r or (r[-1] in "._" and path.startswith(r))
               for r in REPLICATED_PATHS)


def resolve_path(obj: Any, path: str) -> Any:
    """``getattr`` along a dotted ``path`` (``""`` = ``obj`` itself), e.g. an
    ``Install.target`` from a decoder layer. Raises ``AttributeError``."""
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


def decoder_layers(model: Any) -> Any:
    """The decoder-layer ``ModuleList`` of a ``Glm5NextForCausalLM``
    (``.model.layers``), a ``Glm5NextForConditionalGeneration``
    (``.language_model.model.layers``), a ``Glm5NextModel`` (``.layers``), or
    ``model`` itself when it is already the list."""
    for path in ("model.layers", "language_model.model.layers", "layers"):
        try:
            return resolve_path(model, path)
        except AttributeError:
            continue
    return model


def live_layer_kind(layer: Any) -> LayerKind:
    """The ``LayerKind`` of a live ``Glm5NextDecoderLayer``: attention from its
    ``layer_kind`` attribute (``model.py:382``), MLP ``moe`` when ``layer.mlp``
    has ``experts`` (``Glm5NextMoE``)."""
    attn = getattr(layer, "layer_kind", None)
    if attn not in ATTENTION_KINDS:
        attn = "kda" if hasattr(layer.self_attn, "in_proj_qkvbfg_a") else "mla"
    return LayerKind(attn, "moe" if hasattr(layer.mlp, "experts") else "dense")


def derive_lazy(layer: Any, path: str) -> tuple[tuple[int, ...], str] | None:
    """``(shape, dtype)`` a lazily created tensor of ``LAZY_TENSORS`` will have
    in the live ``layer``, derived from the live tensors it is built from
    (the same expressions as the vLLM code cited there). ``None`` when the
    layer lacks the source modules."""
    def dt(t: Any) -> str:
        return str(t.dtype).replace("torch.", "")

    a = layer.self_attn
    if path == "self_attn._merged_conv_weight":
        ws = [getattr(a, f"{c}_conv1d").weight for c in "qkv"]
        return (sum(w.shape[0] for w in ws), ws[0].shape[2]), dt(ws[0])
    if path == "self_attn.indexer._wp_fp32":
        w = a.indexer.wk_weights_proj.weight
        return (w.shape[1], w.shape[0] - a.indexer.head_dim), "float32"
    if path.startswith("self_attn.mla_attn.mla_attn.W_U"):
        m = a.mla_attn.mla_attn
        w = m.kv_b_proj.weight
        if path.endswith("W_UK_T"):
            return (m.num_heads, m.qk_nope_head_dim, m.kv_lora_rank), dt(w)
        return (m.num_heads, m.kv_lora_rank, m.v_head_dim), dt(w)
    return None


def live_entry(layer: Any, kind: LayerKind, path: str, shape: tuple[int, ...],
               dtype: str, nbytes: int, tp: int, ep: bool, tp_rank: int):
    """The ``TensorEntry`` of a tensor found in a live layer: replication from
    ``REPLICATED_PATHS``/``PARTLY_REPLICATED`` (row count read from the live
    module), ``lazy``/``view_of`` from ``LAZY_TENSORS``, ``decode_read`` from
    the decode timeline, the expert range from ``layer.mlp.n_routed_experts``
    and ``expert_range``."""
    from l2sched.inventory import TensorEntry

    rep = _is_replicated(path)
    rep_bytes = nbytes if rep else 0
    if path in PARTLY_REPLICATED:
        rows = 2 * getattr(layer.self_attn, PARTLY_REPLICATED[path])
        rep_bytes = nbytes // shape[0] * rows
    lazy = LAZY_TENSORS.get(path)
    experts = None
    if path.endswith(("routed_experts.w13_weight", "routed_experts.w2_weight")):
        n = layer.mlp.n_routed_experts
        experts = expert_range(n, tp, tp_rank) if ep and tp > 1 else (0, n)
    return TensorEntry(path, dtype, tuple(shape), nbytes, rep, rep_bytes,
                       lazy is not None, lazy[1] if lazy else "",
                       path in decode_reads(kind), experts)


# --------------------------------------------------------------------------
# docs/hooks.md generator
# --------------------------------------------------------------------------

def _kinds_of(h: HookPoint) -> str:
    kinds = [str(k) for k in FLASH_KINDS if h.exists_in(k)]
    return ", ".join(kinds) if len(kinds) < len(FLASH_KINDS) else "all"


def _install_text(inst: Install) -> str:
    where = (f"`model.layers.{{i}}.{inst.target}`" if inst.target
             else "`model.layers.{i}`")
    scope = "/".join(inst.attention + inst.mlp)
    text = f"{scope + ': ' if scope else ''}{inst.mechanism} on {where}"
    return text + (f" ({inst.note})" if inst.note else "")


def hooks_markdown(op_bytes: Callable[[LayerKind, Op], str] | None = None) -> str:
    """The text of ``docs/hooks.md``, generated from ``HOOKS`` and
    ``decode_timeline``. ``op_bytes(kind, op)`` (optional) gives the text of
    the bytes-read column (per GPU); without it the column is omitted."""
    out = [
        "# GLM-5.3 (`glm5next`) hook catalogue and decode timeline",
        "",
        "<!-- Generated by `python -m l2sched.adapters.glm5next --hooks-md`"
        " from l2sched/adapters/glm5next.py; do not edit by hand. -->",
        "",
        "Hook points a schedule may name, in timeline order, for vLLM 0.33.0's",
        "`Glm5NextForCausalLM`. Paths are attribute paths from the decoder layer",
        "`model.layers.{i}`. Sources: `shared/docs/vllm-glm5next-map.md`",
        "sections 2-3 (file:line in the `vllm==0.33.0` wheel).",
        "",
        "Mechanisms: `forward_pre_hook` / `forward_hook` are",
        "`register_forward_pre_hook` / `register_forward_hook` on the module;",
        "`wrap_before` / `wrap_after` replace the instance attribute (a bound",
        "method) with a wrapper that runs the hook before / after the original.",
        "",
        "Graph modes: hooks are Python, so they run every step when `eager`; under",
        "a `full` CUDA graph (uniform decode) they run once at capture and the",
        "kernels they launched replay; under `piecewise` (breakable) capture they",
        "run at capture into the current segment, and every eager-break region",
        "(KDA `_forward`, the MLA indexer top-k, the MLA core) ends a segment. A",
        "side-stream fork must be joined in the segment it was forked in.",
        "",
        "## Hook points",
        "",
        "| hook | order | layer kinds | fires | install | graph modes | in a piecewise capture |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in HOOKS:
        installs = "<br>".join(_install_text(i) for i in h.installs)
        out.append(f"| `{h.name}` | {h.order} | {_kinds_of(h)} | {h.description} "
                   f"| {installs} | {', '.join(h.graph_modes)} | {h.piecewise} |")
    out += ["", "Install sources (vLLM file:line):", ""]
    for h in HOOKS:
        for i in h.installs:
            scope = "/".join(i.attention + i.mlp)
            out.append(f"- `{h.name}`{' (' + scope + ')' if scope else ''}: "
                       f"`{i.source}`")
    out += [
        "",
        "## Decode timeline per layer kind",
        "",
        "Op classes: `gemm` memory-bound GEMM, `small` latency-bound small kernel,",
        "`attention_core`, `collective` (TP all-reduce), `expert_stream` (routed",
        "experts), `shared_expert` (aux stream). An op whose condition is false is",
        "skipped; its hooks still fire at its position. `*` = inside an",
        "eager-break region.",
    ]
    for kind in FLASH_KINDS:
        out += ["", f"### {kind}", ""]
        head = "| # | op | class | stream | condition | reads |"
        sep = "|---|---|---|---|---|---|"
        if op_bytes is not None:
            head += " bytes read per GPU at TP4 |"
            sep += "---|"
        out += [head + " hooks before | hooks after |", sep + "---|---|"]
        reads_in_kind = set()
        for n, op in enumerate(decode_timeline(kind), 1):
            reads = [r for r in op.reads if _read_exists(kind, r)]
            reads_in_kind.update(reads)
            row = (f"| {n} | `{op.name}`{'*' if op.eager_break else ''} | "
                   f"{op.cls} | {op.stream} | {op.condition or '-'} | "
                   f"{'<br>'.join(f'`{r}`' for r in reads) or '-'} |")
            if op_bytes is not None:
                row += f" {op_bytes(kind, op)} |"
            row += (f" {', '.join(f'`{x}`' for x in op.hooks_before) or '-'} |"
                    f" {', '.join(f'`{x}`' for x in op.hooks_after) or '-'} |")
            out.append(row)
    out += ["", "## Op sources", ""]
    seen: set[str] = set()
    for kind in FLASH_KINDS:
        for op in decode_timeline(kind):
            if op.name not in seen:
                seen.add(op.name)
                out.append(f"- `{op.name}`: {op.description} (`{op.source}`)")
    return "\n".join(out) + "\n"


def _read_exists(kind: LayerKind, path: str) -> bool:
    # Only EP configs have the expert map; the docs show the TP (no EP) case.
    return not path.endswith("._expert_map")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m l2sched.adapters.glm5next --hooks-md``: print
    ``docs/hooks.md`` (bytes column from the embedded config at TP4)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["--hooks-md"]:
        print("usage: python -m l2sched.adapters.glm5next --hooks-md",
              file=sys.stderr)
        return 2
    from l2sched.inventory import hooks_md_text
    sys.stdout.write(hooks_md_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
