"""Model adapter for vLLM 0.33.0's DeepSeek-V4 (``DeepseekV4ForCausalLM``,
``vllm/models/deepseek_v4``, CUDA implementation ``nvidia/model.py``): MLA
attention over a sliding window with, per layer, a KV compressor and the
Lightning Indexer (``compress_ratios``), hyper-connections (mHC) around
attention and MoE, and a MoE with a shared expert whose router is a token
hash table in the first ``num_hash_layers`` layers.

Every fact is data with its source (file:line in the ``vllm==0.33.0``
wheel, paths relative to ``vllm/``). One module per concern, as in the
``glm5next`` and ``qwen3_moe`` adapters: ``kinds``, ``hooks``,
``timeline``, ``tensors``, ``live``, ``config``, ``docs``.

This package namespace implements ``l2sched.model.adapters.protocol.
ModelAdapter`` (``get_adapter("deepseek_v4")``). Paths of tensors and
modules are relative to ``model.layers.{i}``.
"""

from __future__ import annotations

from typing import Callable

from l2sched.model.adapters.deepseek_v4.config import (
    CONFIG_BOUNDS,
    DEFAULT_CONFIG,
    DEFAULT_MODEL_NAME,
    default_config_text,
    routing,
    subset_config,
    validate_config,
)
from l2sched.model.adapters.deepseek_v4.docs import hooks_markdown as generate
from l2sched.model.adapters.deepseek_v4.hooks import (
    HOOKS,
    HOOKS_BY_NAME,
    HookPoint,
    Install,
)
from l2sched.model.adapters.deepseek_v4.kinds import (
    ALL_KINDS,
    ATTENTION_KINDS,
    MLP_KINDS,
    SELECTORS,
    LayerKind,
    kind_selector,
    layer_kinds,
)
from l2sched.model.adapters.deepseek_v4.launches import PDL_LAUNCHES
from l2sched.model.adapters.deepseek_v4.live import (
    COMPILED_MODULES,
    DECODER_LAYER_PATHS,
    decoder_layers,
    live_layer_kind,
    live_spec,
)
from l2sched.model.adapters.deepseek_v4.tensors import (
    DTYPE_BYTES,
    OPTIONAL_KEYS,
    REQUIRED_KEYS,
    WRITTEN_BUFFERS,
    layer_specs,
)
from l2sched.model.adapters.deepseek_v4.timeline import (
    condition_holds,
    consumption_order,
    core_state_bytes,
    decode_timeline,
)
from l2sched.model.adapters.records import Op, TensorSpec

NAME = "deepseek_v4"

#: ``architectures`` / ``model_type`` values of a ``config.json`` this
#: adapter serves.
ARCHITECTURES = ("DeepseekV4ForCausalLM",)
MODEL_TYPES = ("deepseek_v4",)


def hooks_markdown(op_bytes: Callable[[LayerKind, Op], str] | None = None) -> str:
    """The text of ``docs/hooks-deepseek_v4.md`` (``docs.hooks_markdown``);
    ``op_bytes(kind, op)`` gives the bytes-read column
    (per GPU), omitted without it."""
    return generate(op_bytes)


__all__ = [
    "PDL_LAUNCHES",
    "ALL_KINDS", "ARCHITECTURES", "ATTENTION_KINDS", "COMPILED_MODULES",
    "CONFIG_BOUNDS", "DECODER_LAYER_PATHS", "DEFAULT_CONFIG", "DEFAULT_MODEL_NAME",
    "DTYPE_BYTES", "HOOKS", "HOOKS_BY_NAME", "HookPoint",
    "Install", "LayerKind", "MLP_KINDS", "MODEL_TYPES", "NAME", "OPTIONAL_KEYS",
    "Op", "REQUIRED_KEYS", "SELECTORS", "TensorSpec",
    "condition_holds", "consumption_order", "core_state_bytes",
    "decode_timeline", "decoder_layers", "default_config_text",
    "hooks_markdown", "kind_selector", "layer_kinds", "layer_specs",
    "live_layer_kind", "live_spec", "routing", "subset_config", "validate_config",
    "WRITTEN_BUFFERS",
]
