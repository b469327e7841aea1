"""Qwen3-MoE layer kinds: every decoder layer has GQA attention; its MLP is
a sparse MoE block or a dense MLP, chosen per layer from a Hugging Face
text config the way vLLM 0.33.0's ``Qwen3MoeDecoderLayer`` chooses it
(``model_executor/models/qwen3_moe.py:385-405``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

#: Attention kinds and MLP kinds, as layer selectors in schedules name them.
ATTENTION_KINDS = ("gqa",)
MLP_KINDS = ("dense", "moe")


@dataclass(frozen=True)
class LayerKind:
    """The kind of one decoder layer: ``attention`` in ``ATTENTION_KINDS``,
    ``mlp`` in ``MLP_KINDS``. ``str()`` gives e.g. ``gqa+moe``."""

    attention: str
    mlp: str

    def __str__(self) -> str:
        return f"{self.attention}+{self.mlp}"


GQA_MOE = LayerKind("gqa", "moe")
GQA_DENSE = LayerKind("gqa", "dense")

#: Both kinds a Qwen3-MoE model may have, MoE first (the public checkpoints
#: have MoE layers only: ``decoder_sparse_step`` 1, ``mlp_only_layers`` []).
ALL_KINDS = (GQA_MOE, GQA_DENSE)


def is_moe_layer(config: Mapping, index: int) -> bool:
    """Whether layer ``index`` is a MoE layer: not in ``mlp_only_layers``,
    ``num_experts`` > 0 and ``(index + 1) % decoder_sparse_step == 0``
    (``qwen3_moe.py:387-392``; ``decoder_sparse_step`` defaults to 1, as in
    transformers' ``Qwen3MoeConfig``)."""
    only = config.get("mlp_only_layers") or ()
    step = config.get("decoder_sparse_step") or 1
    return (index not in only and int(config["num_experts"]) > 0
            and (index + 1) % int(step) == 0)


def layer_kinds(config: Mapping) -> list[LayerKind]:
    """Layer kinds of every decoder layer, from a text config dict
    (``num_hidden_layers``, ``num_experts``, ``decoder_sparse_step``,
    ``mlp_only_layers``). Raises ``ValueError`` naming the entry when
    ``mlp_only_layers`` holds something that is not a layer index."""
    n = int(config["num_hidden_layers"])
    for i, v in enumerate(config.get("mlp_only_layers") or ()):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
            raise ValueError(f"mlp_only_layers[{i}] = {v!r} is not a layer index "
                             f"in 0..{n - 1}")
    return [GQA_MOE if is_moe_layer(config, i) else GQA_DENSE for i in range(n)]


#: Layer selectors a schedule may name (``layers moe``), in the order error
#: messages list them: the attention kind (every layer) or the MLP kind.
SELECTORS = {
    "gqa": lambda k: k.attention == "gqa",
    "dense": lambda k: k.mlp == "dense",
    "moe": lambda k: k.mlp == "moe",
}


def kind_selector(kind: LayerKind) -> tuple[str]:
    """The selector that is exactly the layers of ``kind``: its MLP kind
    (every layer is ``gqa``), e.g. ``gqa+moe`` -> ``("moe",)``."""
    return (kind.mlp,)
