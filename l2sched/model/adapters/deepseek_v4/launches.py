"""Which DeepSeek-V4 decode ops vLLM 0.33.0 launches with programmatic
dependent launch (PDL), and when (``PDL_LAUNCHES``; lint rule ``L2S113``,
docs/runtime.md#programmatic-launch-chains). Read off the ``vllm==0.33.0``
wheel's Python (paths relative to ``vllm/``); ops whose kernels live in
vLLM's C++ extension or in libraries whose launch attributes are not visible
there (FlashMLA, DeepGEMM, cuBLAS, the all-reduce) are not listed, so the
lint says nothing about them."""

from __future__ import annotations

from l2sched.model.adapters.records import (
    PDL_ARCH_SM90_UP,
    PdlLaunch,
    gate_ll_bf16_pdl,
    mhc_tilelang_pdl,
)

#: The mHC post + pre before the attention (layers > 0) and the MoE.
_VIA = "models/deepseek_v4/nvidia/model.py"

PDL_LAUNCHES: tuple[PdlLaunch, ...] = (
    # layer 0 runs mhc_pre_tilelang / mhc_pre_broadcast_tilelang, whose first
    # kernel may be DeepGEMM's tf32_hc_prenorm_gemm: not listed
    mhc_tilelang_pdl("hc.attn", "layer>0", _VIA),
    mhc_tilelang_pdl("hc.ffn", "", _VIA),
    # GateLinear(out_dtype=float32, bias=False), unquantized bf16 weight
    gate_ll_bf16_pdl("moe.gate", "models/deepseek_v4/nvidia/model.py GateLinear("
                     "out_dtype=torch.float32)"),
    # scored (not hash-routed) layers; Triton's launch_pdl sets programmatic
    # stream serialization on the launch
    PdlLaunch("moe.routing", "_dsv4_topk_kernel (Triton, launch_pdl)",
              "model_executor/layers/fused_moe/router/fused_topk_bias_router.py "
              "fused_topk_bias (can_use_dsv4_topk) -> router/dsv4_topk.py dsv4_topk "
              "launch_pdl=current_platform.is_arch_support_pdl()",
              PDL_ARCH_SM90_UP, "sm_90 and newer (is_arch_support_pdl)",
              mlp=("moe",),
              config=(("scoring_func", ("sqrtsoftplus",)),
                      ("n_routed_experts", (256, 384)), ("num_experts_per_tok", (6,)))),
)
