"""Facts read off a live Qwen3-MoE module tree (vLLM's
``Qwen3MoeDecoderLayer``): where the decoder layers are, each layer's kind,
and the ``TensorSpec`` of a tensor found in a layer.
``l2sched.model.inventory.live_inventory`` calls these; they touch torch
only through the modules' own attributes.

Pipeline parallelism needs no ``PIPELINE_PARALLEL_REFUSAL`` (the protocol's
default, ``""``): ``Qwen3MoeForCausalLM`` supports PP (``SupportsPP``,
``qwen3_moe.py:543``; layers of other PP ranks are ``PPMissingLayer``
placeholders, ``model_executor/models/utils.py`` ``make_layers``): each rank
plans and installs its own layers."""

from __future__ import annotations

from typing import Any

from l2sched.model.adapters import records
from l2sched.model.adapters.qwen3_moe.kinds import GQA_DENSE, GQA_MOE, LayerKind
from l2sched.model.adapters.qwen3_moe.tensors import (
    TensorSpec,
    expert_range,
    is_replicated,
)
from l2sched.model.adapters.qwen3_moe.timeline import decode_reads

#: Where the decoder-layer ``ModuleList`` sits: in a ``Qwen3MoeForCausalLM``
#: (``.model.layers``) or a ``Qwen3MoeModel`` (``.layers``).
DECODER_LAYER_PATHS = ("model.layers", "layers")

#: ``Qwen3MoeModel`` (the ``.model`` of a ``Qwen3MoeForCausalLM``) is a
#: ``@support_torch_compile`` class (``qwen3_moe.py:434``): under vLLM's
#: default ``compilation_config.mode`` Dynamo traces its decoder layers.
COMPILED_MODULES = ("model",)


def decoder_layers(model: Any) -> Any:
    """The decoder-layer ``ModuleList`` of a ``Qwen3MoeForCausalLM`` or a
    ``Qwen3MoeModel``, or ``model`` itself when it is already the list."""
    return records.decoder_layers(model, DECODER_LAYER_PATHS)


def live_layer_kind(layer: Any) -> LayerKind:
    """The kind of a live ``Qwen3MoeDecoderLayer``: ``gqa+moe`` when its
    ``mlp`` has ``experts`` (``Qwen3MoeSparseMoeBlock``), else ``gqa+dense``
    (``Qwen3MoeMLP``; ``qwen3_moe.py:390-405``)."""
    return GQA_MOE if hasattr(layer.mlp, "experts") else GQA_DENSE


def live_spec(layer: Any, kind: LayerKind, path: str, shape: tuple[int, ...],
              dtype: str, tp: int, ep: bool, tp_rank: int) -> TensorSpec:
    """The ``TensorSpec`` of a tensor found in a live layer (``shape``,
    ``dtype`` as read from it): replication from ``REPLICATED_PATHS``,
    ``decode_read`` from the decode timeline, the expert range from the MoE
    block's ``n_routed_experts`` (``qwen3_moe.py:150``) and
    ``expert_range``."""
    experts = None
    if path.endswith(("routed_experts.w13_weight", "routed_experts.w2_weight")):
        n = layer.mlp.n_routed_experts
        experts = expert_range(n, tp, tp_rank) if ep and tp > 1 else (0, n)
    return TensorSpec(path, dtype, tuple(shape), is_replicated(path),
                      decode_read=path in decode_reads(kind), experts=experts)
