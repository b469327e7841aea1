"""GLM-5.3 tensors: the per-rank shapes of one decoder layer from a text
config (``layer_specs``), the config keys they need, dtypes, TP replication,
and the lazily created tensors (file:line in the ``vllm==0.33.0`` wheel,
paths relative to ``vllm/``). ``l2sched.model.inventory`` turns the
``TensorSpec``s into byte counts."""

from __future__ import annotations

from typing import Any, Mapping

from l2sched.model.adapters.glm5next.kinds import LayerKind
from l2sched.model.adapters.records import TensorSpec, divide

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
    the vLLM 0.33.0 constructors (``models/glm5next/common/model.py``,
    ``kda.py``, ``attention.py``; docs/sources.md#vllm-glm5next). Raises
    ``ValueError`` when a dimension does not divide by ``tp``."""
    dt = model_dtype(cfg)
    h = cfg["hidden_size"]
    specs: list[TensorSpec] = []
    if cfg["mhc"]:
        n = cfg["hc_mult"]
        mix = (2 + n) * n
        for part in ("attn", "ffn"):
            specs.append(TensorSpec(f"hc_{part}_fn", "float32", (mix, n * h), True))
            specs.append(TensorSpec(f"hc_{part}_base", "float32", (mix,), True))
            specs.append(TensorSpec(f"hc_{part}_scale", "float32", (3,), True))
    # RMSNorm weights, passed as norm_weight into the mHC kernels
    # (model.py:566-618).
    specs.append(TensorSpec("input_layernorm.weight", dt, (h,), True))
    specs.append(TensorSpec("post_attention_layernorm.weight", dt, (h,), True))
    attention = _kda_specs if kind.attention == "kda" else _mla_specs
    mlp = _dense_specs if kind.mlp == "dense" else _moe_specs
    return specs + attention(cfg, dt, tp) + mlp(cfg, dt, tp, ep, tp_rank)


def _kda_specs(cfg: Mapping[str, Any], dt: str, tp: int) -> list[TensorSpec]:
    """KDA attention (``kda.py:163-383``)."""
    h = cfg["hidden_size"]
    hd, nh, k = (cfg["linear_head_dim"], cfg["linear_num_heads"],
                 cfg["linear_conv_kernel_dim"])
    p = divide(hd * nh, tp, "linear_head_dim*linear_num_heads")
    nhl = divide(nh, tp, "linear_num_heads")
    a = "self_attn."
    specs = [TensorSpec(a + "in_proj_qkvbfg_a.weight", dt, (3 * p + nhl + 2 * hd, h),
                        False, replicated_rows=2 * hd),
             TensorSpec(a + "f_b_proj.weight", dt, (p, hd), False),
             TensorSpec(a + "dt_bias", "float32", (p,), False)]
    specs += [TensorSpec(a + f"{c}_conv1d.weight", "float32", (p, 1, k), False,
                         decode_read=False) for c in "qkv"]
    specs += [TensorSpec(a + "A_log", "float32", (1, 1, nhl, 1), False),
              TensorSpec(a + "g_b_proj.weight", dt, (p, hd), False),
              TensorSpec(a + "o_norm.weight", dt, (hd,), True),
              TensorSpec(a + "o_proj.weight", dt, (h, p), False),
              TensorSpec(a + "_merged_conv_weight", "float32", (3 * p, k), False,
                         lazy=True)]
    return specs


def _mla_specs(cfg: Mapping[str, Any], dt: str, tp: int) -> list[TensorSpec]:
    """MLA attention with its indexer (``attention.py:385-575``)."""
    h = cfg["hidden_size"]
    ql, kvl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, vd = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                      cfg["v_head_dim"])
    nl = divide(cfg["num_attention_heads"], tp, "num_attention_heads")
    ihd, inh = cfg["index_head_dim"], cfg["index_n_heads"]
    a = "self_attn."
    i = a + "indexer."
    m = a + "mla_attn.mla_attn."
    specs = [
        TensorSpec(a + "fused_qkv_a_proj.weight", dt, (ql + kvl + rope, h), True),
        TensorSpec(a + "q_a_layernorm.weight", dt, (ql,), True),
        TensorSpec(a + "q_b_proj.weight", dt, (nl * (nope + rope), ql), False),
        TensorSpec(a + "kv_a_layernorm.weight", dt, (kvl,), True),
        TensorSpec(a + "kv_b_proj.weight", dt, (nl * (nope + vd), kvl), False,
                   decode_read=False),
        TensorSpec(a + "o_proj.weight", dt, (h, nl * vd), False),
        TensorSpec(i + "index_kpool_compress_ape", "float32",
                   (cfg["index_kpool"], ihd), True),
        # Created with an explicit dtype=torch.bfloat16 (attention.py:224-226).
        TensorSpec(i + "index_kpool_compress_gate", "bfloat16", (ihd, h), True),
        TensorSpec(i + "wq_b.weight", dt, (ihd * inh, ql), True),
        TensorSpec(i + "wk_weights_proj.weight", dt, (ihd + inh, h), True),
        TensorSpec(i + "k_norm.weight", "float32", (ihd,), True),
        TensorSpec(i + "k_norm.bias", "float32", (ihd,), True),
        TensorSpec(i + "_wp_fp32", "float32", (h, inh), True, lazy=True),
    ]
    # Scalar KV-cache quantisation scales every MLAAttention registers as
    # buffers (model_executor/layers/attention/attention.py:133-139); fp32,
    # identical on every rank, not read by any op modelled here.
    specs += [TensorSpec(m + sc, "float32", (), True, decode_read=False)
              for sc in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")]
    specs += [TensorSpec(m + "W_UK_T", dt, (nl, nope, kvl), False, lazy=True,
                         view_of=a + "kv_b_proj.weight"),
              TensorSpec(m + "W_UV", dt, (nl, kvl, vd), False, lazy=True,
                         view_of=a + "kv_b_proj.weight")]
    return specs


def _dense_specs(cfg: Mapping[str, Any], dt: str, tp: int, ep: bool,
                 tp_rank: int) -> list[TensorSpec]:
    """The dense MLP of layers 0-2 (``model.py:167-217``)."""
    h = cfg["hidden_size"]
    inter = divide(cfg["intermediate_size"], tp, "intermediate_size")
    return [TensorSpec("mlp.gate_up_proj.weight", dt, (2 * inter, h), False),
            TensorSpec("mlp.down_proj.weight", dt, (h, inter), False)]


def _moe_specs(cfg: Mapping[str, Any], dt: str, tp: int, ep: bool,
               tp_rank: int) -> list[TensorSpec]:
    """The MoE: router gate, shared experts, routed experts
    (``model.py:220-353``)."""
    h = cfg["hidden_size"]
    e, im = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    specs = [TensorSpec("mlp.gate.weight", dt, (e, h), True)]
    if cfg["topk_method"] == "noaux_tc":
        specs.append(TensorSpec("mlp.gate.e_score_correction_bias", "float32", (e,),
                                True))
    ns = cfg["n_shared_experts"]
    if ns:
        si = divide(im * ns, tp, "moe_intermediate_size*n_shared_experts")
        specs += [TensorSpec("mlp.shared_experts.gate_up_proj.weight", dt,
                             (2 * si, h), False),
                  TensorSpec("mlp.shared_experts.down_proj.weight", dt, (h, si),
                             False)]
    r = "mlp.experts.routed_experts."
    if ep and tp > 1:
        lo, hi = expert_range(e, tp, tp_rank)
        specs += [TensorSpec(r + "w13_weight", dt, (hi - lo, 2 * im, h), False,
                             experts=(lo, hi)),
                  TensorSpec(r + "w2_weight", dt, (hi - lo, h, im), False,
                             experts=(lo, hi)),
                  # Global -> local expert id map (-1 = not on this rank), a
                  # non-persistent buffer (routed_experts.py:272).
                  TensorSpec(r + "_expert_map", "int32", (e,), False)]
    else:
        ir = divide(im, tp, "moe_intermediate_size")
        specs += [TensorSpec(r + "w13_weight", dt, (e, 2 * ir, h), False,
                             experts=(0, e)),
                  TensorSpec(r + "w2_weight", dt, (e, h, ir), False,
                             experts=(0, e))]
    return specs


def model_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype vLLM serves unquantized weights in: ``torch_dtype`` or
    ``dtype`` of the config (``"auto"``/absent -> ``bfloat16``)."""
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return {"auto": "bfloat16", "bf16": "bfloat16", "half": "float16",
            "fp16": "float16", "float": "float32"}.get(name, name)


#: Tensors identical on every TP rank (not TP-sharded by construction): the
#: mHC mixes and norms, KDA ``o_norm``, MLA ``fused_qkv_a_proj`` (disable_tp),
#: the MLA norms, the whole indexer (ReplicatedLinear / disable_tp) and the
#: router gate (``vllm/models/glm5next/common/``; docs/sources.md#vllm-glm5next). Prefixes end with ``.`` or ``_``.
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


#: Buffers GLM-5.3 writes during decode right before reading them (glob over
#: paths relative to the layer -> why): lint rule ``L2S003`` refuses them
#: besides vLLM's KV cache, block tables and rotary caches.
WRITTEN_BUFFERS: dict[str, str] = {
    "*k_cache*": "the indexer key cache, written by the kpool insert",
    "*conv_state*": "the KDA conv state, updated in place every step",
    "*ssm_state*": "the KDA recurrent state, updated in place every step",
    "*recurrent_state*": "the KDA recurrent state, updated in place every step",
    "*topk_indices_buffer*": "the top-k index buffer the indexer writes",
}


def is_replicated(path: str) -> bool:
    """True when every TP rank holds the same full tensor ``path``
    (``REPLICATED_PATHS``)."""
    return any(path == r or (r[-1] in "._" and path.startswith(r))
               for r in REPLICATED_PATHS)
