"""vLLM general plugin for the GPU run of ``benchmarks/vllm_gpu.py`` only: the
two substitutions the staged payload needs (docs/vllm.md, "GPU run").

``stage.sh`` installs this module with an entry point
(``vllm.general_plugins``: ``vllm_gpu_shims = vllm_gpu_shims:register``), so
vLLM runs ``register()`` in every process (script, engine core, worker)
before a model is built, like the l2sched plugin. Both substitutions are
vLLM's own fallbacks, chosen only because a dependency is not carried:

1. mHC without TileLang. On CUDA, ``MHCPreOp``, ``MHCPostOp`` and
   ``MHCFusedPostPreOp`` call TileLang kernels unconditionally
   (``model_executor/layers/mhc.py``); TileLang (50 MB) and z3 (29 MB) are
   not carried. Their ``forward_hip`` is vLLM's path for a GPU without
   TileLang or AITER: ``forward_native`` (torch) plus the RMSNorm through
   ``vllm.ir``. Used as ``forward_cuda`` when ``tilelang`` is not
   importable. Numerics differ from TileLang's, identically in every arm.
2. vLLM's CuTe DSL router GEMMs off. The carried ``nvidia-cutlass-dsl`` is
   4.3.5 (the one l2sched's fill kernel was validated with, 58 MB); vLLM
   0.33.0 pins 4.8.0 (>92 MB) and, when ``cutlass`` imports, routes the MoE
   router GEMM (M <= 16/32) through CuTe DSL kernels written for 4.8.
   ``_ll_router_common._cutedsl_available = False`` makes ``GateLinear``
   fall back to its cuBLAS bf16->fp32 tier, as on an install without
   cutlass.

Each process logs one line saying what was applied. Set
``VLLM_GPU_SHIMS=0`` to apply nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import os

log = logging.getLogger("vllm.vllm_gpu_shims")

_done = False


def _mhc_torch_fallback() -> str:
    if importlib.util.find_spec("tilelang") is not None:
        return "mHC TileLang (tilelang importable, left alone)"
    from vllm.model_executor.layers import mhc

    for cls in (mhc.MHCPreOp, mhc.MHCPostOp, mhc.MHCFusedPostPreOp):
        cls.forward_cuda = cls.forward_hip
    return "mHC torch fallback (forward_hip: no TileLang, no AITER)"


def _cutedsl_router_off() -> str:
    from vllm.model_executor.kernels.linear.cute_dsl import _ll_router_common

    _ll_router_common._cutedsl_available = False
    return "CuTe DSL router GEMM off (cuBLAS bf16->fp32 tier)"


def register() -> None:
    """Apply both substitutions once per process; never raises."""
    global _done
    if _done or os.environ.get("VLLM_GPU_SHIMS", "1") == "0":
        return
    _done = True
    applied = []
    for step in (_mhc_torch_fallback, _cutedsl_router_off):
        try:
            applied.append(step())
        except Exception as e:  # report, never break vLLM start-up
            applied.append(f"{step.__name__} FAILED: {type(e).__name__}: {e}")
    log.warning("vllm_gpu_shims: pid %d: %s", os.getpid(), "; ".join(applied))
