"""DeepSeek-V4 layer kinds: every decoder layer has MLA attention over a
sliding window plus, by its ``compress_ratios`` entry, a KV compressor
(ratio 128, ``hca``) or a compressor and a Lightning Indexer (ratio 4,
``csa``), or neither (ratio 0, ``swa``); its MoE routes by a token-id hash
table (the first ``num_hash_layers`` layers, ``hash``) or by scored top-k
(``moe``). Chosen per layer from a Hugging Face text config the way vLLM
0.33.0's ``DeepseekV4DecoderLayer`` chooses it (paths relative to
``vllm/``: ``models/deepseek_v4/attention.py:238-241,302,369``,
``models/deepseek_v4/nvidia/model.py:284-309``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

#: Attention kinds by compress ratio (``compress_ratios[i]``): 0 -> ``swa``
#: (sliding window only), 4 -> ``csa`` (compressor + indexer), 128 ->
#: ``hca`` (compressor only). Other ratios are not modelled.
ATTENTION_KINDS = ("swa", "csa", "hca")
RATIO_KIND = {0: "swa", 4: "csa", 128: "hca"}
#: MLP kinds: hash-routed MoE (``gate.tid2eid``) or scored MoE
#: (``gate.e_score_correction_bias``); both have the shared expert.
MLP_KINDS = ("hash", "moe")


@dataclass(frozen=True)
class LayerKind:
    """The kind of one decoder layer: ``attention`` in ``ATTENTION_KINDS``,
    ``mlp`` in ``MLP_KINDS``. ``str()`` gives e.g. ``csa+moe``."""

    attention: str
    mlp: str

    def __str__(self) -> str:
        return f"{self.attention}+{self.mlp}"


#: Every kind a DeepSeek-V4 model may have, in the order the public
#: DeepSeek-V4-Flash config first uses them (layers 0, 2, 3, then the
#: hash-routed ``hca`` and scored ``swa`` ones no public config has).
ALL_KINDS = tuple(LayerKind(a, m) for a, m in (
    ("swa", "hash"), ("csa", "hash"), ("hca", "moe"), ("csa", "moe"),
    ("hca", "hash"), ("swa", "moe")))


#: transformers' ``DeepseekV4Config`` (what vLLM's ``hf_text_config`` is)
#: keeps the per-layer ratios as ``layer_types`` names with ``compress_rates``
#: (``transformers/models/deepseek_v4/configuration_deepseek_v4.py:28-32,
#: 143-145,244-262``); a ``layer_types`` name not in ``compress_rates`` is
#: ratio 0, as vLLM reads it (``transformers_utils/deepseek_v4_utils.py:6-19``).
#: Hash routing is ``mlp_layer_types`` ``hash_moe`` there (:150,264-268),
#: the first 3 layers when neither it nor ``num_hash_layers`` is given.
DEFAULT_HASH_LAYERS = 3


def compress_ratios(config: Mapping) -> list:
    """The per-layer compress ratios: ``compress_ratios`` of a public
    config.json, else ``compress_rates[layer_types[i]]`` (0 when absent) of
    vLLM's config; empty when the config has neither."""
    if config.get("compress_ratios") is not None:
        return list(config["compress_ratios"])
    rates = config.get("compress_rates") or {}
    return [rates.get(t, 0) for t in config.get("layer_types") or ()]


def hash_routed(config: Mapping, n: int) -> list[bool]:
    """Whether each of the ``n`` layers routes by hash: ``mlp_layer_types[i]
    == "hash_moe"`` of vLLM's config, else ``i < num_hash_layers`` (default
    ``DEFAULT_HASH_LAYERS``)."""
    kinds = config.get("mlp_layer_types")
    if kinds is not None:
        return [i < len(kinds) and kinds[i] == "hash_moe" for i in range(n)]
    hashed = config.get("num_hash_layers")
    hashed = DEFAULT_HASH_LAYERS if hashed is None else int(hashed)
    return [i < hashed for i in range(n)]


def layer_kinds(config: Mapping) -> list[LayerKind]:
    """Layer kinds of every decoder layer, from a text config dict
    (``num_hidden_layers``; ``compress_ratios`` and ``num_hash_layers``, or
    vLLM's ``layer_types``/``compress_rates`` and ``mlp_layer_types``).
    Raises ``ValueError`` naming the entry when the ratios are fewer than
    the layers or one is not 0, 4 or 128."""
    n = int(config["num_hidden_layers"])
    ratios = compress_ratios(config)
    if len(ratios) < n:
        raise ValueError(f"compress_ratios[{len(ratios)}] is missing: "
                         f"{len(ratios)} entries for {n} layers")
    hashed = hash_routed(config, n)
    out = []
    for i in range(n):
        r = ratios[i]
        if isinstance(r, bool) or r not in RATIO_KIND:
            raise ValueError(f"compress_ratios[{i}] = {r!r} is not modelled "
                             f"(0, 4 or 128)")
        out.append(LayerKind(RATIO_KIND[r], "hash" if hashed[i] else "moe"))
    return out


#: Layer selectors a schedule may name (``layers csa``), in the order error
#: messages list them: the attention kinds, then the MLP kinds.
SELECTORS = {
    **{a: (lambda k, a=a: k.attention == a) for a in ATTENTION_KINDS},
    **{m: (lambda k, m=m: k.mlp == m) for m in MLP_KINDS},
}


def kind_selector(kind: LayerKind) -> tuple[str, str]:
    """The selectors whose intersection is exactly the layers of ``kind``:
    ``csa+moe`` -> ``("csa", "moe")``."""
    return (kind.attention, kind.mlp)
