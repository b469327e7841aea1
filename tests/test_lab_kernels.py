"""The fill-kernel forms only the lab builds (``lab/kernels.py``: ``line``,
``touch``, the ``none`` cache policy): the product refuses them, the lab's
``register()`` makes them build (compile-only for sm_90a, no GPU)."""

import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.runtime import kernel as K

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mode, policy", [("line", "evict_last"), ("touch", "evict_last"),
                                          ("bulk", "none")])
def test_the_product_does_not_build_the_labs_forms(mode, policy):
    # run in a fresh interpreter: another test may have registered them here
    code = ("from l2sched.runtime import kernel as K\n"
            f"try:\n    K.KernelSpec({mode!r}, policy={policy!r}).check()\n"
            "except ValueError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert "refused:" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("mode, shape", [
    ("line", {}),
    ("touch", {"grid": 264, "threads": 32, "chunk": 65536}),
    ("bulk", {}),
    ("copy", {"grid": 8, "threads": 32, "chunk": 16384, "stages": 2}),
])
def test_the_labs_forms_compile_after_register(mode, shape):
    pytest.importorskip("cutlass", reason="needs nvidia-cutlass-dsl: pip install -e '.[gpu]'")
    from extras import assert_fill_kernels_compile
    assert_fill_kernels_compile(mode, shape, ("evict_last", "none"), prelude=(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "import lab.kernels\nlab.kernels.register()\n"))


def test_register_is_idempotent_and_adds_the_none_policy():
    import lab.kernels
    lab.kernels.register()
    lab.kernels.register()
    assert K.PTX_POLICY["none"] is None
    assert K.KernelSpec("touch", chunk=65536, policy="none").check().mode == "touch"


def test_buildable_forms_name_exactly_the_registered_forms():
    # KernelSpec.check (device.kernel_spec) reads BUILDABLE_FORMS; the
    # runtime's register_form keeps it in step with the forms it can build
    import lab.kernels
    from l2sched.device.kernel_spec import BUILDABLE_FORMS
    from l2sched.runtime.fill_kernels import FORMS
    lab.kernels.register()
    assert BUILDABLE_FORMS == set(FORMS)


def test_the_spec_checks_without_the_runtime():
    # the lint and the fit use KernelSpec with no runtime imported
    code = ("import sys\nfrom l2sched.device.kernel_spec import KernelSpec\n"
            "assert KernelSpec('copy', stages=4, chunk=32768).check().stages == 4\n"
            "print(sorted(m for m in sys.modules if m.startswith('l2sched.runtime')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
