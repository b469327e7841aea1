"""The L2 fill kernel: CuTe DSL, inline PTX bulk prefetch with a cache policy.

One launch walks rows ``[row_begin, row_end)`` of a device table, int64
``[rows, 2]`` of ``(address, bytes)``, cuts every row into ``chunk``-byte
chunks (16 KiB by default, as vLLM 0.33.0's Kimi-K3 CuTe DSL prefetch kernel
does) and hands the chunks round-robin to ``grid * threads`` workers; a running
phase carries the round-robin across rows so short rows do not all land on
worker 0. Each chunk is one

    cp.async.bulk.prefetch.L2.global.L2::cache_hint [addr], size, policy;

with ``policy`` made once per thread by ``createpolicy.fractional.L2::<p>.b64``
(fraction 1.0), ``<p>`` one of ``evict_last``/``evict_normal``/``evict_first``.
Addresses are masked to 16 bytes and sizes to multiples of 16 (the PTX ISA's
requirement for ``cp.async.bulk.prefetch``); the runtime already aligns rows
(``l2sched.install.clamp_range``), the mask is a second guard. A row whose
size is 0 issues nothing. The kernel exits as soon as its requests are issued:
its launch-to-exit time is not the fill time (prefetch-background.md).

Measured on the lent H200 (benchmarks/results/h200-kernel-2026-11-29.md): the
bulk prefetch (and the per-line ``prefetch.global.L2``) recovered only 15-30%
of the cold->hot gap of a dependent read or M=8 GEMM, however long one waited;
ordinary loads recovered all of it. ``mode="load"`` (one 4-byte load per 128 B
with the ``.L2::128B`` prefetch-size hint, 1056 CTAs x 128 threads:
``H200_LOAD_SHAPE``) made a 16.8 MB GEMM 12.1 -> 9.4-10.0 us (hot 9.3) but
keeps its CTAs resident until the lines land; which mode costs the concurrent
compute less in a real layer is not measured yet. ``bulk`` stays the default.

The table is passed as a raw device pointer plus two int32 row bounds, so one
compiled variant serves every table and every row count: variants are cached
per ``(device, grid, threads, chunk, policy)``.

Host launch: with ``nvidia-cutlass-dsl`` built with TVM-FFI support (4.8.x,
or 4.3.5 with ``apache-tvm-ffi`` importable) the function is compiled with
``--enable-tvm-ffi`` and called with plain ints (pointer, rows, stream handle)
through the bare ``tvm_ffi.Function`` (4.8.x puts Python wrappers in front of
it), which is much cheaper on the host (4.8-6.3 us per call measured on the
H200 with 4.3.5); otherwise the generic CuTe DSL call path is used (28-45 us
per call). ``PrefetchKernel.bind`` fixes the table and stream once. Inside a
CUDA graph replay the host cost is zero either way.

Nothing here imports torch or cutlass at module import. Any failure (no CUDA,
compute capability < 9.0, cutlass missing, compile failure) disables the
kernel with ONE log line on the ``l2sched.kernel`` logger; callers get
``None`` from ``get_kernel`` and never an exception.
"""

# No "from __future__ import annotations": CuTe DSL resolves the kernel's
# annotations (cute.Pointer, Int32) at trace time from the function's scope.
import logging
import threading
import time
from dataclasses import dataclass

from l2sched.env import env_flag
from l2sched.errors import L2sUsageError
from l2sched.units import ALIGN, CACHE_POLICIES

log = logging.getLogger("l2sched.kernel")

#: Cache policy of a plan (``units.CACHE_POLICIES``) -> PTX ``createpolicy``
#: priority qualifier; ``none`` (benchmarks only) is the plain instruction,
#: no createpolicy / cache_hint.
PTX_POLICY = {
    **{p: f"L2::{p}" for p in CACHE_POLICIES},
    "none": None,
}

#: Bytes per bulk-prefetch request. 16 KiB is the chunk of vLLM 0.33.0's
#: Kimi-K3 prefetch kernel (vllm-glm5next-map.md section 6) and the best chunk
#: of the earlier H200 probe (prefetch-background.md); see
#: benchmarks/kernel_search.py for the search on this kernel.
DEFAULT_CHUNK = 16384
#: CTAs per launch: 2 per SM of the H200's 132 SMs; the earlier probe was best
#: at 264-528 CTAs x 32 threads (prefetch-background.md).
DEFAULT_GRID = 264
#: Threads per CTA (one warp), as in the Kimi-K3 kernel.
DEFAULT_THREADS = 32
#: Load-mode kernel shape that filled L2 best on the H200 (kernel_probe_l2.py,
#: 2026-11-29): pass as ``get_kernel(..., **H200_LOAD_SHAPE)`` or
#: ``CudaRuntime(plan, **H200_LOAD_SHAPE)``.
H200_LOAD_SHAPE = {"mode": "load", "grid": 1056, "threads": 128, "chunk": 128}

_lock = threading.Lock()
_cache: dict[tuple, "PrefetchKernel | None"] = {}
_disabled_reason: str | None = None
_logged = False


def disable(reason: str) -> None:
    """Disable every kernel of this process, logging ``reason`` once."""
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
    requires sm_90 for ``cp.async.bulk.prefetch``). Never raises."""
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
    """One compiled variant. ``launch(table_ptr, row_begin, row_end, stream)``
    enqueues the fill of rows ``[row_begin, row_end)`` of the int64 ``[rows, 2]``
    (address, bytes) table at device address ``table_ptr`` on the CUDA stream
    whose raw handle is ``stream`` (``torch.cuda.Stream.cuda_stream``).
    ``compile_s`` is the compile time in seconds; ``ffi`` says whether calls go
    through TVM-FFI."""

    key: tuple
    compiled: object
    ffi: bool
    compile_s: float
    _generic_args: object = None  # (make_ptr, Int64, gmem, CUstream) for the fallback path

    def __post_init__(self):
        self._ffi_call = _direct_ffi_call(self.compiled) if self.ffi else None

    def launch(self, table_ptr: int, row_begin: int, row_end: int, stream: int) -> None:
        """Enqueue the fill (asynchronous; capturable in a CUDA graph)."""
        if self.ffi:
            self._ffi_call(table_ptr, row_begin, row_end, stream)
            return
        make_ptr, i64, gmem, custream = self._generic_args
        self.compiled(make_ptr(i64, table_ptr, gmem, assumed_align=ALIGN),
                      row_begin, row_end, custream(stream))

    def bind(self, table_ptr: int, stream: int):
        """``launch`` with the table (device address) and the stream (raw
        handle) fixed: returns ``f(row_begin, row_end)``. The generic path's
        pointer and ``CUstream`` objects are built here once instead of per
        call (about 1 us each on the host)."""
        if self.ffi:
            call = self._ffi_call

            def launch_ffi(row_begin: int, row_end: int) -> None:
                call(table_ptr, row_begin, row_end, stream)
            return launch_ffi
        make_ptr, i64, gmem, custream = self._generic_args
        compiled = self.compiled
        ptr = make_ptr(i64, table_ptr, gmem, assumed_align=ALIGN)
        cu = custream(stream)

        def launch_generic(row_begin: int, row_end: int) -> None:
            compiled(ptr, row_begin, row_end, cu)
        return launch_generic


def _direct_ffi_call(compiled):
    """The cheapest callable for a TVM-FFI compiled function: the bare
    ``tvm_ffi.Function`` behind it. nvidia-cutlass-dsl 4.8.x wraps it in two
    Python frames (a kwargs wrapper and a walk converting pointer-like
    arguments); 4.3.5's object already calls the C slot. Our arguments are
    plain ints, so there is nothing to convert; when the DSL says a slot
    needs converting, the DSL's own call is kept."""
    try:
        import tvm_ffi
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


def _build(grid: int, threads: int, chunk: int, policy: str, ffi: bool,
           mode: str = "bulk"):
    """Trace and compile the kernel; returns the compiled callable. Raises on
    any failure (the caller turns that into a log line)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64
    from cutlass._mlir.dialects import llvm

    qual = PTX_POLICY[policy]
    workers = grid * threads
    # One asm string per variant, chosen here; operands are always
    # (address, size, policy) and unused ones are simply not referenced.
    pol_qual = qual or "L2::evict_normal"
    issue_res, issue_cons = None, "l,r,l,~{memory}"
    if mode == "line":  # benchmarks only: one prefetch per 128-byte line (LSU)
        chunk = 128
        # (the PTX ISA allows only L2::evict_last / evict_normal here)
        issue_asm = ("prefetch.global.L2::evict_last [$0];" if qual == "L2::evict_last"
                     else "prefetch.global.L2 [$0];")
    if mode == "load":
        # one 4-byte load per min(chunk, 256) bytes, with the PTX L2
        # prefetch-size hint for the rest of that span (none for 32 B: a
        # load fetches its whole 32-byte sector)
        chunk = min(chunk, 256)
        if chunk not in (32, 64, 128, 256):
            raise ValueError(f"load mode needs chunk 32/64/128/256 (or more), got {chunk}")
        size_hint = "" if chunk == 32 else f".L2::{chunk}B"
        issue_res = "i32"
        issue_cons = "=r,l,r,l,~{memory}"  # output first
        issue_asm = (f"ld.global.L1::no_allocate.L2::cache_hint{size_hint}.u32"
                     " $0, [$1], $3;")
    elif qual is None:  # benchmarks only: bulk prefetch without a cache hint
        issue_asm = "cp.async.bulk.prefetch.L2.global [$0], $1;"
    else:
        issue_asm = ("cp.async.bulk.prefetch.L2.global.L2::cache_hint"
                     " [$0], $1, $2;")
    def result_type():  # MLIR types need the trace's context: built at trace time
        return Int32.mlir_type if issue_res == "i32" else None

    def consume(res):  # the loaded word (load mode) or a constant 0
        return Int32(res) if issue_res == "i32" else Int32(0)

    if chunk % ALIGN or chunk <= 0:
        raise ValueError(f"chunk {chunk} is not a positive multiple of {ALIGN}")

    @cute.kernel
    def fill_kernel(table: cute.Pointer, row_begin: Int32, row_end: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        worker = Int32(bid) * threads + Int32(tid)
        rows = cute.make_tensor(table, cute.make_layout((row_end, 2), stride=(2, 1)))
        # Output constraint first ("=l"), then inputs.
        pol = llvm.inline_asm(
            res=Int64.mlir_type, operands_=[],
            asm_string=f"createpolicy.fractional.{pol_qual}.b64 $0, 1.0;",
            constraints="=l", has_side_effects=True)
        phase = Int32(0)
        acc = Int32(0)
        for r in cutlass.range(row_begin, row_end, 1):
            addr = Int64(rows[r, 0]) & Int64(-ALIGN)
            nbytes = Int64(rows[r, 1]) & Int64(-ALIGN)
            nchunks = Int32((nbytes + (chunk - 1)) // chunk)
            # First chunk index c >= 0 with (c + phase) % workers == worker.
            first = (worker - phase % workers + workers) % workers
            for c in cutlass.range(first, nchunks, workers):
                off = Int64(c) * chunk
                size = Int32(cutlass.min(nbytes - off, Int64(chunk)))
                res = llvm.inline_asm(
                    res=result_type(),
                    operands_=[(addr + off).ir_value(), size.ir_value(), pol],
                    asm_string=issue_asm, constraints=issue_cons,
                    has_side_effects=True)
                acc = acc ^ consume(res)
            phase = (phase + nchunks) % workers
        # Never true (row_end >= 0): keeps load-mode results alive, since
        # ptxas removes loads whose destination is dead.
        if row_end < 0:
            rows[0, 0] = Int64(acc)

    @cute.jit
    def fill(table: cute.Pointer, row_begin: Int32, row_end: Int32, stream):
        fill_kernel(table, row_begin, row_end).launch(
            grid=(grid, 1, 1), block=(threads, 1, 1), stream=stream)

    import cuda.bindings.driver as cuda_drv
    ptr = cute.runtime.make_ptr(Int64, 0, cute.AddressSpace.gmem, assumed_align=ALIGN)
    if ffi:
        stream_arg = cute.runtime.make_fake_stream()
        compiled = cute.compile(fill, ptr, Int32(0), Int32(0), stream_arg,
                                options="--enable-tvm-ffi")
    else:
        compiled = cute.compile(fill, ptr, Int32(0), Int32(0), cuda_drv.CUstream(0))
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


def get_kernel(device_index: int = 0, *, grid: int = DEFAULT_GRID,
               threads: int = DEFAULT_THREADS, chunk: int = DEFAULT_CHUNK,
               policy: str = "evict_last", check_device: bool = True,
               ffi: bool | None = None, mode: str = "bulk"
               ) -> "PrefetchKernel | None":
    """The compiled fill kernel for ``(device_index, grid, threads, chunk,
    policy)``, compiled on first use and cached; ``None`` when prefetch is
    disabled (reason logged once, see ``disabled_reason``). ``grid`` is CTAs,
    ``threads`` threads per CTA, ``chunk`` bytes per request (multiple of 16).
    ``mode``: ``bulk`` (the default: ``cp.async.bulk.prefetch.L2``), ``line``
    (per-128-B ``prefetch.global.L2``) or ``load`` (one 4-byte
    ``ld.global.L1::no_allocate.L2::cache_hint`` per ``min(chunk, 256)`` bytes
    with the L2 prefetch-size hint for that span, results folded into a
    never-stored register: ordinary loads, which land lines where later reads
    find them;
    see benchmarks/results/h200-kernel-2026-11-29.md). ``check_device=False`` skips the CUDA/capability check (compile-only use on
    a CPU host with ``CUTE_DSL_ARCH`` set). ``ffi``: ``None`` = TVM-FFI when
    available, else generic; ``True``/``False`` force one path (benchmarks).
    Never raises."""
    if policy not in PTX_POLICY:
        disable(f"unknown cache policy {policy!r} (known: {sorted(PTX_POLICY)})")
        return None
    key = (device_index, grid, threads, chunk, policy)
    ckey = key + (ffi, mode)
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
        try:
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
        except Exception as e:
            disable(f"nvidia-cutlass-dsl not importable ({type(e).__name__}: {e})")
            return None
        t0 = time.perf_counter()
        kern = None
        errors = []
        if ffi is None:
            paths = (True, False) if _ffi_available() else (False,)
        else:
            paths = (ffi,)
        for use_ffi in paths:
            try:
                compiled = _build(grid, threads, chunk, policy, use_ffi, mode)
            except Exception as e:  # compile failure of one path
                errors.append(f"{'tvm-ffi' if use_ffi else 'generic'}: "
                              f"{type(e).__name__}: {e}")
                continue
            generic = None
            if not use_ffi:
                import cuda.bindings.driver as cuda_drv
                import cutlass
                import cutlass.cute as cute
                generic = (cute.runtime.make_ptr, cutlass.Int64,
                           cute.AddressSpace.gmem, cuda_drv.CUstream)
            kern = PrefetchKernel(key, compiled, use_ffi, time.perf_counter() - t0,
                                  generic)
            break
        if kern is None:
            if ffi is not None:  # a forced path failed: do not disable the rest
                log.warning("l2sched: forced %s compile failed: %s",
                            "tvm-ffi" if ffi else "generic", " | ".join(errors)[:2000])
                return None
            disable("kernel compile failed: " + " | ".join(errors)[:2000])
            return None
        if errors:
            log.info("l2sched: TVM-FFI compile failed, using the generic launch "
                     "path: %s", errors[0][:500])
        log.info("l2sched: compiled L2 fill kernel %s in %.3f s (%s launch)",
                 key, kern.compile_s, "tvm-ffi" if kern.ffi else "generic")
        _cache[ckey] = kern
        return kern


def fallback_to_generic(kern: PrefetchKernel) -> PrefetchKernel | None:
    """Recompile ``kern`` for the generic launch path (used when a TVM-FFI call
    raised before launching). Returns ``None`` (and disables, logging once)
    when that fails too."""
    try:
        device_index, grid, threads, chunk, policy = kern.key
        compiled = _build(grid, threads, chunk, policy, False)
        import cuda.bindings.driver as cuda_drv
        import cutlass
        import cutlass.cute as cute
        new = PrefetchKernel(kern.key, compiled, False, kern.compile_s,
                             (cute.runtime.make_ptr, cutlass.Int64,
                              cute.AddressSpace.gmem, cuda_drv.CUstream))
    except Exception as e:
        disable(f"generic launch path failed to compile: {type(e).__name__}: {e}")
        return None
    with _lock:
        _cache[kern.key + (None, "bulk")] = new
    log.info("l2sched: TVM-FFI launch failed; switched to the generic path")
    return new


def cutlass_version() -> str | None:
    """Installed ``nvidia-cutlass-dsl`` version string, or ``None``."""
    try:
        from importlib.metadata import version
        return version("nvidia-cutlass-dsl")
    except Exception:
        try:
            from importlib.metadata import version
            return version("nvidia-cutlass-dsl-libs-base")
        except Exception:
            return None
