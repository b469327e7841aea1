"""Facts read off a live GLM-5.3 module tree (vLLM's ``Glm5NextDecoderLayer``):
where the decoder layers are, each layer's kind, the shapes of lazily
created tensors before they exist, and the ``TensorSpec`` of a tensor found
in a layer. ``l2sched.model.inventory.live_inventory`` calls these; they
touch torch only through the modules' own attributes."""

from __future__ import annotations

from typing import Any

from l2sched.model.adapters import records
from l2sched.model.adapters.glm5next.kinds import ATTENTION_KINDS, LayerKind
from l2sched.model.adapters.glm5next.tensors import (
    LAZY_TENSORS,
    PARTLY_REPLICATED,
    TensorSpec,
    expert_range,
    is_replicated,
)
from l2sched.model.adapters.glm5next.timeline import decode_reads

#: Where the decoder-layer ``ModuleList`` sits: in a ``Glm5NextForCausalLM``,
#: a ``Glm5NextForConditionalGeneration``, a ``Glm5NextModel``.
DECODER_LAYER_PATHS = ("model.layers", "language_model.model.layers", "layers")

#: No GLM-5.3 module is a ``@support_torch_compile`` class in vLLM 0.33.0
#: (``models/glm5next/common/model.py``: ``Glm5NextModel`` is a plain
#: ``nn.Module``), and vLLM serves it with breakable CUDA graphs, which set
#: ``compilation_config.mode`` to NONE (``config/vllm.py:76-90, 842-870``):
#: its decoder layers run as Python and the hooks run at every forward.
COMPILED_MODULES: tuple[str, ...] = ()

#: vLLM 0.33.0 gates pipeline parallelism off for GLM-5.3: both classes
#: inherit ``SupportsPP`` (so the config check passes), but neither has
#: ``make_empty_intermediate_tensors``, which a non-first PP rank's model
#: runner calls (``v1/worker/gpu_model_runner.py:5742``; "PP is gated off
#: for GLM-5.3-Flash", ``models/glm5next/common/model.py:836``, ``:1235``),
#: and the deferred mHC state would be dropped between PP ranks (``:835-840``).
PIPELINE_PARALLEL_REFUSAL = ("vLLM 0.33.0 gates PP off for GLM-5.3 (no "
                             "make_empty_intermediate_tensors, "
                             "models/glm5next/common/model.py:836); l2sched "
                             "supports PP=1 for it")


def decoder_layers(model: Any) -> Any:
    """The decoder-layer ``ModuleList`` of a ``Glm5NextForCausalLM``
    (``.model.layers``), a ``Glm5NextForConditionalGeneration``
    (``.language_model.model.layers``), a ``Glm5NextModel`` (``.layers``), or
    ``model`` itself when it is already the list."""
    return records.decoder_layers(model, DECODER_LAYER_PATHS)


def live_layer_kind(layer: Any) -> LayerKind:
    """The ``LayerKind`` of a live ``Glm5NextDecoderLayer``: attention from its
    ``layer_kind`` attribute (``model.py:382``), MLP ``moe`` when ``layer.mlp``
    has ``experts`` (``Glm5NextMoE``)."""
    attn = getattr(layer, "layer_kind", None)
    if attn not in ATTENTION_KINDS:
        attn = "kda" if hasattr(layer.self_attn, "in_proj_qkvbfg_a") else "mla"
    return LayerKind(attn, "moe" if hasattr(layer.mlp, "experts") else "dense")


def lazy_paths(kind: LayerKind) -> list[str]:
    """The ``LAZY_TENSORS`` a layer of ``kind`` has (those of its attention
    kind), in catalogue order."""
    return [p for p, (attn, _view, _src) in LAZY_TENSORS.items()
            if attn == kind.attention]


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


def live_spec(layer: Any, kind: LayerKind, path: str, shape: tuple[int, ...],
              dtype: str, tp: int, ep: bool, tp_rank: int) -> TensorSpec:
    """The ``TensorSpec`` of a tensor found in a live layer (``shape``,
    ``dtype`` as read from it): replication from
    ``REPLICATED_PATHS``/``PARTLY_REPLICATED`` (row count read from the live
    module), ``lazy``/``view_of`` from ``LAZY_TENSORS``, ``decode_read`` from
    the decode timeline, the expert range from ``layer.mlp.n_routed_experts``
    and ``expert_range``."""
    rows = 0
    if path in PARTLY_REPLICATED:
        rows = 2 * getattr(layer.self_attn, PARTLY_REPLICATED[path])
    lazy = LAZY_TENSORS.get(path)
    experts = None
    if path.endswith(("routed_experts.w13_weight", "routed_experts.w2_weight")):
        n = layer.mlp.n_routed_experts
        experts = expert_range(n, tp, tp_rank) if ep and tp > 1 else (0, n)
    return TensorSpec(path, dtype, tuple(shape), is_replicated(path), rows,
                      lazy is not None, lazy[1] if lazy else "",
                      path in decode_reads(kind), experts)
