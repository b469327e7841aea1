"""Which GLM-5.3 decode ops vLLM 0.33.0 launches with programmatic
dependent launch (PDL), and when (``PDL_LAUNCHES``; lint rule ``L2S113``,
docs/runtime.md#programmatic-launch-chains). Read off the ``vllm==0.33.0``
wheel's Python (paths relative to ``vllm/``); ops whose kernels live in
vLLM's C++ extension (norms, routing top-k, all-reduce) are not listed:
their launch attributes are not visible there, so the lint says nothing
about them."""

from __future__ import annotations

from l2sched.model.adapters.records import (
    PDL_ARCH_SM90_UP,
    PdlLaunch,
    gate_ll_bf16_pdl,
    mhc_tilelang_pdl,
)

#: ``model_executor/layers/mhc.py`` ``MHCFusedPostPreOp.forward_cuda``, called
#: by ``models/glm5next/common/model.py`` ``hc_fused_post_pre``.
_VIA = "models/glm5next/common/model.py hc_fused_post_pre -> MHCFusedPostPreOp.forward_cuda"

PDL_LAUNCHES: tuple[PdlLaunch, ...] = (
    # layer 0 runs mhc_pre_tilelang instead, whose first kernel is DeepGEMM's
    # tf32_hc_prenorm_gemm when DeepGEMM is installed (launch attributes not
    # visible in vLLM's Python): not listed
    mhc_tilelang_pdl("mhc.attn_pre", "layer>0", _VIA),
    mhc_tilelang_pdl("mhc.ffn_pre", "", _VIA),
    PdlLaunch("mhc.post_last", "mhc_post_tilelang",
              "model_executor/kernels/mhc/tilelang.py mhc_post_tilelang; "
              "tilelang_kernels.py ENABLE_PDL -> T.pdl_sync()",
              PDL_ARCH_SM90_UP, "sm_90 and newer (is_arch_support_pdl)",
              condition="layer==last", requires="TileLang"),
    # GateLinear tier 1 needs out_dtype float32; GLM-5.3 gets it only from a
    # config with moe_router_dtype "float32" (models/glm5next/common/model.py
    # -> model_executor/models/deepseek_v2.py _get_moe_router_dtype); the
    # embedded config has none, so the gate runs F.linear there.
    gate_ll_bf16_pdl("moe.gate", "models/glm5next/common/model.py GateLinear("
                     "out_dtype=router_dtype)", mlp=("moe",),
                     config=(("moe_router_dtype", ("float32",)),)),
)
