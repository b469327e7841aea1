"""GLM-5.3 layer kinds: KDA or MLA attention, dense or MoE MLP, per decoder
layer, from a Hugging Face text config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

#: Attention kinds and MLP kinds, as used by layer selectors in schedules.
ATTENTION_KINDS = ("kda", "mla")
MLP_KINDS = ("dense", "moe")


@dataclass(frozen=True)
class LayerKind:
    """The kind of one decoder layer: ``attention`` in ``ATTENTION_KINDS``,
    ``mlp`` in ``MLP_KINDS``. ``str()`` gives e.g. ``kda+moe``."""

    attention: str
    mlp: str

    def __str__(self) -> str:
        return f"{self.attention}+{self.mlp}"


#: The three layer kinds GLM-5.3-Flash has (MLA+dense does not occur:
#: ``models/glm5next/common/model.py:380-420``, docs/sources.md#vllm-glm5next).
FLASH_KINDS = (LayerKind("kda", "dense"), LayerKind("kda", "moe"),
               LayerKind("mla", "moe"))


def layer_kinds(config: Mapping) -> list[LayerKind]:
    """Layer kinds of every decoder layer, from a HF text config dict.

    Reads ``num_hidden_layers`` (default 45), ``layer_types`` (default:
    ``idx % 4 == 3`` -> MLA, as ``Glm5NextTextConfig.__post_init__`` does) and
    ``mlp_layer_types`` (default: first 3 dense). Returns one ``LayerKind``
    per layer. Raises ``ValueError`` on a value it does not know.
    """
    n = int(config.get("num_hidden_layers", 45))
    attn: Sequence[str] = config.get("layer_types") or [
        "linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)
    ]
    mlp: Sequence[str] = config.get("mlp_layer_types") or (
        ["dense"] * min(3, n) + ["sparse"] * max(n - 3, 0)
    )
    # transformers 5.17 names MLA layers "deepseek_sparse_attention", 5.20
    # "indexed_attention"; vLLM 0.33.0 accepts both (>=5.16.1) and only tests
    # for "linear_attention" (models/glm5next/common/model.py:_is_kda_layer).
    attn_map = {"linear_attention": "kda", "indexed_attention": "mla",
                "deepseek_sparse_attention": "mla", "full_attention": "mla"}
    mlp_map = {"dense": "dense", "sparse": "moe"}
    kinds = []
    for i in range(n):
        if attn[i] not in attn_map:
            raise ValueError(f"layer_types[{i}] = {attn[i]!r} is not one of "
                             f"{sorted(attn_map)}")
        if mlp[i] not in mlp_map:
            raise ValueError(f"mlp_layer_types[{i}] = {mlp[i]!r} is not one of "
                             f"{sorted(mlp_map)}")
        kinds.append(LayerKind(attn_map[attn[i]], mlp_map[mlp[i]]))
    return kinds


#: Layer selectors a schedule may name (``layers kda & moe``), in the order
#: error messages list them: a layer's attention kind or MLP kind.
SELECTORS = {
    "kda": lambda k: k.attention == "kda",
    "mla": lambda k: k.attention == "mla",
    "dense": lambda k: k.mlp == "dense",
    "moe": lambda k: k.mlp == "moe",
}


def kind_selector(kind: LayerKind) -> tuple[str, str]:
    """The selector names whose intersection is exactly the layers of
    ``kind``: ``(attention, mlp)`` (``kda+moe`` -> ``("kda", "moe")``)."""
    return (kind.attention, kind.mlp)
