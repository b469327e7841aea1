"""CPU check of the GPU payload: import vLLM's offline-engine and GLM-5.3 CUDA
paths with the CUDA platform forced (device queries answered as one H200,
sm_90), apply the shims plugin, and ask vLLM which sparse-MLA attention
backend it would pick with the packages present.

    python benchmarks/vllm_gpu/fakecuda_smoke.py [MODULE ...]

Run it in a Python 3.12 venv that mirrors the GPU image (torch 2.11.0,
triton 3.6.0, transformers 5.17.0, ...) with the staged payload on
``PYTHONPATH``. The host needs no GPU and no driver: when ``libcuda.so.1``
cannot be loaded, the script builds a stand-in with ``gcc`` (every driver
entry point the vLLM extensions and Triton's launcher import, each
returning CUDA_ERROR_NO_DEVICE) and re-runs itself with it on
``LD_LIBRARY_PATH``. Triton's CUDA driver is reported active so vLLM keeps
real Triton. Nothing is launched.

Prints ``OK``/``FAIL`` per module (the first failure with the vLLM file and
line), the shims' result, the sparse-MLA backend choice and the reasons the
others were rejected; exits 1 on any failure.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
import sys
import tempfile
import traceback

MODULES = """vllm vllm.config vllm.entrypoints.llm vllm.v1.engine.core
vllm.v1.engine.llm_engine vllm.v1.engine.core_client vllm.v1.executor.uniproc_executor
vllm.v1.executor.multiproc_executor vllm.v1.worker.gpu_worker
vllm.v1.worker.gpu.model_runner vllm.v1.worker.gpu_model_runner vllm.models.glm5next
vllm.models.glm5next.nvidia.sparse_indexer vllm.models.glm5next.nvidia.ops.kpool_compress
vllm.models.glm5next.nvidia.ops.third_party.kda vllm.v1.attention.backends.mla.flashmla_sparse
vllm.v1.attention.backends.mla.indexer vllm.v1.attention.backends.gdn_attn
vllm.v1.attention.backends.mla.prefill.flash_attn
vllm.model_executor.layers.fused_moe.fused_moe vllm.model_executor.model_loader.dummy_loader
vllm.v1.sample.sampler vllm.compilation.breakable_cudagraph vllm.utils.deep_gemm
vllm.model_executor.layers.mamba.ops.causal_conv1d vllm.third_party.deep_gemm""".split()

#: Driver entry points imported by vLLM 0.33.0's extensions and by Triton's
#: CUDA launcher stub (nm -D --undefined-only; triton/backends/nvidia/driver.c).
DRIVER = """cuDeviceGet cuDeviceGetAttribute cuDevicePrimaryCtxRetain cuCtxGetCurrent
cuCtxSetCurrent cuCtxGetDevice cuFuncGetAttribute cuFuncSetAttribute cuFuncSetCacheConfig
cuGetErrorName cuGetErrorString cuGetProcAddress cuGetProcAddress_v2 cuLaunchKernel cuLaunchKernelEx
cuLaunchCooperativeKernel cuModuleGetFunction cuModuleLoadData cuModuleUnload
cuOccupancyMaxActiveClusters cuPointerGetAttribute cuTensorMapEncodeTiled cuTensorMapEncodeIm2col
cuDriverGetVersion cuInit cuLibraryLoadData cuLibraryGetKernel cuKernelGetFunction cuStreamGetCtx
cuMemGetAddressRange cuCtxSynchronize cuDeviceGetCount cuMemAlloc cuMemFree cuMemMap
cuMemUnmap cuMemSetAccess cuMemAddressReserve cuMemAddressFree cuMemGetAllocationGranularity
cuMemRelease cuMemCreate""".split()


def _ensure_libcuda() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
        return
    except OSError:
        pass
    if os.environ.get("_FAKECUDA_REEXEC"):
        raise SystemExit("fakecuda_smoke: stand-in libcuda.so.1 did not load")
    names = set(DRIVER)
    try:  # plus every driver call of this Triton's launcher stub
        import re

        import triton

        c = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/driver.c")
        with open(c) as f:
            names |= set(re.findall(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(", f.read()))
    except (ImportError, OSError):
        pass
    d = tempfile.mkdtemp(prefix="fakecuda-")
    src = os.path.join(d, "fake.c")
    with open(src, "w") as f:
        f.write("".join(f"int {s}(void){{return 100;}}\n" for s in sorted(names)))
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    os.path.join(d, "libcuda.so.1"), src], check=True)
    env = dict(os.environ, _FAKECUDA_REEXEC="1",
               LD_LIBRARY_PATH=d + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def _force_cuda_platform():
    try:  # Triton's CUDA driver "active" so vLLM keeps real Triton
        from triton.backends import backends

        backends["nvidia"].driver.is_active = staticmethod(lambda: True)
    except Exception as e:
        print(f"WARN  triton driver patch: {e}")
    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    cls = cuda.NonNvmlCudaPlatform
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(9, 0))
    cls.get_device_name = classmethod(lambda c, device_id=0: "NVIDIA H200")
    cls.get_device_total_memory = classmethod(lambda c, device_id=0: 143771 << 20)
    platforms._current_platform = cls()
    return cls


def _where(e: BaseException) -> str:
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if "/vllm/" in fr.filename:
            return f"vllm/{fr.filename.split('/vllm/', 1)[1]}:{fr.lineno}"
    return "?"


def _sparse_mla_choice(cls) -> str:
    """Which backend vLLM's selector picks for GLM-5.3's sparse MLA (head
    512, bf16 cache) on sm_90 inside a config holding the reduced model
    (FlashInfer/FlashMLA read it in supports_combination), the rejected ones
    with vLLM's reasons, and whether the script's explicit choice validates."""
    import importlib.util

    import torch
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vllm_gpu.py")
    spec = importlib.util.spec_from_file_location("vllm_gpu_script", path)
    vg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vg)
    d = tempfile.mkdtemp(prefix="glm53-reduced-")
    vg.write_model_dir(vg.reduced_config(64), vg.Path(d))
    mc = ModelConfig(model=d, skip_tokenizer_init=True, dtype="bfloat16")
    sel = AttentionSelectorConfig(head_size=512, dtype=torch.bfloat16,
                                  kv_cache_dtype="auto", block_size=None,
                                  use_mla=True, use_sparse=True)
    with set_current_vllm_config(VllmConfig(model_config=mc)):
        valid, invalid = cls.get_valid_backends(DeviceCapability(9, 0), sel, num_heads=64)
        explicit = cls.get_attn_backend_cls(
            AttentionBackendEnum[vg.SPARSE_MLA_BACKEND], sel, num_heads=64)
    rejected = "; ".join(f"{b.name}: {r[0]}" for b, (_p, r) in invalid.items()
                         if "sparse not supported" not in r[0])
    return (f"by priority {[c.backend.name for c in valid]} (first wins); explicit "
            f"{vg.SPARSE_MLA_BACKEND} -> {explicit.rsplit('.', 1)[-1]}; rejected: "
            f"{rejected}")


def main(argv: list[str]) -> int:
    _ensure_libcuda()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    cls = _force_cuda_platform()
    bad = 0
    for m in argv or MODULES:
        try:
            importlib.import_module(m)
            print(f"OK    {m}")
        except BaseException as e:  # noqa: BLE001 - report every failure
            bad += 1
            print(f"FAIL  {m}: {type(e).__name__}: {e} at {_where(e)}")
    try:
        import vllm_gpu_shims

        vllm_gpu_shims.register()
        from vllm.model_executor.layers import mhc

        ok = mhc.MHCFusedPostPreOp.forward_cuda is mhc.MHCFusedPostPreOp.forward_hip
        from vllm.model_executor.kernels.linear.cute_dsl import _ll_router_common as rc

        print(f"{'OK  ' if ok and rc._cutedsl_available is False else 'FAIL'}  shims: "
              f"mHC forward_cuda=forward_hip {ok}, cuteDSL router available "
              f"{rc._cutedsl_available}")
        bad += 0 if ok and rc._cutedsl_available is False else 1
    except BaseException as e:  # noqa: BLE001
        bad += 1
        print(f"FAIL  shims: {type(e).__name__}: {e}")
    try:
        print(f"OK    sparse MLA backend: {_sparse_mla_choice(cls)}")
    except BaseException as e:  # noqa: BLE001
        bad += 1
        print(f"FAIL  sparse MLA backend: {type(e).__name__}: {e} at {_where(e)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
