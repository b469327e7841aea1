"""The analytical inventory equals the live one read from vLLM 0.33.0's real
``Glm5NextForCausalLM``, built on the ``meta`` device on CPU with the full
GLM-5.3-Flash config, at TP1, TP4 (4 gloo ranks) and TP4 + EP.

Slow (about a minute per layout: every rank imports vLLM); run with
``python -m pytest -m vllm tests/test_inventory_vllm.py`` in an environment
with ``pip install -e '.[test,vllm]'``.
"""

from __future__ import annotations

import json

import pytest
from vllm_cpu import hook_target_problems, run_ranks, vllm_available

from l2sched.model.config import default_config_text, load_model_config
from l2sched.model.inventory import (
    Inventory,
    TensorEntry,
    analytical_inventory,
    live_inventory,
)
from l2sched.units import MiB

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]


def _dump(inv: Inventory) -> dict:
    return {"kinds": [str(k) for k in inv.kinds],
            "layers": [[t.to_json() for t in ts] for ts in inv.layers]}


def _rank_inventories(ctx) -> dict:
    """Per rank: the live inventory of the fresh model (lazy tensors derived),
    then again after vLLM's own ``MLAAttention.process_weights_after_loading``
    created the real ``W_UK_T``/``W_UV`` parameters, plus their strides."""
    import torch

    model = ctx.build()
    out = {"fresh": _dump(live_inventory(model, ctx.tp, ctx.ep, ctx.rank)),
           "hook_targets": _check_hook_targets(model)}
    views = {}
    for i, layer in enumerate(model.model.layers):
        if getattr(layer, "layer_kind", "") == "mla":
            attn = layer.self_attn.mla_attn.mla_attn
            attn.process_weights_after_loading(torch.bfloat16)
            if not views:
                views = {n: (list(getattr(attn, n).shape),
                             list(getattr(attn, n).stride()))
                         for n in ("W_UK_T", "W_UV")}
    out["loaded"] = _dump(live_inventory(model, ctx.tp, ctx.ep, ctx.rank))
    out["views"] = views
    return out


def _check_hook_targets(model) -> list[str]:
    """Problems resolving every hook's install target on the real layers:
    module hooks need an ``nn.Module``, wrappers a callable attribute that is
    not a class-level function only (so an instance attribute can shadow it;
    ``vllm_cpu.hook_target_problems``)."""
    from l2sched.model.adapters import glm5next

    return hook_target_problems(glm5next, model)


def _load(d: dict, source: str, tp: int, ep: bool, rank: int) -> Inventory:
    from l2sched.model.adapters.glm5next import LayerKind

    def entry(j: dict) -> TensorEntry:
        return TensorEntry(j["path"], j["dtype"], tuple(j["shape"]), j["bytes"],
                           j["replicated"], j["replicated_bytes"], j["lazy"],
                           j["view_of"], j["decode_read"],
                           tuple(j["experts"]) if j["experts"] else None)

    kinds = tuple(LayerKind(*k.split("+")) for k in d["kinds"])
    return Inventory("glm5next", "live", tp, ep, rank, kinds,
                     tuple(tuple(entry(j) for j in ts) for ts in d["layers"]),
                     source)


_CACHE: dict = {}


def _live(tp: int, ep: bool) -> list[dict]:
    if (tp, ep) not in _CACHE:
        config = json.loads(default_config_text())
        _CACHE[(tp, ep)] = run_ranks(_rank_inventories, config, tp, ep,
                                     timeout=900)
    return _CACHE[(tp, ep)]


def _check_equal(tp: int, ep: bool) -> list[Inventory]:
    config = load_model_config(None)
    lives = []
    for rank, res in enumerate(_live(tp, ep)):
        ana = analytical_inventory(config, tp, ep, rank)
        for mode in ("fresh", "loaded"):
            live = _load(res[mode], "live", tp, ep, rank)
            assert ana.diff(live) == [], f"rank {rank} ({mode})"
            # Same order, same flags: the live flags come from the adapter's
            # catalogue, the analytical ones from the shape formulas.
            for a_layer, l_layer in zip(ana.layers, live.layers):
                assert [t.path for t in a_layer] == [t.path for t in l_layer]
                assert list(a_layer) == list(l_layer)
        lives.append(_load(res["fresh"], "live", tp, ep, rank))
    return lives


def test_tp1_live_equals_analytical():
    (live,) = _check_equal(1, False)
    assert len(live.layers) == 45
    assert [str(k) for k in live.kinds[:5]] == ["kda+dense"] * 3 + ["mla+moe",
                                                                    "kda+moe"]


def test_tp4_live_equals_analytical_on_every_rank():
    lives = _check_equal(4, False)
    live = lives[0]
    t = live.tensor(4, "self_attn.in_proj_qkvbfg_a.weight")
    assert (t.shape, t.nbytes, t.replicated_bytes) == ((6416, 4096), 52_559_872,
                                                       256 * 4096 * 2)
    assert live.tensor(4, "self_attn.o_proj.weight").nbytes == 16_777_216
    assert live.tensor(3, "self_attn.o_proj.weight").nbytes == 33_554_432
    assert round(live.layer_bytes(4, routed=False, lazy=False) / MiB, 1) == 84.5
    w13 = live.tensor(4, "mlp.experts.routed_experts.w13_weight")
    w2 = live.tensor(4, "mlp.experts.routed_experts.w2_weight")
    assert w13.bytes_per_expert + w2.bytes_per_expert == 12 * MiB


def test_tp4_ep_live_equals_analytical_per_rank():
    lives = _check_equal(4, True)
    for rank, live in enumerate(lives):
        w13 = live.tensor(4, "mlp.experts.routed_experts.w13_weight")
        w2 = live.tensor(4, "mlp.experts.routed_experts.w2_weight")
        assert w13.shape[0] == 72 and w13.experts == (72 * rank, 72 * rank + 72)
        assert w13.bytes_per_expert + w2.bytes_per_expert == 48 * MiB


def test_every_hook_install_target_exists_on_the_real_model():
    for tp, ep in ((1, False), (4, False)):
        for res in _live(tp, ep):
            assert res["hook_targets"] == []


def test_replication_flags_agree_with_tp1_vs_tp4_shapes():
    """A tensor is replicated exactly when its TP4 per-rank shape equals its
    TP1 shape (the partly replicated KDA in_proj is sharded)."""
    tp1 = _load(_live(1, False)[0]["fresh"], "live", 1, False, 0)
    tp4 = _load(_live(4, False)[0]["fresh"], "live", 4, False, 0)
    for i in (0, 3, 4):
        one = {t.path: t for t in tp1.layers[i]}
        for t in tp4.layers[i]:
            assert t.replicated == (t.shape == one[t.path].shape), t.path


def test_absorbed_mla_weights_are_strided_views_spanning_kv_b_proj():
    """vLLM's W_UK_T/W_UV are non-contiguous views whose storage span covers
    most of ``kv_b_proj.weight`` (docs/sources.md#vllm-glm5next: ~97%)."""
    views = _live(4, False)[0]["views"]
    kv_b = 8192 * 512 * 2
    for name, (shape, stride) in views.items():
        contiguous = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            contiguous[d] = contiguous[d + 1] * shape[d + 1]
        assert stride != contiguous, name
        span = (1 + sum((n - 1) * s for n, s in zip(shape, stride))) * 2
        assert 0.9 * kv_b < span <= kv_b, name
