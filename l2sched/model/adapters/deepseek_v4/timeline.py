"""The DeepSeek-V4 decode timeline: the ordered operations (``Op``) of one
decode step of a layer of each kind on CUDA, the tensors each reads and the
hook points that fire around it (no sequence parallelism, DP = 1; file:line
in the ``vllm==0.33.0`` wheel, paths relative to ``vllm/``; ``_A`` =
``models/deepseek_v4/attention.py``, ``_M`` =
``models/deepseek_v4/nvidia/model.py``)."""

from __future__ import annotations

from typing import Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.deepseek_v4.kinds import LayerKind
from l2sched.model.adapters.records import Op

#: Op classes (the same classes as every adapter's: ``protocol.OpLike``).
OP_CLASSES = ("gemm", "small", "attention_core", "collective", "expert_stream",
              "shared_expert")

#: When an op runs. Empty = always. An op whose condition is false is
#: skipped, but the hooks attached to it still fire at its position.
CONDITIONS = ("", "tp>1")


def condition_holds(condition: str, layer: int, n_layers: int, tp: int,
                    ep: bool) -> bool:
    """Whether an ``Op.condition`` (``CONDITIONS``) holds in layer ``layer``
    of ``n_layers`` at TP size ``tp`` (with DP = 1 the MoE all-reduce runs
    when TP or EP size > 1, and the EP size is the TP size). Raises
    ``KeyError`` for an unknown condition."""
    return {"": True, "tp>1": tp > 1}[condition]


#: Bytes one cached token's compressed or sliding-window KV row of one layer
#: takes in the fp8_ds_mla layout the H200's FlashMLA reads: 448 FP8 NoPE
#: values, 64 BF16 RoPE values and 8 scale bytes (an ASSUMPTION of this
#: adapter, from ``head_dim`` 512 and ``qk_rope_head_dim`` 64 of the public
#: config; ``_A:185-195`` ``use_fp8_ds_mla_layout``).
KV_ROW_BYTES = 448 + 64 * 2 + 8
#: KV rows a decoding sequence's attention core reads per layer (an
#: ASSUMPTION, as GLM-5.3's and Qwen3-MoE's adapters fix a context length:
#: the 128-token sliding window plus ``index_topk`` 512 selected compressed
#: rows of a ``csa`` layer; the lint's model has no context length).
CORE_ROWS = 128 + 512


def core_state_bytes(tokens: int, tp: int) -> int:
    """Bytes (per rank) the attention core of a decode step of ``tokens``
    sequences reads from the KV cache: ``tokens`` x ``CORE_ROWS`` x
    ``KV_ROW_BYTES`` (one latent KV head, replicated on every TP rank)."""
    return tokens * CORE_ROWS * KV_ROW_BYTES


_L = "model_executor/layers/linear.py:"
_FM = "model_executor/layers/fused_moe/"
_AF = "models/deepseek_v4/attention.py:"
_MF = "models/deepseek_v4/nvidia/model.py:"


def _w(path: str) -> tuple[str, str]:
    """A linear's weight and its FP8 block scale (absent when BF16)."""
    return (path + ".weight", path + ".weight_scale_inv")


def _hc(part: str, norm: str, hook: str, source: str) -> Op:
    """The hyper-connection op before the attention (``part`` ``attn``) or
    the MoE (``ffn``): the mHC post of the previous sub-layer fused with
    the pre-mix (Sinkhorn) and the RMSNorm ``norm``; a tilelang kernel that
    reads the fp32 ``hc_{part}_fn`` whole."""
    what = {"attn": "attention input", "ffn": "MoE input"}[part]
    return Op(f"hc.{part}", "gemm", f"hyper-connection mix of the {what}: mHC "
              f"post fused with the pre-mix (Sinkhorn) and {norm}", source,
              reads=(f"hc_{part}_fn", f"hc_{part}_scale", f"hc_{part}_base",
                     f"{norm}.weight"),
              hooks_before=(hook,) if hook else ())


def _attention(kind: LayerKind) -> tuple[Op, ...]:
    """``DeepseekV4Attention.forward`` (``_A:475-505``) for ``kind``."""
    a = "attn."
    ops = [
        _hc("attn", "attn_norm", "layer.entry", _MF + "724-780"),
        Op("attn.fused_wqa_wkv", "gemm", "fused q-lora + kv GEMM (replicated)",
           _AF + "651-656,725", reads=_w(a + "fused_wqa_wkv"),
           hooks_after=("attn.after_first_proj",))]
    if kind.attention != "swa":
        ops.append(Op("attn.compressor.kv_score", "gemm", "compressor fused "
                      "wkv/wgate GEMM on an aux stream (torch.mm, bf16)",
                      _AF + "696-705,725-733",
                      reads=_w(a + "compressor.fused_wkv_wgate"),
                      stream="aux"))
    if kind.attention == "csa":
        ops += [Op("attn.indexer.weights_proj", "gemm", "indexer head-weight GEMM "
                   "on an aux stream", _AF + "708-713",
                   reads=_w(a + "indexer.weights_proj"), stream="aux"),
                Op("attn.indexer.compressor.kv_score", "gemm", "indexer compressor "
                   "fused wkv/wgate GEMM on an aux stream", _AF + "715-723",
                   reads=_w(a + "indexer.compressor.fused_wkv_wgate"), stream="aux")]
    ops += [
        Op("attn.qkv_norm", "small", "fused q-lora and kv RMSNorm",
           _AF + "523-540", reads=(a + "q_norm.weight", a + "kv_norm.weight")),
        Op("attn.wq_b", "gemm", "wq_b GEMM (query heads of this rank)",
           _AF + "594-596,658-669", reads=_w(a + "wq_b")),
        Op("attn.rope_kv_insert", "small", "q RMSNorm, rotary embedding and "
           "sliding-window KV-cache insert", _AF + "597,763-851")]
    if kind.attention == "csa":
        ops += [Op("attn.indexer", "gemm", "indexer query: its wq_b GEMM, rotary "
                   "and quant, on an aux stream", _AF + "608-627 (:1105-1166)",
                   reads=_w(a + "indexer.wq_b"), stream="aux"),
                Op("attn.indexer.compressor", "small", "indexer KV compressor "
                   "(state update, norm, rotary, cache insert)",
                   _AF + "1105-1166", reads=(a + "indexer.compressor.ape",
                                              a + "indexer.compressor.norm.weight"),
                   stream="aux")]
    if kind.attention != "swa":
        ops.append(Op("attn.compressor", "small", "KV compressor (state update, "
                      "norm, rotary, compressed-cache insert) on an aux stream",
                      _AF + "620,632", reads=(a + "compressor.ape",
                                               a + "compressor.norm.weight"),
                      stream="aux"))
    ops += [
        Op("attn.core", "attention_core", "sparse indexer top-k (csa) and FlashMLA "
           "sparse MLA decode over the window and compressed rows, in an eager "
           "break of a breakable capture", _AF + "640-649,737-760",
           reads=(a + "attn_sink",), hooks_before=("attn.before_core",),
           hooks_after=("attn.after_core",), eager_break=True),
        Op("attn.wo_a", "gemm", "inverse rotary + grouped wo_a GEMM (fp8 einsum)",
           "models/deepseek_v4/nvidia/ops/o_proj.py:35-103", reads=_w(a + "wo_a")),
        Op("attn.wo_b", "gemm", "wo_b GEMM (RowParallelLinear)", _L + "1815",
           reads=_w(a + "wo_b"), hooks_after=("attn.pre_all_reduce",)),
        Op("attn.all_reduce", "collective", "wo_b all-reduce "
           "(tensor_model_parallel_all_reduce)", _L + "1818",
           hooks_after=("attn.post_all_reduce",), condition="tp>1")]
    return tuple(ops)


def _moe(kind: LayerKind) -> tuple[Op, ...]:
    """``DeepseekV4MoE._forward_fused_moe`` (``_M:524-535``) through the MoE
    runner, shared expert first on the aux stream as for GLM-5.3."""
    s, g, r = "ffn.shared_experts.", "ffn.gate.", "ffn.experts.routed_experts."
    route = ("hash routing: expert ids from gate.tid2eid[token] (a row per "
             "token), weights from the gate scores" if kind.mlp == "hash" else
             "sqrtsoftplus scores + e_score_correction_bias, top-k, renorm")
    return (
        _hc("ffn", "ffn_norm", "", _MF + "786-805"),
        Op("moe.shared.gate_up_proj", "shared_expert", "shared expert gate_up "
           "GEMM, launched first on the aux stream", _FM + "runner/moe_runner.py:"
           "898-901 (runner/shared_experts.py:142-161)",
           reads=_w(s + "gate_up_proj"), stream="aux"),
        Op("moe.shared.act", "shared_expert", "shared expert SiluAndMulWithClamp "
           "(swiglu_limit)", _FM + "runner/shared_experts.py:142-161", stream="aux"),
        Op("moe.shared.down_proj", "shared_expert", "shared expert down GEMM "
           "(reduce_results=False)", _FM + "runner/shared_experts.py:142-161",
           reads=_w(s + "down_proj"), stream="aux"),
        Op("moe.gate", "gemm", "router gate GEMM (GateLinear, fp32 logits)",
           _FM + "runner/moe_runner.py:914", reads=(g + "weight",),
           hooks_after=("moe.after_gate",)),
        Op("moe.routing", "small", "router.select_experts: " + route,
           _FM + "runner/moe_runner.py:630-635",
           reads=(g + "e_score_correction_bias",), hooks_after=("moe.before_experts",)),
        Op("moe.align", "small", "token/expert sort", _FM + "runner/moe_runner.py:637",
           reads=(r + "_expert_map",)),
        Op("moe.w13", "expert_stream", "routed experts w13 GEMM (MXFP4); reads "
           "only the picked experts' slices", _FM + "runner/moe_runner.py:637",
           reads=(r + "w13_weight", r + "w13_weight_scale")),
        Op("moe.act", "small", "routed experts clamp SiLU-mul",
           _FM + "runner/moe_runner.py:637"),
        Op("moe.w2", "expert_stream", "routed experts w2 GEMM (MXFP4); reads "
           "only the picked experts' slices", _FM + "runner/moe_runner.py:637",
           reads=(r + "w2_weight", r + "w2_weight_scale")),
        Op("moe.sum", "small", "top-k weighted sum; the main stream waits for "
           "the shared expert and adds its output", _FM + "runner/moe_runner.py:"
           "645-647,789-792", hooks_after=("moe.pre_all_reduce",)),
        Op("moe.all_reduce", "collective", "MoE all-reduce "
           "(_maybe_reduce_final_output; TP or EP size > 1)",
           _FM + "runner/moe_runner.py:515", hooks_after=("moe.post_all_reduce",),
           condition="tp>1"),
        Op("layer.return", "small", "the layer returns (x, residual, post_mix, "
           "res_mix); the mHC post is fused into the next layer's pre-mix",
           _MF + "808", hooks_after=("layer.exit",)),
    )


def decode_timeline(kind: LayerKind) -> tuple[Op, ...]:
    """The ordered ops of one decode step of a layer of ``kind``
    (``DeepseekV4DecoderLayer.forward``, ``_M:714-808``)."""
    return _attention(kind) + _moe(kind)


def consumption_order(kind: LayerKind, paths: Sequence[str]) -> list[str]:
    """``paths`` (tensors of one layer of ``kind``) in decode consumption
    order (``records.consumption_order`` over ``decode_timeline(kind)``);
    tensors no op reads (the hash table) follow, in the given order."""
    return records.consumption_order(decode_timeline(kind), paths)


def decode_reads(kind: LayerKind) -> set[str]:
    """Every tensor path some op of ``decode_timeline(kind)`` reads."""
    return records.decode_reads(decode_timeline(kind))
