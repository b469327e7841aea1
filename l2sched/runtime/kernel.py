"""The L2 fill kernel: which fill modes exist, how one is chosen and
compiled, and how it is launched. The CuTe DSL bodies live in
``runtime.fill_kernels``.

Fill modes (``units.FILL_MODES``; the lab adds its experiments' modes,
``lab/kernels.py``), measured on the lent H200:

- ``bulk``: ``cp.async.bulk.prefetch.L2`` per 16 KiB chunk. The instruction of
  the hand-written prefetchers; on the H200 it recovers only about 10-30% of
  the cold->hot gap of a consumer timed alone (benchmarks/results/h200-kernel-2026-11-29.md)
  but as much as copy inside the decode step
  (benchmarks/results/h200-2026-12-01-step-fill.md).
- ``load``: ordinary 4-byte loads with the L2 prefetch-size hint; the lines
  land, but the CTAs stay resident until they do (1,056 CTAs in the shape
  that filled best), which costs concurrent kernels.
- ``copy``: TMA bulk copies into shared memory from one thread per CTA,
  ``stages`` buffers deep, data discarded; lands lines from few CTAs.

A variant is a ``KernelSpec`` (mode, grid, threads, chunk, stages, policy;
``device.kernel_spec``, re-exported here, with ``fit_spec``):
every parameter that defines the compiled code is in it, and it is the cache
key (with the device). The launch shape per mode comes from the device
profile (``device.DeviceProfile.fill_mode``); the constants below are the
shape used when no profile is given.

Host launch: with TVM-FFI support (nvidia-cutlass-dsl 4.8.x, or 4.3.5 with
``apache-tvm-ffi`` importable) the function is compiled with
``--enable-tvm-ffi`` and called with plain ints (pointer, rows, stream
handle) through the bare ``tvm_ffi.Function``: 4.8-6.3 us per call measured
on the H200 (benchmarks/results/h200-host-cost-2026-11-29.md); otherwise the
generic CuTe DSL call path (28-45 us per call). ``PrefetchKernel.bind``
fixes the table and stream once. Inside a CUDA graph replay the host cost
is zero either way.

Device limits are read from the GPU, never assumed: before a variant is
compiled its shape is fitted to the device's ``DeviceLimits``
(``runtime.limits.read_device_limits``: shared memory per block opt-in, SM
count, L2, persisting-L2 maximum, compute capability; ``fit_spec``), so a
copy kernel never asks for more shared memory than the device has (the
SM120's 101,376 B per block takes 3 of the profile's 4 x 32 KiB stages).

Nothing here imports torch or cutlass at module import. A device without
CUDA or below compute capability 9.0, or cutlass missing, disables every
kernel with ONE log line on the ``l2sched.kernel`` logger; a variant that
fails to compile is disabled alone (one log line). Callers get ``None`` from
``get_kernel`` and never an exception.
"""

import logging
import threading
import time
from dataclasses import dataclass
from importlib.metadata import version

from l2sched.device.kernel_spec import (  # noqa: F401  (the runtime's API re-exports them)
    DEFAULT_CHUNK, DEFAULT_GRID, DEFAULT_THREADS, MAX_THREADS, MIN_COPY_CHUNK, PTX_POLICY,
    KernelSpec, fit_spec, register_cache_policy)
from l2sched.device.limits import DeviceLimits
from l2sched.env import env_flag
from l2sched.errors import L2sUsageError
from l2sched.runtime.fill_kernels import SWITCH_ALIGN, compile_fill
from l2sched.runtime.limits import read_device_limits
from l2sched.runtime.switch import always_on
from l2sched.units import ALIGN

log = logging.getLogger("l2sched.kernel")

#: Load-mode kernel shape that filled L2 best on the H200 (kernel_probe_l2.py,
#: benchmarks/results/h200-kernel-2026-11-29.md): pass as
#: ``get_kernel(..., **H200_LOAD_SHAPE)`` or ``CudaRuntime(plan, **H200_LOAD_SHAPE)``.
H200_LOAD_SHAPE = {"mode": "load", "grid": 1056, "threads": 128, "chunk": 128}
#: Dynamic shared memory (B) a block may use on every CUDA device without
#: opting in (CUDA C Programming Guide, "Compute capabilities": 48 KiB); the
#: bound of a copy kernel when the device's limits cannot be read.
PORTABLE_SMEM_BYTES = 48 * 1024


def fit_spec_logged(spec: KernelSpec, limits: DeviceLimits) -> KernelSpec | None:
    """``fit_spec`` with one log line when the shape changes (INFO: the
    original and the fitted shape) or nothing fits (WARNING: the kernel is
    not built, so it is never launched with more shared memory than the
    device has)."""
    got = fit_spec(spec, limits)
    where = (f"{limits.smem_per_block_optin_bytes:,} B of shared memory per block "
             f"(sm_{limits.compute_capability[0]}{limits.compute_capability[1]}, "
             f"{limits.source})")
    if got is None:
        log.warning("l2sched: fill kernel %s not built: no copy shape of at most "
                    "%d stages and a chunk of at least %d B fits the %s",
                    spec.shape_text(), spec.stages, MIN_COPY_CHUNK, where)
    elif got != spec:
        log.info("l2sched: fill kernel %s does not fit the %s; fitted to %s",
                 spec.shape_text(), where, got.shape_text())
    return got


_lock = threading.Lock()
_cache: dict[tuple, "PrefetchKernel | None"] = {}
_disabled_reason: str | None = None
_logged = False


def disable(reason: str) -> None:
    """Disable every kernel of this process, logging ``reason`` once (no
    CUDA, an unsupported device, cutlass missing)."""
    global _disabled_reason, _logged
    _disabled_reason = reason
    if not _logged:
        _logged = True
        log.warning("l2sched: L2 prefetch disabled: %s", reason)


def disabled_reason() -> str | None:
    """Why prefetch is disabled in this process, or ``None`` while enabled."""
    return _disabled_reason


def reset_for_tests() -> None:
    """Forget cached kernels and the disabled state (tests only)."""
    global _disabled_reason, _logged
    with _lock:
        _cache.clear()
        _disabled_reason = None
        _logged = False


def device_supported(device_index: int = 0) -> tuple[bool, str]:
    """``(ok, reason)``: CUDA present and compute capability >= 9.0 (the PTX ISA
    requires sm_90 for ``cp.async.bulk``). Never raises."""
    try:
        import torch
    except Exception as e:  # pragma: no cover - torch is a hard dep of callers
        return False, f"torch unavailable ({e})"
    try:
        if not torch.cuda.is_available():
            return False, "no CUDA device"
        cap = torch.cuda.get_device_capability(device_index)
    except Exception as e:
        return False, f"CUDA query failed ({e})"
    if cap < (9, 0):
        return False, f"compute capability {cap[0]}.{cap[1]} < 9.0"
    return True, ""


@dataclass
class PrefetchKernel:
    """One compiled variant. ``launch(table_ptr, row_begin, row_end, stream,
    switch_ptr)`` enqueues the fill of rows ``[row_begin, row_end)`` of the
    int64 ``[rows, 2]`` (address, nbytes) table at device address
    ``table_ptr`` on the CUDA stream whose raw handle is ``stream``
    (``torch.cuda.Stream.cuda_stream``), gated by the switch word at
    ``switch_ptr`` (``runtime.switch``).
    ``key`` is ``(device_index, spec)``: everything that defines the variant;
    ``compile_s`` is the compile time in seconds; ``ffi`` says whether calls go
    through TVM-FFI."""

    key: tuple
    spec: "KernelSpec"
    compiled: object
    ffi: bool
    compile_s: float
    _generic_args: object = None  # (make_ptr, Int64, Int32, gmem, CUstream): generic path

    def __post_init__(self):
        self._ffi_call = _direct_ffi_call(self.compiled) if self.ffi else None

    def launch(self, table_ptr: int, row_begin: int, row_end: int, stream: int,
               switch_ptr: int | None = None) -> None:
        """Enqueue the fill (asynchronous; capturable in a CUDA graph).
        ``switch_ptr``: device address of the int32 switch word the kernel
        reads first (``runtime.switch``; None: the device's always-on
        word). A bound launch (``bind``) costs less per call."""
        self.bind(table_ptr, stream, switch_ptr)(row_begin, row_end)

    def bind(self, table_ptr: int, stream: int, switch_ptr: int | None = None):
        """``launch`` with the table (device address), the stream (raw
        handle) and the switch word (device address; None: always on) fixed:
        returns ``f(row_begin, row_end)``. The generic path's pointer and
        ``CUstream`` objects are built here once instead of per call (about
        1 us each on the host)."""
        if switch_ptr is None:
            switch_ptr = always_on(self.key[0])
        if self.ffi:
            call = self._ffi_call

            def launch_ffi(row_begin: int, row_end: int) -> None:
                call(table_ptr, switch_ptr, row_begin, row_end, stream)
            return launch_ffi
        make_ptr, i64, i32, gmem, custream = self._generic_args
        compiled = self.compiled
        ptr = make_ptr(i64, table_ptr, gmem, assumed_align=ALIGN)
        sw = make_ptr(i32, switch_ptr, gmem, assumed_align=SWITCH_ALIGN)
        cu = custream(stream)

        def launch_generic(row_begin: int, row_end: int) -> None:
            compiled(ptr, sw, row_begin, row_end, cu)
        return launch_generic


def _direct_ffi_call(compiled):
    """The cheapest callable for a TVM-FFI compiled function: the bare
    ``tvm_ffi.Function`` behind it. nvidia-cutlass-dsl 4.8.x wraps it in two
    Python frames (a kwargs wrapper and a walk converting pointer-like
    arguments); 4.3.5's object already calls the C slot. Our arguments are
    plain ints, so there is nothing to convert; when the DSL says a slot
    needs converting, the DSL's own call is kept."""
    try:
        import tvm_ffi  # optional: cutlass-dsl's TVM-FFI, with the DSL
        ea = getattr(compiled, "execution_args", None)
        if ea is not None and getattr(ea, "has_pointer_address_arg_specs", False):
            return compiled
        get = getattr(compiled, "__tvm_ffi_object__", None)
        fn = get() if get is not None else compiled
        if not isinstance(fn, tvm_ffi.Function) or fn.__chandle__() == 0:
            return compiled  # the DSL's call raises a clear error for a null handle
        if type(fn).__call__ is tvm_ffi.Function.__call__:
            return fn
        # a subclass with a Python __call__: call the C slot directly
        return tvm_ffi.Function.__call__.__get__(fn)
    except Exception:
        return compiled


def _ffi_available() -> bool:
    """True when TVM-FFI launching can be tried: ``tvm_ffi`` imports and
    ``L2SCHED_NO_TVM_FFI`` does not say yes (``env.env_flag``: ``0`` means
    no; a value that is neither yes nor no is ignored with a warning)."""
    try:
        if env_flag("L2SCHED_NO_TVM_FFI"):
            return False
    except L2sUsageError as e:
        log.warning("l2sched: %s; ignored (TVM-FFI stays on)", e)
    try:
        import tvm_ffi  # noqa: F401
    except Exception:
        return False
    return True


def get_kernel(device_index: int = 0, spec: KernelSpec | None = None, *,
               check_device: bool = True, ffi: bool | None = None,
               limits: DeviceLimits | None = None, **shape
               ) -> "PrefetchKernel | None":
    """The compiled fill kernel ``spec`` for device ``device_index``, compiled
    on first use and cached per ``(device_index, spec, ffi)``; ``None`` when
    prefetch is disabled or this variant failed to compile (reason logged
    once). ``shape`` (``mode``, ``grid``, ``threads``, ``chunk``, ``stages``,
    ``policy``) builds the spec when none is given. Before compiling, the
    spec is fitted to the device's limits (``fit_spec_logged``: a copy shape
    that needs more shared memory per block than the device allows gets
    fewer stages or a smaller chunk, one INFO line, or is refused, one
    WARNING): ``limits``, else the live device's
    (``runtime.limits.read_device_limits``; when they cannot be read, the
    48 KiB every device allows). The returned kernel's ``spec`` is the
    fitted one. ``check_device=False`` skips the CUDA/capability check and
    the live limits (compile-only use on a CPU host with ``CUTE_DSL_ARCH``
    set; ``limits`` still applies). ``ffi``: ``None`` = TVM-FFI when
    available, else generic; ``True``/``False`` force one path
    (benchmarks). Never raises."""
    try:
        spec = (spec or KernelSpec(**shape)).check()
    except (TypeError, ValueError) as e:
        log.warning("l2sched: fill kernel not built: %s", e)
        return None
    ckey = (device_index, spec, ffi)
    with _lock:
        if _disabled_reason is not None:
            return None
        if ckey in _cache:
            return _cache[ckey]
        if check_device:
            ok, why = device_supported(device_index)
            if not ok:
                disable(why)
                return None
            if limits is None:
                limits = _live_limits(device_index, spec)
        if limits is not None:
            fitted = fit_spec_logged(spec, limits)
            if fitted is None:
                _cache[ckey] = None
                return None
            spec = fitted
        try:
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
        except Exception as e:
            disable(f"nvidia-cutlass-dsl not importable ({type(e).__name__}: {e})")
            return None
        if ffi is None:
            paths = (True, False) if _ffi_available() else (False,)
        else:
            paths = (ffi,)
        kern = _compile_first(device_index, spec, paths)
        _cache[ckey] = kern
    if kern is not None and check_device:
        try:  # made here, outside any capture, not at a first launch inside one
            always_on(device_index)
        except Exception as e:
            log.warning("l2sched: fill kernel %s: no switch word on device %d "
                        "(%s: %s); it stays off", spec.shape_text(), device_index,
                        type(e).__name__, e)
            return None
    return kern


def _live_limits(device_index: int, spec: KernelSpec) -> DeviceLimits | None:
    """The live device's limits; when the driver cannot be asked, the
    limits every device meets (``PORTABLE_SMEM_BYTES``; one WARNING, only
    when ``spec`` needs shared memory), else ``None``."""
    try:
        return read_device_limits(device_index)
    except Exception as e:
        if not spec.smem_bytes:
            return None
        log.warning("l2sched: device %d's limits not readable (%s: %s); fitting fill "
                    "kernel %s to the %d B of shared memory every device allows",
                    device_index, type(e).__name__, e, spec.shape_text(),
                    PORTABLE_SMEM_BYTES)
        return DeviceLimits(PORTABLE_SMEM_BYTES, 1, 0, 0, (0, 0),
                            source="no driver: the portable limit")


def _compile_first(device_index: int, spec: KernelSpec, paths) -> "PrefetchKernel | None":
    """The first launch path of ``paths`` (TVM-FFI or not) that compiles;
    ``None`` after one log line when none does (only this variant fails)."""
    t0 = time.perf_counter()
    errors = []
    for use_ffi in paths:
        try:
            compiled = compile_fill(spec, PTX_POLICY[spec.policy], use_ffi)
        except Exception as e:  # compile failure of one path
            errors.append(f"{'tvm-ffi' if use_ffi else 'generic'}: "
                          f"{type(e).__name__}: {e}")
            continue
        kern = PrefetchKernel((device_index, spec), spec, compiled, use_ffi,
                              time.perf_counter() - t0,
                              None if use_ffi else _generic_args())
        if errors:
            log.info("l2sched: TVM-FFI compile failed, using the generic launch "
                     "path: %s", errors[0][:500])
        log.info("l2sched: compiled L2 fill kernel %s in %.3f s (%s launch)",
                 spec, kern.compile_s, "tvm-ffi" if kern.ffi else "generic")
        return kern
    log.warning("l2sched: fill kernel %s failed to compile; it stays off: %s",
                spec, " | ".join(errors)[:2000])
    return None


def _generic_args():
    """``(make_ptr, Int64, Int32, gmem, CUstream)`` for the generic launch
    path."""
    import cuda.bindings.driver as cuda_drv
    import cutlass
    import cutlass.cute as cute
    return (cute.runtime.make_ptr, cutlass.Int64, cutlass.Int32,
            cute.AddressSpace.gmem, cuda_drv.CUstream)


def fallback_to_generic(kern: PrefetchKernel) -> PrefetchKernel | None:
    """The same variant (``kern.spec``: mode, grid, threads, chunk, stages,
    policy) recompiled for the generic launch path, used when a TVM-FFI call
    raised before launching. Returns ``None`` after one log line when that
    fails too; other variants stay enabled."""
    device_index, spec = kern.key
    with _lock:
        new = _compile_first(device_index, spec, (False,))
        if new is not None:
            _cache[(device_index, spec, None)] = new
    if new is not None:
        log.info("l2sched: TVM-FFI launch failed; switched %s to the generic path",
                 spec)
    return new


def cutlass_version() -> str | None:
    """Installed ``nvidia-cutlass-dsl`` version string, or ``None``."""
    for dist in ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base"):
        try:
            return version(dist)
        except Exception:
            continue
    return None
