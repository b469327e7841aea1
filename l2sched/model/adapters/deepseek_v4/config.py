"""DeepSeek-V4 config facts beyond the keys the inventory reads: the
embedded config, the sanity bounds of integer keys, the checks of what the
adapter does not model (``validate_config``), routing, and the config of a
model made of a subset of the layers (``subset_config``, the fit's
surrogate)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from l2sched.model.adapters import records
from l2sched.model.adapters.deepseek_v4.kinds import RATIO_KIND, compress_ratios
from l2sched.model.adapters.deepseek_v4.tensors import model_dtype

#: The config embedded for this adapter (package data of ``l2sched.data``;
#: source and cross-check in ``deepseek-v4-flash-config.md`` next to it).
DEFAULT_CONFIG = "deepseek-v4-flash-config.json"
DEFAULT_MODEL_NAME = "DeepSeek-V4-Flash"

#: ``(lowest, highest)`` of integer config keys: sanity limits far above any
#: real model, so that a typo is an error naming the key. ``num_hash_layers``
#: may be 0 (no hash-routed layer). Unlisted keys take
#: ``(1, model.config.MAX_DIM)``.
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 4096), "num_hash_layers": (0, 4096),
    "n_routed_experts": (1, 65536), "num_experts_per_tok": (1, 65536),
    "n_shared_experts": (0, 64), "hc_mult": (1, 64), "o_groups": (1, 1024),
    "vision_n_layers": (0, 4096),
}


def default_config_text() -> str:
    """Text of the embedded DeepSeek-V4-Flash config (``DEFAULT_CONFIG`` in
    ``l2sched/data``; its source in the ``.md`` next to it)."""
    return records.data_config_text(DEFAULT_CONFIG)


def validate_config(config: Mapping[str, Any], err: Callable[[str, str], None]) -> None:
    """DeepSeek-V4's own checks of a config with every required key present
    and typed, each problem reported as ``err(key, message)``: a
    quantization the inventory models (none, or ``fp8`` blocks with MXFP4
    experts: ``expert_dtype`` ``fp4``; the FP8-expert Flash-Base and NVFP4
    experts have other byte counts), a float dtype, SiLU
    (``nvidia/model.py:169-172``), no vision layers (their ``bias_vl`` is
    not modelled), top-k within the experts, ``o_groups`` dividing the
    heads, and one known compress ratio per layer."""
    q = config.get("quantization_config")
    if q is not None:
        method = q.get("quant_method")
        if method not in ("fp8", "deepseek_v4_fp8") or q.get("moe_quant_algo"):
            err("quantization_config", f"quant_method {method!r}"
                + (f" with moe_quant_algo {q['moe_quant_algo']!r}"
                   if q.get("moe_quant_algo") else "")
                + " is not modelled (fp8 blocks with MXFP4 experts, or none)")
        blk = q.get("weight_block_size")
        if not (isinstance(blk, list) and len(blk) == 2
                and all(isinstance(b, int) and b > 0 for b in blk)):
            err("quantization_config", f"weight_block_size must be two positive "
                f"integers, got {blk!r}")
        if (config.get("expert_dtype") or "fp4") != "fp4":
            err("expert_dtype", f"{config['expert_dtype']!r} experts are not "
                "modelled (fp4: MXFP4)")
    records.check_float_dtype(config, err, model_dtype(config))
    act = config.get("hidden_act") or "silu"
    if act != "silu":
        err("hidden_act", f"{act!r} is not supported (vLLM's DeepSeek-V4 runs "
            "silu only)")
    if config.get("vision_n_layers"):
        err("vision_n_layers", "vision checkpoints are not modelled")
    records.check_experts_per_token(config, err, "n_routed_experts")
    nh, g = config["num_attention_heads"], config["o_groups"]
    if nh % g:
        err("o_groups", f"{g} does not divide num_attention_heads = {nh}")
    if config.get("compress_ratios") is None and config.get("layer_types") is None:
        err("compress_ratios", "missing: the per-layer compress ratios "
            "(compress_ratios, or vLLM's layer_types with compress_rates)")
    for i, r in enumerate(compress_ratios(config)[:config["num_hidden_layers"]]):
        if isinstance(r, bool) or r not in RATIO_KIND:
            err("compress_ratios", f"compress_ratios[{i}] = {r!r} is not "
                "modelled (0, 4 or 128)")
            break


def routing(config: Mapping[str, Any]) -> tuple[int, int]:
    """``(experts per token, routed experts)`` of a validated config:
    ``num_experts_per_tok`` and ``n_routed_experts``."""
    return int(config["num_experts_per_tok"]), int(config["n_routed_experts"])


def subset_config(config: Mapping[str, Any], kinds: Sequence,
                  keep: Sequence[int]) -> dict:
    """The text config of the model made of layers ``keep`` of ``config``
    (``kinds``: the ``LayerKind`` of every layer of the full model): its
    ``num_hidden_layers``, and the kept layers' ``compress_ratios`` and
    ``mlp_layer_types`` (``hash_moe``/``moe``, so hash layers may be kept
    anywhere), in place of the other forms of both."""
    ratio = {v: r for r, v in RATIO_KIND.items()}
    out = {k: v for k, v in config.items()
           if k not in ("layer_types", "compress_rates", "num_hash_layers")}
    out["num_hidden_layers"] = len(keep)
    out["compress_ratios"] = [ratio[kinds[i].attention] for i in keep]
    out["mlp_layer_types"] = ["hash_moe" if kinds[i].mlp == "hash" else "moe"
                              for i in keep]
    return out
