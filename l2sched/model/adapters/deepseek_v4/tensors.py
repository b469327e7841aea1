"""DeepSeek-V4 tensors: the per-rank shapes of one decoder layer from a
text config (``layer_specs``), the config keys they need, dtypes and TP
replication, as vLLM 0.33.0 constructs them on CUDA (file:line in the
``vllm==0.33.0`` wheel, paths relative to ``vllm/``; ``_A`` =
``models/deepseek_v4/attention.py``, ``_M`` =
``models/deepseek_v4/nvidia/model.py``). Shapes are those of the
constructed module tree, before ``process_weights_after_loading``.

Quantization follows ``DeepseekV4FP8Config``
(``models/deepseek_v4/quant_config.py:58-230``): every quantized linear is
FP8 (``float8_e4m3fn``) with a ``weight_scale_inv`` of one scale per
``weight_block_size`` block (``model_executor/layers/quantization/fp8.py:
282-339``; ``float8_e8m0fnu`` scales when ``expert_dtype`` is ``fp4``), and
routed experts are MXFP4: two 4-bit values per ``uint8`` and one ``uint8``
scale per 32 (``quantization/mxfp4.py:661-733``). The MXFP4 backends round
the expert sizes up to 128 or 256 (``fused_moe/oracle/mxfp4.py:837-880``);
DeepSeek-V4-Flash's sizes at TP <= 8 are multiples already, so no padding
is modelled. A config without ``quantization_config`` builds BF16 weights.
"""

from __future__ import annotations

from typing import Any, Mapping

from l2sched.model.adapters.deepseek_v4.kinds import LayerKind
from l2sched.model.adapters.records import TensorSpec, divide

#: Element sizes in bytes of the dtypes the model's tensors use.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4,
               "int64": 8, "uint8": 1, "float8_e4m3fn": 1, "float8_e8m0fnu": 1}

#: Config keys the analytical inventory reads, with their JSON types
#: (``int`` excludes ``bool``; ``None`` = may be null).
REQUIRED_KEYS: dict[str, tuple[type | None, ...]] = {
    "hidden_size": (int,), "num_hidden_layers": (int,),
    "num_attention_heads": (int,), "head_dim": (int,), "q_lora_rank": (int,),
    "o_lora_rank": (int,), "o_groups": (int,), "index_n_heads": (int,),
    "index_head_dim": (int,), "n_routed_experts": (int,),
    "n_shared_experts": (int, None), "num_experts_per_tok": (int,),
    "moe_intermediate_size": (int,), "hc_mult": (int,), "vocab_size": (int,),
}
#: Keys read when present (defaults: ``expert_dtype`` ``fp4``,
#: ``quant_config.py:90``; ``topk_method`` absent = no score-correction
#: bias, ``nvidia/model.py:301``). The layer kinds come from
#: ``compress_ratios`` and ``num_hash_layers`` (config.json) or from
#: ``layer_types``, ``compress_rates`` and ``mlp_layer_types`` (vLLM's
#: ``hf_text_config``, transformers' ``DeepseekV4Config``): one pair must be
#: there (``validate_config``).
OPTIONAL_KEYS: dict[str, tuple[type | None, ...]] = {
    "compress_ratios": (list, None), "num_hash_layers": (int, None),
    "layer_types": (list, None), "compress_rates": (dict, None),
    "mlp_layer_types": (list, None),
    "quantization_config": (dict, None), "expert_dtype": (str, None),
    "topk_method": (str, None), "hidden_act": (str, None),
    "torch_dtype": (str, None), "dtype": (str, None),
    "vision_n_layers": (int, None),
}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def model_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype of the unquantized tensors (norms, gate, compressor):
    ``torch_dtype`` or ``dtype`` of the config, ``bfloat16`` when absent or
    ``auto`` (DeepSeek-V4-Flash's ``torch_dtype``)."""
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return {"auto": "bfloat16", "bf16": "bfloat16"}.get(name, name)


def block_size(cfg: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(block_n, block_k)`` of the FP8 block quantization, ``None`` for a
    config without ``quantization_config`` (BF16 weights)."""
    q = cfg.get("quantization_config")
    if not q:
        return None
    bn, bk = q.get("weight_block_size") or (128, 128)
    return int(bn), int(bk)


def _linear(path: str, n: int, k: int, cfg: Mapping[str, Any], replicated: bool,
            quantized: bool = True) -> list[TensorSpec]:
    """A linear layer's per-rank ``weight`` [n, k] and, when FP8, its
    ``weight_scale_inv`` [ceil(n / block_n), ceil(k / block_k)]
    (``utils/fp8_utils.py`` ``create_fp8_scale_parameter``)."""
    blk = block_size(cfg) if quantized else None
    if blk is None:
        return [TensorSpec(path + ".weight", model_dtype(cfg), (n, k), replicated)]
    scale_dt = "float8_e8m0fnu" if expert_dtype(cfg) == "fp4" else "float32"
    return [TensorSpec(path + ".weight", "float8_e4m3fn", (n, k), replicated),
            TensorSpec(path + ".weight_scale_inv", scale_dt,
                       (_cdiv(n, blk[0]), _cdiv(k, blk[1])), replicated)]


def expert_dtype(cfg: Mapping[str, Any]) -> str:
    """``expert_dtype`` of the config, ``fp4`` when absent
    (``quant_config.py:90``)."""
    return cfg.get("expert_dtype") or "fp4"


def expert_range(n_experts: int, ep_size: int, ep_rank: int) -> tuple[int, int]:
    """Global expert ids ``[start, stop)`` of ``ep_rank``: ``n // ep_size``
    each, contiguous (``nvidia/model.py:409-413``, no redundant experts)."""
    base = n_experts // ep_size
    return ep_rank * base, (ep_rank + 1) * base


def layer_specs(cfg: Mapping[str, Any], kind: LayerKind, tp: int, ep: bool,
                tp_rank: int) -> list[TensorSpec]:
    """Analytical per-rank tensors of one layer of ``kind``, in module order.

    ``cfg`` is a validated text config; ``tp`` the TP size; ``ep`` True for
    ``--enable-expert-parallel`` with DP = 1 (EP size = ``tp``). Raises
    ``ValueError`` when a dimension does not split at ``tp``."""
    return _attention_specs(cfg, kind, tp) + _ffn_specs(cfg, kind, tp, ep, tp_rank) \
        + _layer_specs(cfg)


def _attention_specs(cfg: Mapping[str, Any], kind: LayerKind, tp: int
                     ) -> list[TensorSpec]:
    """``DeepseekV4Attention`` (``_A:201-377``) with the H200's FlashMLA
    subclass (``nvidia/flashmla.py:51-85``)."""
    dt, h, hd = model_dtype(cfg), cfg["hidden_size"], cfg["head_dim"]
    nh, ql = cfg["num_attention_heads"], cfg["q_lora_rank"]
    groups, ol = cfg["o_groups"], cfg["o_lora_rank"]
    heads = divide(nh, tp, "num_attention_heads")
    divide(groups, tp, "o_groups")
    if heads > 128:
        raise ValueError(f"{heads} heads per rank: FlashMLA takes at most 128 "
                         "(nvidia/flashmla.py:80-84)")
    a = "attn."
    # attn_sink: padded to FlashMLA's 64 or 128 query heads (_A:248-250).
    specs = [TensorSpec(a + "attn_sink", "float32", (64 if heads <= 64 else 128,),
                        False)]
    # fused_wqa_wkv: a replicated [q_lora; head_dim] projection (_A:252-259).
    specs += _linear(a + "fused_wqa_wkv", ql + hd, h, cfg, True)
    specs += [TensorSpec(a + "q_norm.weight", dt, (ql,), True)]
    specs += _linear(a + "wq_b", heads * hd, ql, cfg, False)
    specs += [TensorSpec(a + "kv_norm.weight", dt, (hd,), True)]
    # wo_a: grouped [o_groups * o_lora, heads * head_dim / o_groups]
    # column-parallel; wo_b: row-parallel to hidden (_A:271-288).
    specs += _linear(a + "wo_a", groups * ol // tp, nh * hd // groups, cfg, False)
    specs += _linear(a + "wo_b", h, groups * ol // tp, cfg, False)
    if kind.attention != "swa":
        ratio = 4 if kind.attention == "csa" else 128
        specs += _compressor(a + "compressor.", cfg, ratio, hd)
    if kind.attention == "csa":
        ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
        # DeepseekV4Indexer (_A:944-1070): replicated wq_b (FP8), the
        # unquantized weights_proj, and its own head_dim-128 compressor.
        i = a + "indexer."
        specs += _linear(i + "wq_b", ih * ihd, ql, cfg, True)
        specs += _linear(i + "weights_proj", ih, h, cfg, True, quantized=False)
        specs += _compressor(i + "compressor.", cfg, 4, ihd)
    return specs


def _compressor(p: str, cfg: Mapping[str, Any], ratio: int, hd: int
                ) -> list[TensorSpec]:
    """``DeepseekCompressor`` (``models/deepseek_v4/compressor.py:239-280``):
    ``ape`` fp32 [ratio, coff * hd] (coff 2 for ratio 4: overlapping
    windows), the unquantized replicated ``fused_wkv_wgate`` [2 * coff * hd,
    hidden] and the RMSNorm of ``hd``."""
    coff = 2 if ratio == 4 else 1
    dt = model_dtype(cfg)
    return [TensorSpec(p + "ape", "float32", (ratio, coff * hd), True),
            TensorSpec(p + "fused_wkv_wgate.weight", dt,
                       (2 * coff * hd, cfg["hidden_size"]), True),
            TensorSpec(p + "norm.weight", dt, (hd,), True)]


def _ffn_specs(cfg: Mapping[str, Any], kind: LayerKind, tp: int, ep: bool,
               tp_rank: int) -> list[TensorSpec]:
    """``DeepseekV4MoE`` (``_M:205-447``): the replicated gate with its hash
    table or score-correction bias, the shared expert (``DeepseekV4MLP``,
    TP-split, FP8) and the routed experts."""
    dt, h, e = model_dtype(cfg), cfg["hidden_size"], cfg["n_routed_experts"]
    im, k = cfg["moe_intermediate_size"], cfg["num_experts_per_tok"]
    g = "ffn.gate."
    specs = [TensorSpec(g + "weight", dt, (e, h), True)]
    if kind.mlp == "hash":
        # [vocab, top-k] expert ids; a decode step gathers one row per token.
        specs.append(TensorSpec(g + "tid2eid", "int32", (cfg["vocab_size"], k),
                                True, decode_read=False))
    elif cfg.get("topk_method") == "noaux_tc":
        specs.append(TensorSpec(g + "e_score_correction_bias", "float32", (e,), True))
    if cfg.get("n_shared_experts"):
        si = im * cfg["n_shared_experts"]
        blk = block_size(cfg)
        if blk is not None:  # whole blocks per rank (_M:148-152)
            si = _cdiv(si // blk[0], tp) * blk[0] * tp
        s = "ffn.shared_experts."
        specs += _linear(s + "gate_up_proj", 2 * si // tp, h, cfg, False)
        specs += _linear(s + "down_proj", h, divide(si, tp, "shared intermediate"),
                         cfg, False)
    return specs + _expert_specs(cfg, tp, ep, tp_rank)


def _expert_specs(cfg: Mapping[str, Any], tp: int, ep: bool, tp_rank: int
                  ) -> list[TensorSpec]:
    """Routed experts (``RoutedExperts`` of ``FusedMoEFactory``, ``_M:400-447``):
    w13 = [w1; w3] rows, w2 = down; all experts with the intermediate split
    by TP, or under EP this rank's experts whole."""
    h, e, im = cfg["hidden_size"], cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    if tp > e:
        raise ValueError(f"the TP size {tp} is greater than n_routed_experts = {e}")
    if ep and tp > 1:
        lo, hi = expert_range(e, tp, tp_rank)
        ir = im
    else:
        lo, hi, ir = 0, e, divide(im, tp, "moe_intermediate_size")
    n, r = hi - lo, "ffn.experts.routed_experts."
    if block_size(cfg) is None:
        specs = [TensorSpec(r + "w13_weight", model_dtype(cfg), (n, 2 * ir, h), False,
                            experts=(lo, hi)),
                 TensorSpec(r + "w2_weight", model_dtype(cfg), (n, h, ir), False,
                            experts=(lo, hi))]
    else:
        specs = [TensorSpec(r + "w13_weight", "uint8", (n, 2 * ir, h // 2), False,
                            experts=(lo, hi)),
                 TensorSpec(r + "w13_weight_scale", "uint8", (n, 2 * ir, h // 32),
                            False, experts=(lo, hi)),
                 TensorSpec(r + "w2_weight", "uint8", (n, h, ir // 2), False,
                            experts=(lo, hi)),
                 TensorSpec(r + "w2_weight_scale", "uint8", (n, h, ir // 32), False,
                            experts=(lo, hi))]
    if ep and tp > 1:
        # Global -> local expert id map, a non-persistent buffer
        # (fused_moe/routed_experts.py:272).
        specs.append(TensorSpec(r + "_expert_map", "int32", (e,), False))
    return specs


def _layer_specs(cfg: Mapping[str, Any]) -> list[TensorSpec]:
    """The decoder layer's own tensors (``_M:615-664``): the two RMSNorms and
    the hyper-connection mixers of attention and FFN, fp32: ``hc_*_fn``
    [(2 + hc) * hc, hc * hidden], ``hc_*_base`` [(2 + hc) * hc],
    ``hc_*_scale`` [3]."""
    dt, h, hc = model_dtype(cfg), cfg["hidden_size"], cfg["hc_mult"]
    mix = (2 + hc) * hc
    out = [TensorSpec("attn_norm.weight", dt, (h,), True),
           TensorSpec("ffn_norm.weight", dt, (h,), True)]
    for part in ("attn", "ffn"):
        out += [TensorSpec(f"hc_{part}_fn", "float32", (mix, hc * h), True),
                TensorSpec(f"hc_{part}_base", "float32", (mix,), True),
                TensorSpec(f"hc_{part}_scale", "float32", (3,), True)]
    return out


#: Tensors identical on every TP rank (prefixes end with ``.``); the
#: TP-split ones are ``wq_b``, ``wo_a``, ``wo_b``, ``attn_sink``, the shared
#: expert and the routed experts.
REPLICATED_PATHS = (
    "attn.fused_wqa_wkv.", "attn.q_norm.", "attn.kv_norm.", "attn.compressor.",
    "attn.indexer.", "ffn.gate.", "attn_norm.", "ffn_norm.", "hc_",
)

#: Buffers DeepSeek-V4 writes during decode right before reading them (glob
#: over paths relative to the layer -> why): lint rule ``L2S003`` refuses
#: them besides vLLM's KV cache (the sliding-window, compressed and
#: compressor-state caches are ``kv_cache`` tensors), block tables and
#: rotary caches.
WRITTEN_BUFFERS: dict[str, str] = {
    "*k_cache*": "the indexer key cache, written by the compressor's cache insert "
                 "(models/deepseek_v4/attention.py:1030-1045)",
    "*topk_indices_buffer*": "the top-k index buffer the indexer writes "
                             "(models/deepseek_v4/attention.py:299,1056)",
}


def is_replicated(path: str) -> bool:
    """True when every TP rank holds the same full tensor ``path``
    (``REPLICATED_PATHS``)."""
    return any(path.startswith(r) for r in REPLICATED_PATHS)
