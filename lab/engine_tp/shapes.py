"""The model one emulated TP rank serves: per-rank shapes as a TP1 config,
and how many layers of it fit one GPU.

``rank_config(full, tp)`` divides every dimension vLLM 0.33.0 shards over
the TP group (column/row-parallel heads and FFN widths, the vocabulary) by
``tp`` and leaves the replicated ones (MLA's latent projections, the
indexer, the router, norms, hidden size) alone, so vLLM building the result
at TP1 makes the same per-rank weights as TP rank 0 of ``full`` at ``tp``.
``tests/test_lab_engine_tp.py`` checks that equality against vLLM's real
module trees (live inventory of the rank config at TP1 = the analytical TP
inventory of the full config).
"""

from __future__ import annotations

from typing import Any, Mapping

#: Config keys vLLM shards over the TP group, per l2sched adapter (vLLM
#: 0.33.0: ``ColumnParallelLinear``/``RowParallelLinear`` widths, heads per
#: rank, ``VocabParallelEmbedding``/``ParallelLMHead``). Everything else is
#: replicated or independent of TP. GLM-5.3: KDA heads, MLA heads (q_b /
#: kv_b / o_proj), dense FFN, expert FFN (routed and shared, TP without EP).
SHARDED_KEYS = {
    "glm5next": ("linear_num_heads", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "moe_intermediate_size", "vocab_size"),
    "qwen3_moe": ("num_attention_heads", "num_key_value_heads", "intermediate_size",
                  "moe_intermediate_size", "vocab_size"),
}

#: Token-id keys kept below the rank's vocabulary (``vocab_size`` / tp).
TOKEN_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id")


def rank_config(full: Mapping[str, Any], tp: int, model: str) -> dict:
    """The TP1 config whose weights are TP rank 0's of ``full`` at ``tp``.

    ``full``: a validated text config of l2sched adapter ``model`` (a key of
    ``SHARDED_KEYS``); ``tp`` >= 1. Token ids that would fall outside the
    divided vocabulary keep their distance from its end. Raises
    ``ValueError`` for an unknown model or a sharded dimension that does
    not divide by ``tp`` (vLLM refuses that layout too)."""
    if model not in SHARDED_KEYS:
        raise ValueError(f"no TP shard table for model {model!r} "
                         f"(known: {', '.join(sorted(SHARDED_KEYS))})")
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    out = dict(full)
    for key in SHARDED_KEYS[model]:
        value = full.get(key)
        if value is None:
            continue
        if int(value) % tp:
            raise ValueError(f"{key} = {value} does not divide by TP {tp}")
        out[key] = int(value) // tp
    vocab, rank_vocab = int(full["vocab_size"]), int(out["vocab_size"])
    for key in TOKEN_ID_KEYS:
        tid = full.get(key)
        if isinstance(tid, int) and tid >= rank_vocab:
            out[key] = max(0, rank_vocab - (vocab - tid))
    return out


def layers_that_fit(full: Mapping[str, Any], tp: int, budget_bytes: int) -> int:
    """The most decoder layers (the first ones of ``full``'s layer sequence)
    whose per-rank weights at ``tp`` (l2sched's analytical inventory, lazy
    tensors and views excluded) plus the rank's embedding and LM head fit
    ``budget_bytes``; at most ``num_hidden_layers``. Raises ``ValueError``
    when not even one layer fits."""
    from l2sched.model.inventory import analytical_inventory

    n = int(full["num_hidden_layers"])
    inv = analytical_inventory(dict(full), tp=tp, ep=False, tp_rank=0)
    per_layer = [sum(e.nbytes for e in layer if e.owns_memory and not e.lazy)
                 for layer in inv.layers]
    fixed = 2 * (int(full["vocab_size"]) // tp) * int(full["hidden_size"]) * 2
    total, count = fixed, 0
    for nbytes in per_layer[:n]:
        if total + nbytes > budget_bytes:
            break
        total += nbytes
        count += 1
    if count == 0:
        raise ValueError(f"not one layer fits {budget_bytes / 1e9:.1f} GB at TP{tp}")
    return count
