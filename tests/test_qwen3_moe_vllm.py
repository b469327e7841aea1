"""The Qwen3-MoE adapter against vLLM 0.33.0's real ``Qwen3MoeForCausalLM``,
built on CPU from a reduced config (4 layers, hidden 256, 8 experts top-2,
``mlp_only_layers [0]``: layer 0 dense, layers 1-3 MoE) at TP1 and TP2 (two
gloo ranks), EP off and on:

- the analytical inventory equals the live one read off the real module tree
  on every rank: every tensor, shape, dtype, byte count, flag and order;
- every hook's install target exists on the real layers;
- in a decode-shaped dry-run forward through vLLM's own layer code (real
  all-reduces over gloo), a plan with a window at every hook point issues
  each window in each layer, interleaved with the real GEMMs, expert
  outputs and all-reduces exactly where the adapter's decode timeline puts
  it; outputs are bitwise identical with and without the plan.

CPU substitutions (kernels with no CPU implementation in the CUDA wheel):
CustomOps (RMSNorm, SiluAndMul, rotary) run vLLM's own ``forward_native``;
``LinearBase.cpu_linear`` is ``F.linear`` (vLLM's CPU fallback), wrapped to
record each GEMM; ``RoutedExperts.forward_modular`` is a per-token reference
(w13 GEMM, SiLU-mul, w2 GEMM, top-k weighted sum in fp32); the attention core
returns early (``attn_metadata=None``, vLLM's own profile-run path,
``v1/attention/backends/cpu_attn.py:392``) and its unwritten output is
zero-filled: every hook l2sched uses lies outside it. Slow (about a minute per layout); ``-m vllm``.
"""

from __future__ import annotations

import traceback

import pytest
from vllm_cpu import (
    hook_target_problems,
    inventory_mismatches,
    run_ranks,
    vllm_available,
)

from l2sched.model.adapters import get_adapter
from l2sched.model.inventory import analytical_inventory, live_inventory

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]

ARCH = "Qwen3MoeForCausalLM"
TINY = {
    "torch_dtype": "bfloat16", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
    "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "mlp_only_layers": [0], "norm_topk_prob": True, "hidden_act": "silu",
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "attention_bias": False, "tie_word_embeddings": False,
}
AD = get_adapter("qwen3_moe")
TOKENS = 3


def every_hook_schedule(tp: int, ep: bool) -> str:
    """A schedule with one window at every hook point: three carry chains
    (hooks of every layer, of MoE layers, of dense layers), each window
    taking 4 KiB of its chain's targets, so every window issues in every
    layer where its hook exists."""
    lines = ["schedule every_hook", "model qwen3_moe", "device h200", f"tp {tp}",
             f"ep {'on' if ep else 'off'}"]
    chains = {"": ("all", "this mlp.*"), "moe": ("moe", "this self_attn.*"),
              "dense": ("dense", "this self_attn.*")}
    for key, (sel, target) in chains.items():
        hooks = [h for h in AD.HOOKS if (h.mlp[0] if h.mlp else "") == key]
        for j, h in enumerate(hooks):
            carry = f" carry {key or 'all'}_{j + 1}" if j + 1 < len(hooks) else ""
            body = f" {{\n    {target}\n}}" if j == 0 else ""
            lines.append(f"window {key or 'all'}_{j} at {h.name} budget 4KiB "
                         f"layers {sel}{carry}{body}")
    return "\n".join(lines) + "\n"


def _cpu_substitutions(model, trace: list) -> None:
    """The CPU substitutions of the module docstring, recording GEMMs,
    expert outputs and all-reduce call sites in ``trace``."""
    import torch
    import torch.nn.functional as F
    import vllm.distributed.parallel_state as ps
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    for name, m in model.named_modules():
        if isinstance(m, CustomOp) and type(m).forward_native is not CustomOp.forward_native:
            m._forward_method = m.forward_native
        if isinstance(m, LinearBase):
            def linear(x, w, b=None, _n=name):
                trace.append(("gemm", _n))
                return F.linear(x, w, b)
            m.cpu_linear = linear

    def forward_modular(self, x, topk_weights, topk_ids, shared_experts=None,
                        shared_experts_input=None):
        out = torch.zeros(x.shape, dtype=torch.float32)
        emap = getattr(self, "_expert_map", None)
        for t in range(x.shape[0]):
            for j in range(topk_ids.shape[1]):
                e = int(topk_ids[t, j])
                if emap is not None:
                    e = int(emap[e])
                    if e < 0:  # not on this rank
                        continue
                g, u = F.linear(x[t:t + 1], self.w13_weight[e]).chunk(2, dim=-1)
                y = F.linear(F.silu(g) * u, self.w2_weight[e])
                out[t] += float(topk_weights[t, j]) * y[0].float()
        trace.append(("experts", self.layer_name))
        return out.to(x.dtype)

    RoutedExperts.forward_modular = forward_modular
    for m in model.modules():
        if isinstance(m, Attention) and not hasattr(m.impl, "_l2s_zero"):
            core = m.impl.forward

            def zeroed(layer, q, k, v, kv_cache, attn_metadata, output=None,
                       _core=core, **kw):
                # The early return leaves Attention.forward's torch.empty
                # output unwritten (attention.py:531): zero it, as vLLM's
                # MLA profile-run path does, so outputs are reproducible.
                out = _core(layer, q, k, v, kv_cache, attn_metadata, output=output, **kw)
                if attn_metadata is None:
                    output.zero_()
                return out
            m.impl.forward = zeroed
            m.impl._l2s_zero = True
    original = ps.GroupCoordinator.all_reduce

    def all_reduce(self, x):
        site = "?"
        for f in reversed(traceback.extract_stack()[:-1]):
            if "vllm/" in f.filename and "communication_op" not in f.filename:
                site = f"{f.filename.split('vllm/')[-1]}:{f.name}"
                break
        trace.append(("all_reduce", site))
        return original(self, x)

    ps.GroupCoordinator.all_reduce = all_reduce


def fill_weights(model) -> None:
    """Deterministic weights: N(0, 0.02), norms around 1."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            v = torch.randn(p.shape, generator=g) * 0.02 + (1.0 if "norm" in name else 0)
            p.copy_(v.to(p.dtype))


def record_events(rt, trace: list) -> None:
    """Append each event of the dry-run runtime ``rt`` to ``trace`` as
    ``("l2s", op, window, layer, hook)`` when it happens, between the
    GEMMs and all-reduces the substitutions record."""
    rec = rt._rec

    def record(op, wi=None, **kw):
        rec(op, wi, **kw)
        e = rt.events[-1]
        trace.append(("l2s", e.op, e.window, e.layer, e.hook))

    rt._rec = record


def _forward(model, cfg):
    import torch
    from vllm.forward_context import BatchDescriptor, set_forward_context

    ids = torch.arange(TOKENS) * 7 + 3
    pos = torch.full((TOKENS,), 7, dtype=torch.long)
    bd = BatchDescriptor(num_tokens=TOKENS, num_reqs=TOKENS, uniform=True)
    with torch.inference_mode(), set_forward_context(None, cfg, num_tokens=TOKENS,
                                                     batch_descriptor=bd):
        out = model(ids, pos)
    return out.float().numpy().tobytes()


def _rank(ctx) -> dict:
    """Per rank: the live inventory, hook-target problems, and the ordered
    trace of a dry-run forward with the every-hook plan installed."""
    from l2sched.compiler.compile import compile_plan
    from l2sched.lang.resolve import load_schedule_text
    from l2sched.runtime.dry_run import DryRunRuntime
    from l2sched.runtime.gate import StepInfo
    from l2sched.vllm.sites import install_plan

    model = ctx.build()
    live = live_inventory(model, ctx.tp, ctx.ep, ctx.rank, adapter="qwen3_moe")
    problems = hook_target_problems(AD, model)
    fill_weights(model)
    trace: list = []
    _cpu_substitutions(model, trace)
    plain = _forward(model, ctx.vllm_config)
    schedule = load_schedule_text(every_hook_schedule(ctx.tp, ctx.ep), "every.l2s",
                                  model_config={**TINY, "architectures": [ARCH]})
    plan = compile_plan(schedule, live, ctx.rank)
    rt = DryRunRuntime(plan)
    rt.set_step(StepInfo(num_tokens=TOKENS))
    record_events(rt, trace)
    installed = install_plan(AD.decoder_layers(model), live, plan, rt)
    trace.clear()
    try:
        hooked = _forward(model, ctx.vllm_config)
    finally:
        installed.remove()
    return {"live": live, "problems": problems, "trace": list(trace),
            "same": plain == hooked,
            "issues": [(wi.window, wi.hook, wi.layer) for wi in plan.issues]}


_CACHE: dict = {}


def _ranks(tp: int, ep: bool) -> list[dict]:
    if (tp, ep) not in _CACHE:
        _CACHE[(tp, ep)] = run_ranks(_rank, TINY, tp, ep, device="cpu",
                                     timeout=900, architecture=ARCH)
    return _CACHE[(tp, ep)]


def expected_order(kinds, tp: int) -> list[tuple]:
    """The events the adapter's decode timeline predicts, per layer in order:
    each hook's window issue (``l2s fork``) where the hook fires, the GEMMs
    the trace records by module, the expert output, the all-reduces at
    TP > 1, then the one join after the last layer."""
    gemms = {"attn.qkv_proj": "self_attn.qkv_proj", "attn.o_proj": "self_attn.o_proj",
             "mlp.gate_up_proj": "mlp.gate_up_proj", "mlp.down_proj": "mlp.down_proj"}
    out = []
    for i, kind in enumerate(kinds):
        for op in AD.decode_timeline(kind):
            out += [("fork", h, i) for h in op.hooks_before]
            if op.name in gemms:
                out.append(("gemm", gemms[op.name], i))
            elif op.name == "moe.w13":
                out.append(("experts", i))
            elif op.cls == "collective" and AD.condition_holds(
                    op.condition, i, len(kinds), tp, False):
                out.append(("all_reduce", i))
            out += [("fork", h, i) for h in op.hooks_after]
    return out + [("join",)]


def observed_order(trace: list) -> list[tuple]:
    """The trace in ``expected_order``'s terms (launch/skip events and the
    GEMMs the timeline does not name dropped)."""
    out, layer = [], -1
    for ev in trace:
        if ev[0] == "gemm" and ".layers." in ev[1]:
            layer = int(ev[1].split(".layers.")[1].split(".")[0])
            path = ev[1].split(f".layers.{layer}.")[1]
            if path in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj",
                        "mlp.down_proj"):
                out.append(("gemm", path, layer))
        elif ev[0] == "experts":
            out.append(("experts", int(ev[1].split(".layers.")[1].split(".")[0])))
        elif ev[0] == "all_reduce" and ("linear.py" in ev[1] or "moe_runner" in ev[1]):
            out.append(("all_reduce", layer))
        elif ev[0] == "l2s" and ev[1] == "fork":
            out.append(("fork", ev[4], ev[3]))
        elif ev[0] == "l2s" and ev[1] == "join":
            out.append(("join",))
    return out


LAYOUTS = [(1, False), (1, True), (2, False), (2, True)]


@pytest.mark.parametrize("tp,ep", LAYOUTS, ids=lambda v: str(v))
def test_live_inventory_equals_analytical(tp, ep):
    config = {**TINY, "architectures": [ARCH]}
    for rank, res in enumerate(_ranks(tp, ep)):
        ana = analytical_inventory(config, tp, ep, rank)
        live = res["live"]
        assert ana.model == live.model == "qwen3_moe"
        assert [str(k) for k in live.kinds] == ["gqa+dense"] + ["gqa+moe"] * 3
        assert inventory_mismatches(ana, live) == [], f"rank {rank}"
        assert res["problems"] == []
        w13 = live.tensor(1, "mlp.experts.routed_experts.w13_weight")
        if ep and tp > 1:
            assert w13.shape == (4, 128, 256) and w13.experts == (4 * rank, 4 * rank + 4)
        else:
            assert w13.shape == (8, 128 // tp, 256) and w13.experts == (0, 8)
        qkv = live.tensor(1, "self_attn.qkv_proj.weight")
        assert qkv.shape == ((8 + 2 * 2) * 64 // tp, 256)


@pytest.mark.parametrize("tp,ep", LAYOUTS, ids=lambda v: str(v))
def test_every_hook_fires_in_timeline_order(tp, ep):
    kinds = AD.layer_kinds(TINY)
    want = expected_order(kinds, tp)
    for rank, res in enumerate(_ranks(tp, ep)):
        assert observed_order(res["trace"]) == want, f"rank {rank}"
        assert res["same"], f"rank {rank}: outputs differ with the plan installed"
        fired = {(h, layer) for _, h, layer in (e for e in want if e[0] == "fork")}
        every = {(h.name, i) for i, k in enumerate(kinds) for h in AD.HOOKS
                 if h.exists_in(k)}
        assert fired == every
        assert {(h, layer) for _, h, layer in res["issues"]} == every
