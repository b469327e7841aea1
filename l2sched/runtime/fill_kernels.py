"""The CuTe DSL bodies of the fill kernels, one per fill mode
(``runtime.kernel.FILL_MODES``), traced and compiled by ``compile_fill``.

Every mode walks rows ``[row_begin, row_end)`` of a device table, int64
``[rows, 2]`` of ``(address, nbytes)``, cuts each row into ``chunk``-byte
chunks and hands them round-robin to its workers; a running phase carries the
round-robin across rows so short rows do not all land on worker 0. Addresses
are masked to 16 bytes and sizes to multiples of 16 (``units.ALIGN``; the
runtime already aligns rows, the mask is a second guard), so no byte outside
a row is touched. A row of 0 bytes issues nothing.

- ``bulk``: one ``cp.async.bulk.prefetch.L2.global.L2::cache_hint [addr],
  size, policy`` per chunk from each of ``grid * threads`` workers; the
  kernel exits when its requests are issued (launch-to-exit is not the fill
  time).
- ``line`` (benchmarks only): one ``prefetch.global.L2`` per 128-byte line.
- ``touch`` (benchmarks only): one 4-byte ordinary load (one 32-byte sector)
  per ``chunk`` bytes, no prefetch-size hint: with a chunk of 64 KiB it caches
  the rows' address translations and lands 0.05% of their bytes.
- ``load``: one 4-byte ``ld.global.L1::no_allocate.L2::cache_hint`` with the
  L2 prefetch-size hint per ``min(chunk, 256)`` bytes; ordinary loads, which
  land lines where later reads find them, but the CTAs stay resident until
  the lines arrive.
- ``copy``: Hopper's bulk copy engine (TMA). One thread per CTA issues
  ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
  .L2::cache_hint`` copies of ``chunk`` bytes into a ring of ``stages``
  shared-memory buffers (data discarded), each stage paced by an mbarrier:
  a stage is reused only after its previous copy completed, and the kernel
  waits for every copy before it exits (its shared memory must outlive
  them). Workers are CTAs (``grid``); the other threads of a CTA exit.

``policy`` is made once per thread by ``createpolicy.fractional.L2::<p>.b64``
(fraction 1.0). PTX forms: PTX ISA 8.x, sections "cp.async.bulk",
"cp.async.bulk.prefetch", "mbarrier", "createpolicy". The kernel's
parameters are a raw table pointer and two int32 row bounds, so one compiled
variant serves every table.
"""

# No "from __future__ import annotations": CuTe DSL resolves the kernel's
# annotations (cute.Pointer, Int32) at trace time from the function's scope.

from l2sched.units import ALIGN

#: Bytes of dynamic shared memory the copy kernel keeps in front of its
#: buffers for the mbarriers (one 8-byte barrier per stage), so the buffers
#: start 1024-byte aligned.
BARRIER_BYTES = 1024


def copy_smem_bytes(spec) -> int:
    """Dynamic shared memory (bytes) a copy-mode kernel of ``spec`` needs:
    the barriers plus ``stages`` buffers of ``chunk`` bytes."""
    return BARRIER_BYTES + spec.stages * spec.chunk


def compile_fill(spec, ptx_policy: str | None, ffi: bool):
    """Trace and compile the fill kernel of ``spec`` (a
    ``runtime.kernel.KernelSpec``) with the PTX cache-policy qualifier
    ``ptx_policy`` (``None`` = no cache hint); ``ffi`` compiles for TVM-FFI
    calls. Returns the compiled callable ``f(table_ptr, row_begin, row_end,
    stream)``. Raises on any failure (the caller turns it into one log
    line)."""
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    if spec.mode == "copy":
        fill = _copy_fill(spec, ptx_policy)
    else:
        fill = _issue_fill(spec, ptx_policy)
    import cuda.bindings.driver as cuda_drv
    ptr = cute.runtime.make_ptr(Int64, 0, cute.AddressSpace.gmem, assumed_align=ALIGN)
    if ffi:
        stream_arg = cute.runtime.make_fake_stream()
        return cute.compile(fill, ptr, Int32(0), Int32(0), stream_arg,
                            options="--enable-tvm-ffi")
    return cute.compile(fill, ptr, Int32(0), Int32(0), cuda_drv.CUstream(0))


def _policy(llvm, Int64, ptx_policy):
    """The cache-policy register (``createpolicy``), made at trace time."""
    return llvm.inline_asm(
        res=Int64.mlir_type, operands_=[],
        asm_string=f"createpolicy.fractional.{ptx_policy or 'L2::evict_normal'}"
                   ".b64 $0, 1.0;",
        constraints="=l", has_side_effects=True)


def _issue_fill(spec, ptx_policy):
    """The ``bulk``/``line``/``touch``/``load`` kernel: every thread a worker, one
    instruction per chunk."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64
    from cutlass._mlir.dialects import llvm

    grid, threads, chunk = spec.grid, spec.threads, spec.chunk
    workers = grid * threads
    # One asm string per variant; operands are always (address, size,
    # policy) and unused ones are simply not referenced.
    issue_res, issue_cons = None, "l,r,l,~{memory}"
    if spec.mode == "line":  # benchmarks only: one prefetch per 128-byte line (LSU)
        chunk = 128
        # (the PTX ISA allows only L2::evict_last / evict_normal here)
        issue_asm = ("prefetch.global.L2::evict_last [$0];"
                     if ptx_policy == "L2::evict_last" else "prefetch.global.L2 [$0];")
    elif spec.mode in ("load", "touch"):
        # load: one 4-byte load per min(chunk, 256) bytes, with the PTX L2
        # prefetch-size hint for the rest of that span (none for 32 B: a
        # load fetches its whole 32-byte sector); touch: one per chunk, no hint
        if spec.mode == "load":
            chunk = min(chunk, 256)
            if chunk not in (32, 64, 128, 256):
                raise ValueError(f"load mode needs chunk 32/64/128/256 (or more), got {chunk}")
        size_hint = "" if spec.mode == "touch" or chunk == 32 else f".L2::{chunk}B"
        issue_res = "i32"
        issue_cons = "=r,l,r,l,~{memory}"  # output first
        issue_asm = (f"ld.global.L1::no_allocate.L2::cache_hint{size_hint}.u32"
                     " $0, [$1], $3;")
    elif ptx_policy is None:  # benchmarks only: bulk prefetch without a cache hint
        issue_asm = "cp.async.bulk.prefetch.L2.global [$0], $1;"
    else:
        issue_asm = "cp.async.bulk.prefetch.L2.global.L2::cache_hint [$0], $1, $2;"

    def result_type():  # MLIR types need the trace's context: built at trace time
        return Int32.mlir_type if issue_res == "i32" else None

    def consume(res):  # the loaded word (load mode) or a constant 0
        return Int32(res) if issue_res == "i32" else Int32(0)

    @cute.kernel
    def fill_kernel(table: cute.Pointer, row_begin: Int32, row_end: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        worker = Int32(bid) * threads + Int32(tid)
        rows = cute.make_tensor(table, cute.make_layout((row_end, 2), stride=(2, 1)))
        pol = _policy(llvm, Int64, ptx_policy)
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

    return fill


def _copy_fill(spec, ptx_policy):
    """The ``copy`` kernel: thread 0 of each CTA streams its chunks through
    ``stages`` shared-memory buffers with TMA bulk copies."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int8, Int32, Int64
    from cutlass._mlir.dialects import llvm

    grid, threads, chunk, stages = spec.grid, spec.threads, spec.chunk, spec.stages
    smem_bytes = copy_smem_bytes(spec)
    if ptx_policy is None:
        copy_asm = ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                    " [$0], [$1], $2, [$3];")
    else:
        copy_asm = ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                    ".L2::cache_hint [$0], [$1], $2, [$3], $4;")

    @cute.kernel
    def copy_kernel(table: cute.Pointer, row_begin: Int32, row_end: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        if tid == 0:
            rows = cute.make_tensor(table, cute.make_layout((row_end, 2), stride=(2, 1)))
            bars = cute.arch.get_dyn_smem(Int64, alignment=BARRIER_BYTES)
            base = cute.arch.get_dyn_smem(Int8, alignment=BARRIER_BYTES)
            buffers = (base + BARRIER_BYTES).toint()  # 32-bit shared address
            for s in cutlass.range_constexpr(stages):  # unrolled at trace time
                cute.arch.mbarrier_init(bars + s, 1)
            cute.arch.mbarrier_init_fence()
            pol = _policy(llvm, Int64, ptx_policy)
            issued = Int32(0)
            phase = Int32(0)
            for r in cutlass.range(row_begin, row_end, 1):
                addr = Int64(rows[r, 0]) & Int64(-ALIGN)
                nbytes = Int64(rows[r, 1]) & Int64(-ALIGN)
                nchunks = Int32((nbytes + (chunk - 1)) // chunk)
                first = (Int32(bid) - phase % grid + grid) % grid
                for c in cutlass.range(first, nchunks, grid):
                    off = Int64(c) * chunk
                    size = Int32(cutlass.min(nbytes - off, Int64(chunk)))
                    s = issued % stages
                    bar = bars + s
                    if issued >= stages:  # the stage's previous copy must be done
                        cute.arch.mbarrier_wait(bar, (issued // stages - 1) % 2)
                    cute.arch.mbarrier_arrive_and_expect_tx(bar, size)
                    llvm.inline_asm(
                        res=None,
                        operands_=[(buffers + s * chunk).ir_value(),
                                   (addr + off).ir_value(), size.ir_value(),
                                   bar.toint().ir_value(), pol],
                        asm_string=copy_asm, constraints="r,l,r,r,l,~{memory}",
                        has_side_effects=True)
                    issued = issued + 1
                phase = (phase + nchunks) % grid
            # every copy lands before the CTA (and its shared memory) ends
            for s in cutlass.range_constexpr(stages):
                if issued > s:
                    cute.arch.mbarrier_wait(bars + s, ((issued - 1 - s) // stages) % 2)

    @cute.jit
    def fill(table: cute.Pointer, row_begin: Int32, row_end: Int32, stream):
        copy_kernel(table, row_begin, row_end).launch(
            grid=(grid, 1, 1), block=(threads, 1, 1), smem=smem_bytes, stream=stream)

    return fill
