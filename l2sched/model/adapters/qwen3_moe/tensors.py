"""Qwen3-MoE tensors: the per-rank shapes of one decoder layer from a text
config (``layer_specs``), the config keys they need, dtypes and TP
replication (file:line in the ``vllm==0.33.0`` wheel, paths relative to
``vllm/``). ``l2sched.model.inventory`` turns the ``TensorSpec``s into byte
counts. Qwen3-MoE has no lazily created tensors: every tensor a decode step
reads is a parameter or buffer of the constructed model."""

from __future__ import annotations

from typing import Any, Mapping

from l2sched.model.adapters.qwen3_moe.kinds import LayerKind
from l2sched.model.adapters.records import TensorSpec, divide

#: Element sizes in bytes of the dtypes the model's tensors use.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4,
               "int64": 8}

#: Config keys the analytical inventory reads, with their JSON types
#: (``int`` excludes ``bool``). ``None`` in the tuple = the key may be null.
REQUIRED_KEYS: dict[str, tuple[type | None, ...]] = {
    "hidden_size": (int,), "intermediate_size": (int,),
    "moe_intermediate_size": (int,), "num_hidden_layers": (int,),
    "num_attention_heads": (int,), "num_key_value_heads": (int,),
    "num_experts": (int,), "num_experts_per_tok": (int,),
}
#: Keys read when present (else the defaults of transformers'
#: ``Qwen3MoeConfig``, which vLLM reads through ``getattr`` with the same
#: defaults: ``qwen3_moe.py:376-377,387-388``).
OPTIONAL_KEYS: dict[str, tuple[type | None, ...]] = {
    "head_dim": (int, None), "decoder_sparse_step": (int, None),
    "mlp_only_layers": (list, None), "attention_bias": (bool, None),
    "shared_expert_intermediate_size": (int, None), "hidden_act": (str, None),
    "torch_dtype": (str, None), "dtype": (str, None),
}


def model_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype vLLM serves the unquantized weights in: ``torch_dtype`` or
    ``dtype`` of the config (``"auto"``/absent -> ``bfloat16``, the dtype
    of the public Qwen3-MoE checkpoints)."""
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return {"auto": "bfloat16", "bf16": "bfloat16", "half": "float16",
            "fp16": "float16", "float": "float32"}.get(name, name)


def head_dim(cfg: Mapping[str, Any]) -> int:
    """``head_dim`` of the config, else ``hidden_size //
    num_attention_heads`` (``qwen3_moe.py:277``)."""
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def kv_heads_per_rank(cfg: Mapping[str, Any], tp: int) -> int:
    """KV heads each TP rank holds: ``num_key_value_heads / tp`` when it
    divides, else 1 (each KV head replicated over ``tp /
    num_key_value_heads`` ranks; ``qwen3_moe.py:267-276``, ``QKVParallelLinear``
    in ``model_executor/layers/linear.py``). Raises ``ValueError`` when
    neither divides the other."""
    kv = cfg["num_key_value_heads"]
    if kv >= tp:
        return divide(kv, tp, "num_key_value_heads")
    if tp % kv:
        raise ValueError(f"the TP size {tp} is not a multiple of "
                         f"num_key_value_heads = {kv}")
    return 1


def expert_range(n_experts: int, ep_size: int, ep_rank: int) -> tuple[int, int]:
    """Global expert ids ``[start, stop)`` owned by ``ep_rank`` under vLLM's
    linear expert placement: ``n // ep_size`` each, the remainder on the
    last rank (``model_executor/layers/fused_moe/expert_map_manager.py:22-90``,
    ``determine_expert_map``)."""
    base = n_experts // ep_size
    start = ep_rank * base
    return start, n_experts if ep_rank == ep_size - 1 else start + base


def layer_specs(cfg: Mapping[str, Any], kind: LayerKind, tp: int, ep: bool,
                tp_rank: int) -> list[TensorSpec]:
    """Analytical per-rank tensors of one layer of ``kind``, in module order.

    ``cfg`` is a validated text config; ``tp`` the TP size; ``ep`` True for
    ``--enable-expert-parallel`` with DP = 1 (EP size = ``tp``). Shapes
    follow the vLLM 0.33.0 constructors (``qwen3_moe.py:88-409``). Raises
    ``ValueError`` when a dimension does not split at ``tp``."""
    dt = model_dtype(cfg)
    h, hd = cfg["hidden_size"], head_dim(cfg)
    nq = divide(cfg["num_attention_heads"], tp, "num_attention_heads")
    nkv = kv_heads_per_rank(cfg, tp)
    a = "self_attn."
    qkv = (nq + 2 * nkv) * hd
    # Qwen3MoeAttention (qwen3_moe.py:284-327): QKVParallelLinear, the
    # RowParallelLinear o_proj, per-head q/k RMSNorms, the Attention layer's
    # scalar KV-cache quantisation scales (buffers,
    # model_executor/layers/attention/attention.py:133-139, never read by a
    # bf16 decode step modelled here).
    specs = [TensorSpec(a + "qkv_proj.weight", dt, (qkv, h), False)]
    if cfg.get("attention_bias"):
        specs.append(TensorSpec(a + "qkv_proj.bias", dt, (qkv,), False))
    specs += [TensorSpec(a + "o_proj.weight", dt, (h, nq * hd), False)]
    specs += [TensorSpec(a + "attn." + sc, "float32", (), True, decode_read=False)
              for sc in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")]
    specs += [TensorSpec(a + "q_norm.weight", dt, (hd,), True),
              TensorSpec(a + "k_norm.weight", dt, (hd,), True)]
    mlp = _moe_specs(cfg, dt, tp, ep, tp_rank) if kind.mlp == "moe" else [
        TensorSpec("mlp.gate_up_proj.weight", dt,
                   (2 * divide(cfg["intermediate_size"], tp, "intermediate_size"), h),
                   False),
        TensorSpec("mlp.down_proj.weight", dt,
                   (h, divide(cfg["intermediate_size"], tp, "intermediate_size")),
                   False)]
    # RMSNorms of the decoder layer (qwen3_moe.py:406-409).
    return specs + mlp + [TensorSpec("input_layernorm.weight", dt, (h,), True),
                          TensorSpec("post_attention_layernorm.weight", dt, (h,),
                                     True)]


def _moe_specs(cfg: Mapping[str, Any], dt: str, tp: int, ep: bool,
               tp_rank: int) -> list[TensorSpec]:
    """The sparse MoE block (``qwen3_moe.py:133-217``): the replicated router
    gate (``GateLinear``), then the routed experts of ``FusedMoEFactory``
    (``MoERunner.routed_experts``; w13 = [gate; up] rows, w2 = down)."""
    h, e, im = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
    if tp > e:  # qwen3_moe.py:154-158
        raise ValueError(f"the TP size {tp} is greater than num_experts = {e}")
    specs = [TensorSpec("mlp.gate.weight", dt, (e, h), True)]
    r = "mlp.experts.routed_experts."
    if ep and tp > 1:
        lo, hi = expert_range(e, tp, tp_rank)
        return specs + [
            TensorSpec(r + "w13_weight", dt, (hi - lo, 2 * im, h), False,
                       experts=(lo, hi)),
            TensorSpec(r + "w2_weight", dt, (hi - lo, h, im), False,
                       experts=(lo, hi)),
            # Global -> local expert id map (-1 = not on this rank), a
            # non-persistent buffer (fused_moe/routed_experts.py:272).
            TensorSpec(r + "_expert_map", "int32", (e,), False)]
    ir = divide(im, tp, "moe_intermediate_size")
    return specs + [
        TensorSpec(r + "w13_weight", dt, (e, 2 * ir, h), False, experts=(0, e)),
        TensorSpec(r + "w2_weight", dt, (e, h, ir), False, experts=(0, e))]


#: Tensors identical on every TP rank: the per-head q/k norms, the layer's
#: RMSNorms, the Attention layer's scalar scales and the router gate
#: (``ReplicatedLinear``). Prefixes end with ``.``.
REPLICATED_PATHS = (
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.attn.",
    "mlp.gate.",
)


def is_replicated(path: str) -> bool:
    """True when every TP rank holds the same full tensor ``path``
    (``REPLICATED_PATHS``)."""
    return any(path == r or (r.endswith(".") and path.startswith(r))
               for r in REPLICATED_PATHS)
