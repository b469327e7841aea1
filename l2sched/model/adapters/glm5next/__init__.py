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
- ``config``: the embedded config, bounds and checks of config values,
  the config of a subset of the layers;
- ``docs``: the generator of ``docs/hooks.md``.

This package namespace implements ``l2sched.model.adapters.protocol.
ModelAdapter`` (``l2sched.model.adapters.get_adapter("glm5next")``). Paths of tensors and
modules are relative to ``model.layers.{i}``.
"""

from __future__ import annotations

from typing import Callable

from l2sched.model.adapters.glm5next.config import (
    CONFIG_BOUNDS,
    DEFAULT_CONFIG,
    DEFAULT_MODEL_NAME,
    default_config_text,
    routing,
    subset_config,
    validate_config,
)
from l2sched.model.adapters.glm5next.docs import hooks_markdown as generate
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
    SELECTORS,
    LayerKind,
    kind_selector,
    layer_kinds,
)
from l2sched.model.adapters.glm5next.launches import PDL_LAUNCHES
from l2sched.model.adapters.glm5next.live import (
    COMPILED_MODULES,
    DECODER_LAYER_PATHS,
    PIPELINE_PARALLEL_REFUSAL,
    decoder_layers,
    derive_lazy,
    lazy_paths,
    live_layer_kind,
    live_spec,
)
from l2sched.model.adapters.glm5next.tensors import (
    DTYPE_BYTES,
    LAZY_TENSORS,
    OPTIONAL_KEYS,
    PARTLY_REPLICATED,
    REPLICATED_PATHS,
    REQUIRED_KEYS,
    WRITTEN_BUFFERS,
    expert_range,
    is_replicated,
    layer_specs,
    model_dtype,
)
from l2sched.model.adapters.glm5next.timeline import (
    CONDITIONS,
    OP_CLASSES,
    condition_holds,
    consumption_order,
    core_state_bytes,
    decode_reads,
    decode_timeline,
)
from l2sched.model.adapters.records import Op, TensorSpec

NAME = "glm5next"

#: ``architectures[0]`` / ``model_type`` values of a ``config.json`` this
#: adapter serves (text-only and multimodal checkpoints).
ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
MODEL_TYPES = ("glm5_next_text", "glm5_next")


def hooks_markdown(op_bytes: Callable[[LayerKind, Op], str] | None = None) -> str:
    """The text of ``docs/hooks.md`` (``docs.hooks_markdown``); ``op_bytes(kind, op)``
    gives the bytes-read column (per GPU), omitted without it."""
    return generate(op_bytes)


__all__ = [
    "PDL_LAUNCHES",
    "COMPILED_MODULES", "PIPELINE_PARALLEL_REFUSAL",
    "ARCHITECTURES", "ATTENTION_KINDS", "CONDITIONS", "CONFIG_BOUNDS",
    "DECODER_LAYER_PATHS",
    "DEFAULT_CONFIG", "DEFAULT_MODEL_NAME", "DTYPE_BYTES",
    "FLASH_KINDS", "HOOKS", "HOOKS_BY_NAME", "HookPoint", "Install",
    "LAZY_TENSORS", "LayerKind", "MLP_KINDS", "MODEL_TYPES", "NAME", "OPTIONAL_KEYS",
    "OP_CLASSES", "Op", "PARTLY_REPLICATED", "REPLICATED_PATHS", "REQUIRED_KEYS",
    "SELECTORS", "TensorSpec", "condition_holds",
    "consumption_order", "core_state_bytes", "decode_reads", "decode_timeline",
    "decoder_layers", "default_config_text", "derive_lazy", "expert_range",
    "hooks_markdown", "is_replicated", "kind_selector", "layer_kinds",
    "layer_specs", "lazy_paths", "live_layer_kind", "live_spec", "model_dtype",
    "routing", "subset_config", "validate_config", "WRITTEN_BUFFERS",
]
