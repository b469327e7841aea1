"""What to install for the tests that need an optional package: the skip
reasons name the extra of ``pyproject.toml`` that brings it, never a path
on one developer's machine."""

#: torch comes with vLLM (the ``vllm`` extra) or from a torch wheel.
TORCH_MISSING = ("torch is not installed (pip install -e '.[test,vllm]' brings it "
                 "with vLLM 0.33.0, or install a torch wheel)")
#: The CuTe DSL fill kernel's packages (``gpu`` extra).
GPU_MISSING = "the CuTe DSL kernel packages are not installed (pip install -e '.[gpu]')"
#: vLLM itself (``vllm`` extra).
VLLM_MISSING = ("vllm is not installed in this interpreter "
                "(pip install -e '.[test,vllm]')")


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
