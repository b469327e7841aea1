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
