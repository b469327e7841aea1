"""Model adapter for vLLM 0.33.0's GLM-5.3 (``vllm/models/glm5next``).

Every fact is data with its source: file:line in the ``vllm==0.33.0`` wheel
(paths relative to ``vllm/``), checked against the real vLLM code on a
CPU-only host (docs/sources.md#vllm-glm5next). One module per concern:

- ``kinds``: the kind (KDA/MLA attention, dense/MoE MLP) of every decoder
  layer (``layer_kinds``);
- ``hooks``: the hook catalogue a schedule may name (``HOOKS``), each with
  how it is installed without editing vLLM and the graph modes that run it;
- ``timeline``: the ordered operations of one decode step per layer kind
  (``decode_timeline``) and the consumption order of tensors;
- ``tensors``: analytical per-rank tensor shapes (``layer_specs``), config
  keys, replication and lazily created tensors;
- ``live``: the same facts read off a live module tree;
- ``docs``: the generator of ``docs/hooks.md``.

This package namespace is the adapter interface
(``l2sched.model.adapters.get_adapter("glm5next")``). Paths of tensors and
modules are relative to ``model.layers.{i}``.
"""

from __future__ import annotations

from l2sched.model.adapters.glm5next.hooks import (
    HOOKS,
    HOOKS_BY_NAME,
    HookPoint,
    Install,
)
from l2sched.model.adapters.glm5next.kinds import (
    ATTENTION_KINDS,
    FLASH_KINDS,
    MLP_KINDS,
    LayerKind,
    layer_kinds,
)
from l2sched.model.adapters.glm5next.live import (
    DECODER_LAYER_PATHS,
    decoder_layers,
    derive_lazy,
    live_layer_kind,
    live_spec,
)
from l2sched.model.adapters.glm5next.tensors import (
    DTYPE_BYTES,
    EXCLUDED_BUFFERS,
    LAZY_TENSORS,
    OPTIONAL_KEYS,
    PARTLY_REPLICATED,
    REPLICATED_PATHS,
    REQUIRED_KEYS,
    TensorSpec,
    canonical_path,
    expert_range,
    is_replicated,
    layer_specs,
    model_dtype,
)
from l2sched.model.adapters.glm5next.timeline import (
    CONDITIONS,
    OP_CLASSES,
    Op,
    condition_holds,
    consumption_order,
    core_state_bytes,
    decode_reads,
    decode_timeline,
)

NAME = "glm5next"

#: ``architectures[0]`` / ``model_type`` values of a ``config.json`` this
#: adapter serves (text-only and multimodal checkpoints).
ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
MODEL_TYPES = ("glm5_next_text", "glm5_next")

#: The config embedded for this adapter (package data of ``l2sched.data``;
#: sources in ``glm53-flash-config.md`` next to it) and its human name.
DEFAULT_CONFIG = "glm53-flash-config.json"
DEFAULT_MODEL_NAME = "GLM-5.3-Flash"

__all__ = [
    "ARCHITECTURES", "ATTENTION_KINDS", "CONDITIONS", "DECODER_LAYER_PATHS",
    "DEFAULT_CONFIG", "DEFAULT_MODEL_NAME", "DTYPE_BYTES", "EXCLUDED_BUFFERS",
    "FLASH_KINDS", "HOOKS", "HOOKS_BY_NAME", "HookPoint", "Install",
    "LAZY_TENSORS", "LayerKind", "MLP_KINDS", "MODEL_TYPES", "NAME", "OPTIONAL_KEYS",
    "OP_CLASSES", "Op", "PARTLY_REPLICATED", "REPLICATED_PATHS", "REQUIRED_KEYS",
    "TensorSpec", "canonical_path", "condition_holds", "consumption_order", "core_state_bytes",
    "decode_reads", "decode_timeline", "decoder_layers", "derive_lazy",
    "expert_range", "is_replicated", "layer_kinds", "layer_specs",
    "live_layer_kind", "live_spec", "model_dtype",
]
