"""Model adapter for vLLM 0.33.0's GLM-5.3 (``vllm/models/glm5next``).

Source of every fact: ``../shared/docs/vllm-glm5next-map.md`` (sections 0-3),
which was checked against the real vLLM code on a CPU-only host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

NAME = "glm5next"

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


@dataclass(frozen=True)
class HookPoint:
    """One hook point a schedule may name.

    ``order`` is the position in the layer's decode timeline (smaller fires
    earlier); carry-over may only flow to a window whose hook fires later.
    ``attention``/``mlp`` restrict the layer kinds it exists in (empty = all).
    """

    name: str
    order: int
    description: str
    attention: tuple[str, ...] = ()
    mlp: tuple[str, ...] = ()

    def exists_in(self, kind: LayerKind) -> bool:
        """True when this hook fires in a layer of ``kind``."""
        return (not self.attention or kind.attention in self.attention) and (
            not self.mlp or kind.mlp in self.mlp
        )


#: The hook catalogue in timeline order (map document, section 3).
HOOKS: tuple[HookPoint, ...] = (
    HookPoint("layer.entry", 0, "layer entry, before the attention mHC pre"),
    HookPoint("attn.after_first_proj", 10,
              "after the attention's first projection (KDA in_proj_qkvbfg_a, "
              "MLA fused_qkv_a_proj)"),
    HookPoint("attn.before_core", 20, "right before the attention core"),
    HookPoint("attn.after_core", 30, "right after the attention core"),
    HookPoint("attn.pre_all_reduce", 40,
              "between the o_proj GEMM and its all-reduce"),
    HookPoint("attn.post_all_reduce", 50, "after the o_proj all-reduce"),
    HookPoint("moe.after_gate", 60, "after the router gate GEMM", mlp=("moe",)),
    HookPoint("moe.before_experts", 70, "right before the routed experts (the "
              "expert stream)", mlp=("moe",)),
    HookPoint("moe.pre_all_reduce", 80,
              "between the MoE output (shared + routed) and its all-reduce",
              mlp=("moe",)),
    HookPoint("moe.post_all_reduce", 90, "after the MoE all-reduce", mlp=("moe",)),
    HookPoint("mlp.pre_all_reduce", 80,
              "between the dense MLP's down_proj GEMM and its all-reduce",
              mlp=("dense",)),
    HookPoint("mlp.post_all_reduce", 90, "after the dense MLP's all-reduce",
              mlp=("dense",)),
    HookPoint("layer.exit", 100, "layer exit"),
)

HOOKS_BY_NAME: dict[str, HookPoint] = {h.name: h for h in HOOKS}


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
    attn_map = {"linear_attention": "kda", "indexed_attention": "mla",
                "full_attention": "mla"}
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
