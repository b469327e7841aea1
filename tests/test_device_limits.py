"""Issue 32 (CPU part): device limits are read from the GPU (or a device
profile for a GPU that is not present), never sm_90 constants. A copy fill
kernel is fitted to the device's shared memory per block: under the SM120's
limits the shipped 4 x 32 KiB shape becomes 3 x 32 KiB (one INFO line), the
H200 keeps it, and a limit nothing fits is refused with one WARNING (the
kernel is not built, so never launched). Runs on CPU with a fake
``cuda.bindings.driver``."""

from __future__ import annotations

import logging
import re
import sys
import types
from pathlib import Path

import pytest

from l2sched.device import DEVICES_DIR, load_device
from l2sched.device.limits import DeviceLimits
from l2sched.errors import L2sInputError, L2sUsageError
from l2sched.runtime import kernel as K
from l2sched.runtime import set_aside
from l2sched.runtime import limits as RL
from l2sched.runtime.fill_kernels import BARRIER_BYTES

from extras import H200, SM120

ROOT = Path(__file__).resolve().parent.parent

#: The h200 profile's [fill.copy] shape (the shipped copy kernel).
COPY = K.KernelSpec("copy", grid=66, threads=32, chunk=32768, stages=4)


class FakeDriver(types.ModuleType):
    """The attributes ``runtime.limits`` reads, of one GPU."""

    def __init__(self, lim: DeviceLimits):
        super().__init__("cuda.bindings.driver")
        self.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
        self.CUlimit = types.SimpleNamespace(CU_LIMIT_PERSISTING_L2_CACHE_SIZE="L")
        self.values = {
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": lim.smem_per_block_optin_bytes,
            "MULTIPROCESSOR_COUNT": lim.sm_count, "L2_CACHE_SIZE": lim.l2_bytes,
            "MAX_PERSISTING_L2_CACHE_SIZE": lim.persisting_l2_max_bytes,
            "COMPUTE_CAPABILITY_MAJOR": lim.compute_capability[0],
            "COMPUTE_CAPABILITY_MINOR": lim.compute_capability[1]}
        self.CUdevice_attribute = types.SimpleNamespace(
            **{f"CU_DEVICE_ATTRIBUTE_{k}": k for k in self.values})

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGet(self, i):
        return (0, i)

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, self.values[attr])


@pytest.fixture
def live(monkeypatch):
    """``live(limits)``: a CUDA device with ``limits`` (fake driver, device
    check passed, compilation recorded instead of run)."""
    compiled = []

    def install(lim: DeviceLimits):
        drv = FakeDriver(lim)
        # the driver through set_aside's accessor, not sys.modules: a module
        # imported meanwhile (tvm_ffi) would keep a fake cuda.bindings.driver
        monkeypatch.setattr(set_aside, "_driver", lambda: drv)
        monkeypatch.setattr(K, "_ffi_available", lambda: False)
        monkeypatch.setitem(sys.modules, "cutlass", types.ModuleType("cutlass"))
        monkeypatch.setitem(sys.modules, "cutlass.cute", types.ModuleType("cutlass.cute"))
        monkeypatch.setattr(K, "device_supported", lambda i=0: (True, ""))
        # the always-on switch word needs a real device; its address is unused here
        monkeypatch.setattr(K, "always_on", lambda i: 0x1000)

        def compile_first(dev, spec, paths):
            compiled.append(spec)
            return K.PrefetchKernel((dev, spec), spec, None, False, 0.0)
        monkeypatch.setattr(K, "_compile_first", compile_first)
        RL.reset_for_tests()
        K.reset_for_tests()
        return compiled
    yield install
    RL.reset_for_tests()
    K.reset_for_tests()


def test_live_limits_are_read_from_the_driver(live):
    live(SM120)
    got = RL.read_device_limits(0)
    assert (got.smem_per_block_optin_bytes, got.sm_count, got.l2_bytes,
            got.persisting_l2_max_bytes, got.compute_capability) == \
        (101_376, 188, 134_217_728, 84_000_000, (12, 0))
    assert got.source == "CUDA driver, device 0"


def test_a_copy_kernel_under_sm120_limits_fits(live, caplog):
    compiled = live(SM120)
    with caplog.at_level(logging.INFO, logger="l2sched.kernel"):
        kern = K.get_kernel(0, COPY)
    assert kern is not None
    spec = kern.spec
    assert (spec.stages, spec.chunk, spec.grid) == (3, 32768, 66)  # fewer stages first
    assert spec.stages * spec.chunk + BARRIER_BYTES <= 101_376
    assert compiled == [spec]  # the fitted shape is what is compiled
    lines = [r for r in caplog.records if r.name == "l2sched.kernel"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    msg = lines[0].getMessage()
    assert "chunk=32768 stages=4 (132,096 B" in msg and "101,376 B" in msg
    assert "stages=3 (99,328 B" in msg and "sm_120" in msg


def test_h200_limits_keep_the_shipped_shape(live, caplog):
    compiled = live(H200)
    with caplog.at_level(logging.INFO, logger="l2sched.kernel"):
        kern = K.get_kernel(0, COPY)
    assert kern.spec == COPY and compiled == [COPY]
    assert not [r for r in caplog.records if "fit" in r.getMessage()]
    assert COPY.check(H200) is COPY
    with pytest.raises(ValueError, match="does not fit the 101,376 B"):
        COPY.check(SM120)


def test_a_limit_nothing_fits_is_refused_with_one_warning(live, caplog):
    tiny = DeviceLimits(BARRIER_BYTES + 8, 1, 1, 0, (12, 0), source="test")
    compiled = live(tiny)
    with caplog.at_level(logging.INFO, logger="l2sched.kernel"):
        assert K.get_kernel(0, COPY) is None
        assert K.get_kernel(0, COPY) is None  # cached: no second line
    lines = [r for r in caplog.records if r.name == "l2sched.kernel"]
    assert [r.levelno for r in lines] == [logging.WARNING], [r.getMessage() for r in lines]
    assert "not built" in lines[0].getMessage() and compiled == []
    # kernels without shared memory are not touched by the limit
    assert K.get_kernel(0, K.KernelSpec("bulk")).spec == K.KernelSpec("bulk")


def test_fitting_order_fewer_stages_then_a_smaller_chunk():
    assert K.fit_spec(COPY, SM120).stages == 3
    big = K.KernelSpec("copy", chunk=131072, stages=4)
    got = K.fit_spec(big, SM120)
    assert (got.stages, got.chunk) == (1, 65536)
    assert got.smem_bytes <= SM120.smem_per_block_optin_bytes
    assert K.fit_spec(K.KernelSpec("load", 1056, 128, 128), SM120).chunk == 128
    with pytest.raises(ValueError, match="stages must be at most 128"):
        K.KernelSpec("copy", chunk=16, stages=129).check()


def test_no_sm90_constant_is_left_in_the_kernel_module():
    text = (ROOT / "l2sched" / "runtime" / "kernel.py").read_text(encoding="utf-8")
    assert "MAX_SMEM_BYTES" not in text and "227 * 1024" not in text


def test_shipped_profiles_give_their_limits():
    assert load_device("sm120-rtx-pro-6000-maxq").limits == DeviceLimits(
        101_376, 188, 134_217_728, 84_000_000, (12, 0),
        source=load_device("sm120-rtx-pro-6000-maxq").limits.source)
    h = load_device("h200").limits
    assert (h.smem_per_block_optin_bytes, h.sm_count, h.l2_bytes,
            h.persisting_l2_max_bytes, h.compute_capability) == \
        (232_448, 132, 62_914_560, 39_321_600, (9, 0))


def test_profile_toml_round_trips_the_limits(tmp_path):
    from l2sched.model.config import default_config
    from l2sched.model.inventory import analytical_inventory
    from l2sched.profile.write import derive, profile_toml
    from test_profile import PROV, synthetic_results
    base = load_device("h200")
    prov = dict(PROV, smem_per_block_optin_bytes=101_376, sms=188,
                compute_capability=[12, 0], l2_bytes=134_217_728,
                set_aside_max_bytes=84_000_000)
    inv = analytical_inventory(default_config("glm5next"), tp=4, ep=False)
    derived = derive(synthetic_results(), base, inv, prov)
    path = tmp_path / "p.toml"
    path.write_text(profile_toml("sm120-measured", "test", prov, derived, base),
                    encoding="utf-8")
    assert "smem_per_block_optin_bytes = 101376" in path.read_text(encoding="utf-8")
    lim = load_device(str(path)).limits
    assert (lim.smem_per_block_optin_bytes, lim.sm_count, lim.l2_bytes,
            lim.persisting_l2_max_bytes, lim.compute_capability) == \
        (101_376, 188, 134_217_728, 84_000_000, (12, 0))


def test_a_bad_limit_is_an_error_at_its_key(tmp_path):
    text = (DEVICES_DIR / "h200.toml").read_text(encoding="utf-8")
    p = tmp_path / "bad.toml"
    p.write_text(text.replace("smem_per_block_optin_bytes = 232448",
                              'smem_per_block_optin_bytes = "227 KiB"'), encoding="utf-8")
    line = next(i for i, s in enumerate(text.splitlines(), 1)
                if s.startswith("smem_per_block_optin_bytes"))
    with pytest.raises(L2sInputError,
                       match=rf"bad.toml:{line}:1: gpu.smem_per_block_optin_bytes"):
        load_device(str(p))


def _sm120_with_copy(tmp_path) -> Path:
    """The SM120 profile with the h200's [fill.copy] table (4 x 32 KiB)
    added to its own [fill] table, and copy made its default kernel."""
    h200 = (DEVICES_DIR / "h200.toml").read_text(encoding="utf-8")
    copy = re.search(r"^\[fill\.copy\]\n(?:(?!\[).*\n)*", h200, flags=re.M).group(0)
    text = (DEVICES_DIR / "sm120-rtx-pro-6000-maxq.toml").read_text(encoding="utf-8")
    default = re.compile(r'^(\[fill\]\ndefault = )"bulk"$', flags=re.M)
    assert len(default.findall(text)) == 1, "the SM120 profile's [fill] table moved"
    text = default.sub(r'\1"copy"', text)
    p = tmp_path / "sm120-copy.toml"
    p.write_text(text + "\n" + copy, encoding="utf-8")
    return p


def test_fit_on_sm120_proposes_no_copy_shape_over_the_limit(tmp_path):
    from l2sched.fit import FitOptions, Search
    from l2sched.fit.search import fitting_kernels
    dev = load_device(str(_sm120_with_copy(tmp_path)))
    assert dev.fill_mode("copy").stages == 4 and dev.fill_default == "copy"
    ok, why = fitting_kernels(dev)
    assert ok == ["bulk"] and "101,376 B" in why["copy"]
    with pytest.raises(L2sUsageError, match="--kernel copy: its shape copy grid=66"):
        Search(dev, FitOptions(kernel="copy", quick=True))
    # the shipped profiles: every kernel the fit may propose fits
    for name in ("h200", "sm120-rtx-pro-6000-maxq"):
        d = load_device(name)
        ok, why = fitting_kernels(d)
        assert why == {} and ok == sorted(d.fill_modes)
        for mode in ok:
            fm = d.fill_mode(mode)
            spec = K.KernelSpec(mode, fm.grid, fm.threads, fm.chunk, fm.stages)
            assert spec.smem_bytes <= d.limits.smem_per_block_optin_bytes


def test_the_shipped_sm120_fit_names_only_kernels_that_fit():
    text = (ROOT / "schedules" / "glm53-flash-sm120-tp4-fit.l2s").read_text(
        encoding="utf-8")
    dev = load_device("sm120-rtx-pro-6000-maxq")
    modes = set(re.findall(r"\bkernel (\w+)", text)) or {dev.fill_default}
    for mode in modes:
        fm = dev.fill_mode(mode)
        spec = K.KernelSpec(mode, fm.grid, fm.threads, fm.chunk, fm.stages)
        assert K.fit_spec(spec, dev.limits) == spec
