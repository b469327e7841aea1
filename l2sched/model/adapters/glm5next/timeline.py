"""The GLM-5.3 decode timeline: the ordered operations (``Op``) of one
decode step of a layer of each kind, the weight tensors each reads and the
hook points that fire around it (mHC path, CUDA, no sequence parallelism;
file:line in the ``vllm==0.33.0`` wheel, paths relative to ``vllm/``)."""

from __future__ import annotations

from typing import Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.glm5next.kinds import LayerKind
from l2sched.model.adapters.records import Op

#: Op classes. ``gemm``: memory-bound GEMM (weight bytes dominate at decode
#: batch sizes). ``small``: latency-bound small kernel (norms, mHC mixes,
#: tiny projections, routing, indexer steps). ``attention_core``: the
#: attention kernel proper (reads state/caches, not weights). ``collective``:
#: a TP all-reduce. ``expert_stream``: the routed-expert kernels (read the
#: weights of the experts the router picked). ``shared_expert``: the shared
#: expert, on its own (aux) CUDA stream in decode.
OP_CLASSES = ("gemm", "small", "attention_core", "collective", "expert_stream",
              "shared_expert")

#: Bytes of attention-core state one decode token moves per TP rank, read
#: and written back in place by every ``attention_core`` op: the KDA
#: recurrent state, ``linear_num_heads`` (64) / TP heads x ``linear_head_dim``
#: (128)^2 x fp32 (glm53-flash-config.json; 1 MiB per token at TP4). The
#: MLA sparse decode reads ``index_topk`` (2048) cached entries per token,
#: taken to be of the same order (an ASSUMPTION; the bench's decode step
#: moves exactly this many bytes in both kinds).
CORE_STATE_HEAD_BYTES = 128 * 128 * 4
CORE_STATE_HEADS = 64


def core_state_bytes(tokens: int, tp: int) -> int:
    """Attention-core state bytes (per rank) one attention core of a decode
    step of ``tokens`` tokens streams through the L2 at TP ``tp``
    (``CORE_STATE_HEAD_BYTES`` x heads per rank x tokens)."""
    return tokens * max(1, CORE_STATE_HEADS // max(1, tp)) * CORE_STATE_HEAD_BYTES


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
    CUDA, no sequence parallelism; ``models/glm5next/common/model.py:529-634``). On CUDA the shared expert
    is launched on the aux stream before the router gate; on CPU it runs
    inline after routing (NO_OVERLAP), which this timeline does not model."""
    attn = _KDA if kind.attention == "kda" else _MLA
    mlp = _DENSE if kind.mlp == "dense" else _MOE
    return _PROLOGUE + attn + _O_PROJ + mlp + _EPILOGUE


def consumption_order(kind: LayerKind, paths: Sequence[str]) -> list[str]:
    """``paths`` (tensors of one layer of ``kind``) in decode consumption
    order (``records.consumption_order`` over ``decode_timeline(kind)``);
    tensors no op reads (not read in decode, e.g. the ``q/k/v_conv1d``
    params and ``kv_b_proj.weight``, read only through its views) follow, in
    the given order."""
    return records.consumption_order(decode_timeline(kind), paths)


def decode_reads(kind: LayerKind) -> set[str]:
    """Every tensor path some op of ``decode_timeline(kind)`` reads."""
    return records.decode_reads(decode_timeline(kind))
