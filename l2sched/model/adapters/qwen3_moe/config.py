"""Qwen3-MoE config facts beyond the keys the inventory reads: the embedded
config, the sanity bounds of integer keys, the checks of what the adapter
does not model (``validate_config``), routing, and the config of a model
made of a subset of the layers (``subset_config``, the fit's surrogate)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.qwen3_moe.tensors import model_dtype

#: The config embedded for this adapter (package data of ``l2sched.data``;
#: source in ``qwen3-30b-a3b-config.md`` next to it) and its human name.
#: ``qwen3-235b-a22b-config.json`` is shipped next to it for
#: ``--model-config``.
DEFAULT_CONFIG = "qwen3-30b-a3b-config.json"
DEFAULT_MODEL_NAME = "Qwen3-30B-A3B"

#: ``(lowest, highest)`` of integer config keys: sanity limits far above any
#: real model, so that a typo is an error naming the key. ``num_experts``
#: may be 0 (every layer dense, ``qwen3_moe.py:391``). Unlisted keys take
#: ``(1, model.config.MAX_DIM)``.
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 4096), "num_experts": (0, 65536),
    "num_experts_per_tok": (1, 65536), "decoder_sparse_step": (1, 4096),
    "num_key_value_heads": (1, 65536), "num_attention_heads": (1, 65536),
    "shared_expert_intermediate_size": (0, 1 << 20),
}


def default_config_text() -> str:
    """Text of the embedded Qwen3-30B-A3B config (``DEFAULT_CONFIG`` in
    ``l2sched/data``; its source in the ``.md`` next to it)."""
    return records.data_config_text(DEFAULT_CONFIG)


def validate_config(config: Mapping[str, Any], err: Callable[[str, str], None]) -> None:
    """Qwen3-MoE's own checks of a config with every required key present
    and typed, each problem reported as ``err(key, message)``: no
    quantization (its scales and packed weights are not modelled, the byte
    counts would be wrong), a float dtype, SiLU (vLLM refuses others,
    ``qwen3_moe.py:115-118``), no shared expert (a Qwen2-MoE feature
    ``Qwen3MoeSparseMoeBlock`` can build, ``qwen3_moe.py:177-201``, that no
    Qwen3-MoE checkpoint has and this adapter does not model), top-k within
    the experts, GQA head counts that divide."""
    q = config.get("quantization_config")
    if q is not None:
        method = q.get("quant_method") if isinstance(q, Mapping) else None
        err("quantization_config", "quantized checkpoints are not modelled"
            + (f" ({method!r})" if method else "") + ": their packed weights "
            "and scales have other shapes and byte counts than the inventory's; "
            "use the BF16 checkpoint's config")
    records.check_float_dtype(config, err, model_dtype(config))
    act = config.get("hidden_act") or "silu"
    if act != "silu":
        err("hidden_act", f"{act!r} is not supported (vLLM's Qwen3-MoE runs silu only)")
    if config.get("shared_expert_intermediate_size"):
        err("shared_expert_intermediate_size", "a shared expert is not modelled "
            "(Qwen3-MoE checkpoints have none)")
    e, k = config["num_experts"], config["num_experts_per_tok"]
    if e and k > e:
        err("num_experts_per_tok", f"must be at most num_experts = {e}, got {k}")
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    if nq % nkv:
        err("num_key_value_heads", f"{nkv} does not divide num_attention_heads = {nq}")


def routing(config: Mapping[str, Any]) -> tuple[int, int]:
    """``(experts per token, routed experts)`` of a validated config:
    ``num_experts_per_tok`` and ``num_experts``."""
    return int(config["num_experts_per_tok"]), int(config["num_experts"])


def subset_config(config: Mapping[str, Any], kinds: Sequence, keep: Sequence[int]) -> dict:
    """The text config of the model made of layers ``keep`` of ``config``
    (``kinds``: the ``LayerKind`` of every layer of the full model): its
    ``num_hidden_layers``, ``decoder_sparse_step`` 1 and the kept dense
    layers as ``mlp_only_layers``."""
    out = dict(config)
    out["num_hidden_layers"] = len(keep)
    out["decoder_sparse_step"] = 1
    out["mlp_only_layers"] = [j for j, i in enumerate(keep) if kinds[i].mlp == "dense"]
    return out
