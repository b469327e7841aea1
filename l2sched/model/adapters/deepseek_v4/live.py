"""Facts read off a live DeepSeek-V4 module tree (vLLM's
``DeepseekV4DecoderLayer``): where the decoder layers are, each layer's kind,
and the ``TensorSpec`` of a tensor found in a layer.
``l2sched.model.inventory.live_inventory`` calls these; they touch torch
only through the modules' own attributes.

Pipeline parallelism needs no ``PIPELINE_PARALLEL_REFUSAL`` (the protocol's
default, ``""``): ``DeepseekV4ForCausalLM`` supports PP (``SupportsPP``,
``nvidia/model.py:1309-1311``; ``make_layers`` at :864): each rank plans and
installs its own layers. No lazily created tensor is modelled (the
protocol's default ``lazy_paths``): layer 0's ``hc_attn_fn_broadcast``, set
after weight loading by ``finalize_mhc_broadcast_weights``
(``nvidia/model.py:1210-1223``), is a plain attribute of one layer, not a
tensor of a kind."""

from __future__ import annotations

from typing import Any

from l2sched.model.adapters import records
from l2sched.model.adapters.deepseek_v4.kinds import LayerKind
from l2sched.model.adapters.deepseek_v4.tensors import (
    TensorSpec,
    expert_range,
    is_replicated,
)
from l2sched.model.adapters.deepseek_v4.timeline import decode_reads

#: Where the decoder-layer ``ModuleList`` sits: in a
#: ``DeepseekV4ForCausalLM`` (``.model.layers``) or a ``DeepseekV4Model``
#: (``.layers``).
DECODER_LAYER_PATHS = ("model.layers", "layers")

#: ``DeepseekV4Model`` is not a ``@support_torch_compile`` class
#: (``models/deepseek_v4/nvidia/model.py:811``): the layers run as Python.
COMPILED_MODULES: tuple[str, ...] = ()


def decoder_layers(model: Any) -> Any:
    """The decoder-layer ``ModuleList`` of a ``DeepseekV4ForCausalLM`` or a
    ``DeepseekV4Model``, or ``model`` itself when it is already the list."""
    return records.decoder_layers(model, DECODER_LAYER_PATHS)


def live_layer_kind(layer: Any) -> LayerKind:
    """The kind of a live ``DeepseekV4DecoderLayer``: ``csa`` when its
    attention has an ``indexer``, else ``hca`` when it has a ``compressor``,
    else ``swa`` (``attention.py:302,369``); ``hash`` when its gate holds a
    ``tid2eid`` table, else ``moe`` (``nvidia/model.py:284-298``)."""
    attn = layer.attn
    att = ("csa" if getattr(attn, "indexer", None) is not None else
           "hca" if getattr(attn, "compressor", None) is not None else "swa")
    mlp = "hash" if getattr(layer.ffn.gate, "tid2eid", None) is not None else "moe"
    return LayerKind(att, mlp)


def live_spec(layer: Any, kind: LayerKind, path: str, shape: tuple[int, ...],
              dtype: str, tp: int, ep: bool, tp_rank: int) -> TensorSpec:
    """The ``TensorSpec`` of a tensor found in a live layer (``shape``,
    ``dtype`` as read from it): replication from ``REPLICATED_PATHS``,
    ``decode_read`` from the decode timeline, the expert range from the MoE
    block's ``n_routed_experts`` (``nvidia/model.py:239-243``)."""
    experts = None
    if ".routed_experts.w" in path and not path.endswith("bias"):
        n = layer.ffn.n_routed_experts
        experts = expert_range(n, tp, tp_rank) if ep and tp > 1 else (0, n)
    return TensorSpec(path, dtype, tuple(shape), is_replicated(path),
                      decode_read=path in decode_reads(kind), experts=experts)
