"""GLM-5.3 config facts beyond the keys the inventory reads: the embedded
config, the sanity bounds of its integer keys, the checks of features the
adapter does not model (``validate_config``), and the config of a model
made of a subset of the layers (``subset_config``, the fit's surrogate)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.glm5next.tensors import model_dtype

#: The config embedded for this adapter (package data of ``l2sched.data``;
#: sources in ``glm53-flash-config.md`` next to it) and its human name.
DEFAULT_CONFIG = "glm53-flash-config.json"
DEFAULT_MODEL_NAME = "GLM-5.3-Flash"

#: ``(lowest, highest)`` of integer config keys: sanity limits far above any
#: real model, so that a typo (``num_hidden_layers: 10000000``) is an error
#: naming the key instead of minutes of work (``docs/inventory.md``).
#: ``qk_rope_head_dim`` and ``n_shared_experts`` may be 0. Keys not listed
#: take ``(1, MAX_DIM)`` (``l2sched.model.config``).
_MAX_DIM = 1 << 20
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 4096), "n_routed_experts": (1, 65536),
    "n_shared_experts": (0, 1024), "num_experts_per_tok": (1, 65536),
    "hc_mult": (1, 64), "linear_conv_kernel_dim": (1, 1024),
    "index_kpool": (1, 1024), "qk_rope_head_dim": (0, _MAX_DIM),
}


def default_config_text() -> str:
    """Text of the embedded GLM-5.3-Flash config (``DEFAULT_CONFIG`` in
    ``l2sched/data``; sources in the ``.md`` next to it)."""
    return records.data_config_text(DEFAULT_CONFIG)


def validate_config(config: Mapping[str, Any], err: Callable[[str, str], None]) -> None:
    """GLM-5.3's own checks of a config with every required key present and
    typed, each problem reported as ``err(key, message)``: the mHC path only
    (``mhc: true``), NoPE MLA (``qk_rope_head_dim`` 0), no quantization, a
    float dtype, per-layer lists as long as ``num_hidden_layers``,
    ``num_experts_per_tok`` (optional) within ``n_routed_experts``."""
    records.check_experts_per_token(config, err, "n_routed_experts")
    if config["mhc"] is not True:
        err("mhc", "false is not supported: only the mHC decoder path of "
                   "GLM-5.3 (mhc: true) is modelled")
    if config["qk_rope_head_dim"] != 0:
        err("qk_rope_head_dim", f"must be 0 (GLM-5.3 MLA is NoPE), got "
                                f"{config['qk_rope_head_dim']}")
    if config.get("quantization_config") is not None:
        err("quantization_config", "quantized checkpoints are not modelled (the "
            "dense MLP and the experts would be FP8 with block scales); use "
            "the BF16 config")
    records.check_float_dtype(config, err, model_dtype(config))
    n = config["num_hidden_layers"]
    for key in ("layer_types", "mlp_layer_types"):
        v = config.get(key)
        if v is not None:
            if len(v) != n:
                err(key, f"has {len(v)} entries, num_hidden_layers is {n}")
            elif not all(isinstance(x, str) for x in v):
                err(key, "entries must be strings")


def routing(config: Mapping[str, Any]) -> tuple[int, int]:
    """``(experts per token, routed experts)`` of a validated config:
    ``num_experts_per_tok`` (8 when absent, GLM-5.3-Flash's) and
    ``n_routed_experts``."""
    return int(config.get("num_experts_per_tok", 8)), int(config["n_routed_experts"])


def subset_config(config: Mapping[str, Any], kinds: Sequence, keep: Sequence[int]) -> dict:
    """The text config of the model made of layers ``keep`` of ``config``
    (``kinds``: the ``LayerKind`` of every layer of the full model): its
    ``layer_types``/``mlp_layer_types`` (derived from ``kinds`` when the
    config leaves them to the defaults) and ``num_hidden_layers``."""
    attn = config.get("layer_types") or [
        "indexed_attention" if k.attention == "mla" else "linear_attention"
        for k in kinds]
    mlp = config.get("mlp_layer_types") or [
        "dense" if k.mlp == "dense" else "sparse" for k in kinds]
    out = dict(config)
    out["num_hidden_layers"] = len(keep)
    out["layer_types"] = [attn[i] for i in keep]
    out["mlp_layer_types"] = [mlp[i] for i in keep]
    return out
