"""Model adapter for vLLM 0.33.0's Qwen3-MoE (``Qwen3MoeForCausalLM``,
``vllm/model_executor/models/qwen3_moe.py``): GQA attention with
``qkv_proj``/``o_proj`` and its all-reduce, a router gate, ``FusedMoE``
routed experts, no shared expert; dense-MLP layers where
``mlp_only_layers``/``decoder_sparse_step`` say so.

Every fact is data with its source (file:line in the ``vllm==0.33.0``
wheel, paths relative to ``vllm/``), checked against the real vLLM module
tree on a CPU-only host (``tests/test_qwen3_moe_vllm.py``). One module per
concern, as in the ``glm5next`` adapter: ``kinds``, ``hooks``,
``timeline``, ``tensors``, ``live``, ``config``, ``docs``.

This package namespace implements ``l2sched.model.adapters.protocol.
ModelAdapter`` (``get_adapter("qwen3_moe")``). Paths of tensors and modules
are relative to ``model.layers.{i}``.
"""

from __future__ import annotations

from typing import Callable

from l2sched.model.adapters.qwen3_moe.config import (
    CONFIG_BOUNDS,
    DEFAULT_CONFIG,
    DEFAULT_MODEL_NAME,
    default_config_text,
    routing,
    subset_config,
    validate_config,
)
from l2sched.model.adapters.qwen3_moe.docs import hooks_markdown as generate
from l2sched.model.adapters.qwen3_moe.hooks import (
    HOOK_GRAPH_MODES,
    HOOKS,
    HOOKS_BY_NAME,
    HookPoint,
    Install,
)
from l2sched.model.adapters.qwen3_moe.kinds import (
    ALL_KINDS,
    ATTENTION_KINDS,
    MLP_KINDS,
    SELECTORS,
    LayerKind,
    kind_selector,
    layer_kinds,
)
from l2sched.model.adapters.qwen3_moe.launches import PDL_LAUNCHES
from l2sched.model.adapters.qwen3_moe.live import (
    COMPILED_MODULES,
    DECODER_LAYER_PATHS,
    decoder_layers,
    live_layer_kind,
    live_spec,
)
from l2sched.model.adapters.qwen3_moe.tensors import (
    DTYPE_BYTES,
    OPTIONAL_KEYS,
    REPLICATED_PATHS,
    REQUIRED_KEYS,
    expert_range,
    is_replicated,
    layer_specs,
    model_dtype,
)
from l2sched.model.adapters.qwen3_moe.timeline import (
    CONDITIONS,
    OP_CLASSES,
    condition_holds,
    consumption_order,
    core_state_bytes,
    decode_reads,
    decode_timeline,
)
from l2sched.model.adapters.records import Op, TensorSpec

NAME = "qwen3_moe"

#: ``architectures`` / ``model_type`` values of a ``config.json`` this
#: adapter serves.
ARCHITECTURES = ("Qwen3MoeForCausalLM",)
MODEL_TYPES = ("qwen3_moe",)


def hooks_markdown(op_bytes: Callable[[LayerKind, Op], str] | None = None) -> str:
    """The text of ``docs/hooks-qwen3_moe.md`` (``docs.hooks_markdown``);
    ``op_bytes(kind, op)`` gives the bytes-read column
    (per GPU), omitted without it."""
    return generate(op_bytes)


__all__ = [
    "PDL_LAUNCHES",
    "COMPILED_MODULES",
    "ALL_KINDS", "ARCHITECTURES", "ATTENTION_KINDS", "CONDITIONS", "CONFIG_BOUNDS",
    "DECODER_LAYER_PATHS", "DEFAULT_CONFIG", "DEFAULT_MODEL_NAME", "DTYPE_BYTES",
    "HOOKS", "HOOKS_BY_NAME", "HOOK_GRAPH_MODES", "HookPoint",
    "Install", "LayerKind", "MLP_KINDS", "MODEL_TYPES", "NAME", "OPTIONAL_KEYS",
    "OP_CLASSES", "Op", "REPLICATED_PATHS", "REQUIRED_KEYS", "SELECTORS",
    "TensorSpec", "condition_holds", "consumption_order",
    "core_state_bytes", "decode_reads", "decode_timeline", "decoder_layers",
    "default_config_text", "expert_range", "hooks_markdown",
    "is_replicated", "kind_selector", "layer_kinds", "layer_specs",
    "live_layer_kind", "live_spec", "model_dtype", "routing", "subset_config",
    "validate_config",
]
