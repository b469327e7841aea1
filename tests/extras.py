"""What to install for the tests that need an optional package: the skip
reasons name the extra of ``pyproject.toml`` that brings it, never a path
on one developer's machine; and the device limits the tests write down."""

from l2sched.device.limits import DeviceLimits

#: torch comes with vLLM (the ``vllm`` extra) or from a torch wheel.
TORCH_MISSING = ("torch is not installed (pip install -e '.[test,vllm]' brings it "
                 "with vLLM 0.33.0, or install a torch wheel)")
#: The CuTe DSL fill kernel's packages (``gpu`` extra).
GPU_MISSING = "the CuTe DSL kernel packages are not installed (pip install -e '.[gpu]')"
#: vLLM itself (``vllm`` extra).
VLLM_MISSING = ("vllm is not installed in this interpreter "
                "(pip install -e '.[test,vllm]')")

#: RTX PRO 6000 Blackwell (sm_120): 101,376 B opt-in shared memory per block,
#: Triton's "Hardware limit: 101376" quoted in sglang pull request #17908
#: (docs/sources.md#sm120-smem-limit); 188 SMs (NVIDIA's specifications:
#: 24,064 CUDA cores / 128 per SM); L2 134,217,728 B and persisting-L2
#: maximum 84 MB (docs/sources.md#sm120-prefetcher).
SM120 = DeviceLimits(101_376, 188, 134_217_728, 84_000_000, (12, 0),
                     source="sglang #17908 / NVIDIA specifications")
#: H200 (sm_90): 232,448 B (227 KiB, CUDA C Programming Guide, "Compute
#: capabilities", 9.0); 132 SMs, L2 62,914,560 B and persisting-L2 maximum
#: 39,321,600 B as the driver reported them on the lent H200 (h200 profile).
H200 = DeviceLimits(232_448, 132, 62_914_560, 39_321_600, (9, 0),
                    source="CUDA C Programming Guide / the lent H200")


def assert_fill_kernels_compile(mode: str, shape: dict, policies, prelude: str = "",
                                arch: str = "sm_90a") -> None:
    """Trace and compile the fill kernel of ``mode`` and ``shape`` for every
    cache policy of ``policies``, compile-only for ``arch`` (no GPU), in a
    fresh interpreter that runs ``prelude`` first; fail with its output when
    a variant does not build."""
    import os
    import subprocess
    import sys
    code = (prelude + "from l2sched.runtime import kernel as K\n"
            f"for pol in {tuple(policies)!r}:\n"
            f"    k = K.get_kernel(0, check_device=False, ffi=False, mode={mode!r}, "
            f"policy=pol, **{shape!r})\n"
            "    assert k is not None, K.disabled_reason()\n"
            f"    assert k.spec.mode == {mode!r}\n"
            "print('ok')\n")
    env = dict(os.environ, CUTE_DSL_ARCH=arch)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr[-4000:]
