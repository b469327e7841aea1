"""The Qwen3-MoE decode timeline: the ordered operations (``Op``) of one
decode step of a layer of each kind, the weight tensors each reads and the
hook points that fire around it (CUDA, no sequence parallelism; file:line
in the ``vllm==0.33.0`` wheel, paths relative to ``vllm/``)."""

from __future__ import annotations

from typing import Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.qwen3_moe.kinds import LayerKind
from l2sched.model.adapters.records import Op

#: Op classes (the same classes as every adapter's: ``protocol.OpLike``).
OP_CLASSES = ("gemm", "small", "attention_core", "collective", "expert_stream",
              "shared_expert")

#: When an op runs. Empty = always. An op whose condition is false is
#: skipped, but the hooks attached to it still fire at its position.
CONDITIONS = ("", "tp>1", "layer==0", "layer>0")


def condition_holds(condition: str, layer: int, n_layers: int, tp: int,
                    ep: bool) -> bool:
    """Whether an ``Op.condition`` (``CONDITIONS``) holds in layer ``layer``
    of ``n_layers`` at TP size ``tp`` (``ep``: expert parallel, DP = 1: the
    MoE all-reduce runs when TP or EP size > 1, and the EP size is the TP
    size). Raises ``KeyError`` for an unknown condition."""
    return {"": True, "tp>1": tp > 1, "layer==0": layer == 0,
            "layer>0": layer > 0}[condition]


#: Bytes per token and KV head of one layer's KV cache (K and V, bf16,
#: ``head_dim`` 128 in both public configs): what the attention core of a
#: decode step streams per cached token.
KV_BYTES_PER_TOKEN_HEAD = 2 * 128 * 2
#: Cached tokens per decoding sequence the core's byte count assumes (an
#: ASSUMPTION: a 1,024-token context; the lint's model has no context
#: length, and GLM-5.3's adapter likewise fixes its core's state bytes).
CONTEXT_TOKENS = 1024
#: KV heads of the public Qwen3-MoE configs (30B-A3B and 235B-A22B: 4).
KV_HEADS = 4


def core_state_bytes(tokens: int, tp: int) -> int:
    """Bytes (per rank) the attention core of a decode step of ``tokens``
    sequences reads from the KV cache: ``tokens`` x ``CONTEXT_TOKENS`` x the
    rank's KV heads (``KV_HEADS / tp``, at least 1) x
    ``KV_BYTES_PER_TOKEN_HEAD``."""
    return tokens * CONTEXT_TOKENS * max(1, KV_HEADS // max(1, tp)) * \
        KV_BYTES_PER_TOKEN_HEAD


_Q = "model_executor/models/qwen3_moe.py:"
_L = "model_executor/layers/linear.py:"
_FM = "model_executor/layers/fused_moe/"

_ATTN = (
    Op("norm.input", "small", "input_layernorm: RMSNorm (layer 0) or fused "
       "residual add + RMSNorm", _Q + "418-422",
       reads=("input_layernorm.weight",), hooks_before=("layer.entry",)),
    Op("attn.qkv_proj", "gemm", "qkv_proj GEMM (QKVParallelLinear: q, k, v "
       "heads of this rank)", _Q + "334 (" + _L + "623)",
       reads=("self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias"),
       hooks_after=("attn.after_first_proj",)),
    Op("attn.qk_norm", "small", "per-head RMSNorm of q and k (q_norm, k_norm)",
       _Q + "336-343", reads=("self_attn.q_norm.weight", "self_attn.k_norm.weight")),
    Op("attn.rope", "small", "rotary embedding of q and k (reads the shared "
       "cos_sin_cache, not a weight)", _Q + "344"),
    Op("attn.core", "attention_core", "Attention.forward: KV-cache write "
       "(unified_kv_cache_update) and paged decode attention "
       "(unified_attention_with_output)",
       _Q + "345 (model_executor/layers/attention/attention.py:490-584)",
       hooks_before=("attn.before_core",), hooks_after=("attn.after_core",)),
    Op("attn.o_proj", "gemm", "o_proj GEMM (RowParallelLinear)", _L + "1815",
       reads=("self_attn.o_proj.weight",), hooks_after=("attn.pre_all_reduce",)),
    Op("attn.all_reduce", "collective", "o_proj all-reduce "
       "(tensor_model_parallel_all_reduce)", _L + "1818",
       hooks_after=("attn.post_all_reduce",), condition="tp>1"),
    Op("norm.post_attention", "small", "post_attention_layernorm: fused "
       "residual add + RMSNorm", _Q + "429",
       reads=("post_attention_layernorm.weight",)),
)

_DENSE = (
    Op("mlp.gate_up_proj", "gemm", "dense gate_up_proj GEMM", _Q + "123",
       reads=("mlp.gate_up_proj.weight",)),
    Op("mlp.act", "small", "SiluAndMul", _Q + "124"),
    Op("mlp.down_proj", "gemm", "dense down_proj GEMM", _L + "1815",
       reads=("mlp.down_proj.weight",), hooks_after=("mlp.pre_all_reduce",)),
    Op("mlp.all_reduce", "collective", "dense MLP all-reduce", _L + "1818",
       hooks_after=("mlp.post_all_reduce",), condition="tp>1"),
)

_MOE = (
    Op("moe.gate", "gemm", "router gate GEMM (GateLinear, held and called by "
       "the MoE runner)", _FM + "runner/moe_runner.py:914",
       reads=("mlp.gate.weight",), hooks_after=("moe.after_gate",)),
    Op("moe.routing", "small", "router.select_experts: softmax top-k, "
       "renormalised (norm_topk_prob)", _FM + "runner/moe_runner.py:630-635",
       hooks_after=("moe.before_experts",)),
    Op("moe.align", "small", "moe_align_block_size (token/expert sort)",
       _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts._expert_map",)),
    Op("moe.w13", "expert_stream", "routed experts w13 GEMM (fused_moe); "
       "reads only the picked experts' slices", _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts.w13_weight",)),
    Op("moe.act", "small", "routed experts SiLU-mul", _FM + "routed_experts.py:1369-1404"),
    Op("moe.w2", "expert_stream", "routed experts w2 GEMM (fused_moe); reads "
       "only the picked experts' slices", _FM + "routed_experts.py:1369-1404",
       reads=("mlp.experts.routed_experts.w2_weight",)),
    Op("moe.sum", "small", "top-k weighted sum (no shared expert)",
       _FM + "runner/moe_runner.py:637-647,789-792",
       hooks_after=("moe.pre_all_reduce",)),
    Op("moe.all_reduce", "collective", "MoE all-reduce "
       "(_maybe_reduce_final_output; runs when the MoE TP or EP size > 1, and "
       "with DP = 1 the EP size is the TP size)", _FM + "runner/moe_runner.py:515",
       hooks_after=("moe.post_all_reduce",), condition="tp>1"),
)

_EXIT = (
    Op("layer.return", "small", "the layer returns (hidden_states, residual); "
       "the residual add is fused into the next layer's input_layernorm",
       _Q + "431", hooks_after=("layer.exit",)),
)


def decode_timeline(kind: LayerKind) -> tuple[Op, ...]:
    """The ordered ops of one decode step of a layer of ``kind``
    (``Qwen3MoeDecoderLayer.forward``, ``qwen3_moe.py:411-431``)."""
    return _ATTN + (_MOE if kind.mlp == "moe" else _DENSE) + _EXIT


def consumption_order(kind: LayerKind, paths: Sequence[str]) -> list[str]:
    """``paths`` (tensors of one layer of ``kind``) in decode consumption
    order (``records.consumption_order`` over ``decode_timeline(kind)``);
    tensors no op reads (the Attention layer's scalar scales) follow, in the
    given order."""
    return records.consumption_order(decode_timeline(kind), paths)


def decode_reads(kind: LayerKind) -> set[str]:
    """Every tensor path some op of ``decode_timeline(kind)`` reads."""
    return records.decode_reads(decode_timeline(kind))
