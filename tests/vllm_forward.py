"""Decode-shaped forwards of vLLM 0.33.0's real GLM-5.3 model on CPU.

Builds on ``vllm_cpu`` (construction on CPU in gloo ranks). The CUDA wheel of
vLLM has no CPU kernels for a few ops the forward reaches; each is replaced by
the smallest CPU-correct equivalent, listed in ``SUBSTITUTIONS`` (the test
module docstring repeats the list). Everything else is vLLM's own layer code:
embeddings, mHC (``forward_native``), KDA/MLA projections, o_norm, router,
grouped top-k, shared experts, ``MoERunner``, ``RowParallelLinear`` and the
real all-reduces over gloo (``GroupCoordinator.all_reduce``).

``Trace`` records, in one ordered list shared with the dry-run backend:
every linear GEMM (by module path), every routed-expert output, every real
all-reduce (with its vLLM call site) and every fork/launch/skip/join of the
runtime. Runs inside a rank process only.
"""

from __future__ import annotations

import math
import traceback
from typing import Any

#: Each CPU substitution: (what, vLLM site, why, the equivalent used).
SUBSTITUTIONS = (
    ("CustomOp modules -> forward_native",
     "model_executor/custom_op.py (mHC hc_pre / fused_post_pre / hc_post, "
     "FusedRMSNormGated, SiluAndMulWithClamp, RMSNorm)",
     "forward_cpu calls torch.ops._C.* (e.g. hc_pre_fused_cpu), absent from "
     "the CUDA wheel", "vLLM's own forward_native of each op"),
    ("LinearBase.cpu_linear = F.linear",
     "model_executor/layers/utils.py:673 cpu_unquantized_gemm",
     "set by process_weights_after_loading on CPU, which would repack the "
     "weight for a _C GEMM absent from the CUDA wheel",
     "torch.nn.functional.linear (vLLM's own fallback, linear.py:212), "
     "wrapped to record the GEMM"),
    ("fused_q_kv_rmsnorm",
     "model_executor/layers/mla.py:204-215 (Triton)",
     "Triton kernel, no CPU build",
     "two fp32 RMSNorms with the q_a/kv_a layernorm weights, cast back"),
    ("fwht128_quant_fp8",
     "models/glm5next/common/attention.py (Triton)",
     "Triton kernel, no CPU build",
     "orthonormal Walsh-Hadamard transform over blocks of 128, per-row fp8 "
     "e4m3 quantisation with scale amax/448"),
    ("MLAAttention.impl.record_logical_topk_ready",
     "model_executor/layers/mla.py:234-235", "records a CUDA event",
     "no-op (nothing to order on CPU)"),
    ("RoutedExperts.forward_modular",
     "model_executor/layers/fused_moe/routed_experts.py:1369",
     "the CPU MoE backend calls _C ops absent from the CUDA wheel",
     "per-token reference: w13 GEMM, the layer's SiluAndMulWithClamp "
     "(forward_native), w2 GEMM, top-k weighted sum in fp32"),
    ("process_weights_after_loading (per-module quant part)",
     "model_executor/model_loader/utils.py:139",
     "on CPU it repacks linear weights for _C GEMMs",
     "only the deferred attention layers' own post-load step "
     "(MLAAttention builds W_UK_T/W_UV) and the model-level hook run; the "
     "plugin's wrapper around it is the real one"),
    ("attention cores (KDA recurrent + conv, sparse MLA decode, indexer top-k)",
     "kda.py:512, mla_attention.py:935, sparse_indexer.py",
     "GPU-only kernels (Triton / FlashMLA / DeepGEMM) and paged KV caches",
     "not run: forwards use attn_metadata=None, vLLM's own profile-run path "
     "that returns from the cores early; every hook point l2sched uses lies "
     "outside the cores"),
    ("KDA core output in that path",
     "models/glm5next/common/kda.py:484 (torch.empty) and :512 (early return)",
     "the early return leaves core_attn_out uninitialised, so outputs would "
     "differ run to run",
     "zero-filled, as vLLM's MLA profile-run path does (mla_attention.py:956)"),
)


class Trace:
    """An ordered record of ``(op, detail...)`` tuples."""

    def __init__(self):
        self.events: list[tuple] = []
        self.on = True

    def add(self, *ev) -> None:
        """Append one event when recording is on."""
        if self.on:
            self.events.append(tuple(ev))


def fill_weights(model, seed: int) -> None:
    """Deterministic N(0, 0.02) weights (0.5 + N for norm weights)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point():
                continue
            v = torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.02
            if "norm" in name:
                v += 1.0
            p.copy_(v.to(p.dtype))


def _fwht128_quant_fp8(q):
    import torch

    shape = q.shape
    x = q.float().reshape(-1, 128)
    n = 1
    while n < 128:  # in-place butterfly, orthonormal overall
        x = x.reshape(-1, 128 // (2 * n), 2, n)
        a, b = x[:, :, 0, :], x[:, :, 1, :]
        x = torch.stack((a + b, a - b), dim=2)
        n *= 2
    x = x.reshape(shape).float() / math.sqrt(128)
    rows = x.reshape(shape[0], -1)
    scale = rows.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
    return (rows / scale).reshape(shape).to(torch.float8_e4m3fn), scale


def apply_cpu_substitutions(model, trace: Trace) -> None:
    """Apply every entry of ``SUBSTITUTIONS`` to ``model`` and vLLM, and make
    the real all-reduce record its call site in ``trace``."""
    import torch
    import torch.nn.functional as F
    import vllm.distributed.parallel_state as ps
    import vllm.model_executor.layers.mla as mla_mod
    import vllm.models.glm5next.common.attention as glm_attn
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    names = {id(m): n for n, m in model.named_modules()}
    for name, m in model.named_modules():
        if isinstance(m, CustomOp) and type(m).forward_native is not CustomOp.forward_native:
            m._forward_method = m.forward_native
        if isinstance(m, LinearBase):
            def linear(x, w, b=None, _n=name):
                trace.add("gemm", _n)
                return F.linear(x, w, b)
            m.cpu_linear = linear
        if isinstance(m, MLAAttention):
            m.impl.record_logical_topk_ready = lambda: None

    def q_kv_rmsnorm(q_c, kv_c, wq, wkv, eps):
        def rms(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
                    * w.float()).to(x.dtype)
        return rms(q_c, wq), rms(kv_c, wkv)

    mla_mod.fused_q_kv_rmsnorm = q_kv_rmsnorm
    glm_attn.fwht128_quant_fp8 = _fwht128_quant_fp8

    def forward_modular(self, x, topk_weights, topk_ids, shared_experts=None,
                        shared_experts_input=None):
        mlp = self._l2s_mlp
        act = mlp.shared_experts.act_fn.forward_native
        out = torch.zeros(x.shape, dtype=torch.float32)
        for t in range(x.shape[0]):
            for j in range(topk_ids.shape[1]):
                e = int(topk_ids[t, j])
                h = F.linear(x[t:t + 1], self.w13_weight[e])
                y = F.linear(act(h), self.w2_weight[e])
                out[t] += float(topk_weights[t, j]) * y[0].float()
        trace.add("experts", self.layer_name)
        return out.to(x.dtype)

    RoutedExperts.forward_modular = forward_modular

    kda_cls = type(next(layer.self_attn for layer in _layers(model)
                        if hasattr(layer.self_attn, "in_proj_qkvbfg_a")))
    if not getattr(kda_cls._forward, "_l2s_zero", False):
        from vllm.forward_context import get_forward_context

        kda_core = kda_cls._forward

        def kda_forward(self, qkv_proj_states, g1, beta, core_attn_out):
            kda_core(self, qkv_proj_states, g1, beta, core_attn_out)
            if get_forward_context().attn_metadata is None:
                core_attn_out.zero_()

        kda_forward._l2s_zero = True
        kda_cls._forward = kda_forward
    for layer in _layers(model):
        if hasattr(layer.mlp, "experts"):
            object.__setattr__(layer.mlp.experts.routed_experts, "_l2s_mlp", layer.mlp)

    original_ar = ps.GroupCoordinator.all_reduce
    if not getattr(original_ar, "_l2s_trace", False):
        def all_reduce(self, x):
            site = "?"
            for f in reversed(traceback.extract_stack()[:-1]):
                if "vllm/" in f.filename and "communication_op" not in f.filename:
                    site = f"{f.filename.split('vllm/')[-1]}:{f.name}"
                    break
            trace.add("all_reduce", site)
            return original_ar(self, x)
        all_reduce._l2s_trace = True
        ps.GroupCoordinator.all_reduce = all_reduce
    del names


def trace_runtime(rt, trace: Trace) -> None:
    """Make the dry-run runtime ``rt`` add each event it records to
    ``trace`` too, as ``("l2s", op, window, layer, hook, nbytes)``."""
    original_rec = rt._rec

    def rec(op, wi=None, **kw):
        original_rec(op, wi, **kw)
        e = rt.events[-1]
        trace.add("l2s", e.op, e.window, e.layer, e.hook, e.nbytes)

    rt._rec = rec


def cpu_post_load(model, model_config=None, target_device=None) -> None:
    """Stand-in for the body of vLLM's ``process_weights_after_loading`` on
    CPU (see ``SUBSTITUTIONS``): the deferred attention layers' post-load
    step and the model-level hook, not the per-module CPU repacking."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    for _, m in model.named_modules():
        if isinstance(m, MLAAttention):
            m.process_weights_after_loading(torch.bfloat16)
    if hasattr(model, "process_weights_after_loading"):
        model.process_weights_after_loading()


def _layers(model):
    return model.model.layers


def decode_forward(model, vllm_config, num_tokens: int = 4, seed: int = 0):
    """One decode-shaped forward (``num_tokens`` one-token requests, a
    uniform batch descriptor, ``attn_metadata=None``); returns the hidden
    states."""
    import torch
    from vllm.forward_context import BatchDescriptor, set_forward_context

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, (num_tokens,), generator=g)
    pos = torch.full((num_tokens,), 7, dtype=torch.long)
    bd = BatchDescriptor(num_tokens=num_tokens, num_reqs=num_tokens, uniform=True)
    with torch.inference_mode(), set_forward_context(
            None, vllm_config, num_tokens=num_tokens, batch_descriptor=bd):
        return model(ids, pos)


def output_bytes(t: Any) -> bytes:
    """Exact bytes of a tensor (bf16 viewed as int16)."""
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()
