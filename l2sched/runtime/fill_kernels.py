"""The CuTe DSL bodies of the fill kernels, one per fill mode
(``units.FILL_MODES``), traced and compiled by ``compile_fill``.

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
(fraction 1.0). The instruction each mode issues is a *form* in ``FORMS``,
keyed by (mode, whether the policy is a cache hint); the lab registers the
forms only its experiments use (``lab/kernels.py``: ``line``, ``touch``,
plain instructions without a cache hint) with ``register_form``. PTX forms: PTX ISA 8.x, sections "cp.async.bulk",
"cp.async.bulk.prefetch", "mbarrier", "createpolicy". The kernel's
parameters are a raw table pointer, the address of an int32 switch word and
two int32 row bounds, so one compiled variant serves every table.

The switch word (the run-time switch, ``runtime.switch``): every worker
reads it before it moves a byte; when its low bit is 0 the kernel walks no
row and exits at once. A captured CUDA graph keeps the word's address, so
writing the word turns the graph's fills on or off without a recapture.
"""

# No "from __future__ import annotations": CuTe DSL resolves the kernel's
# annotations (cute.Pointer, Int32) at trace time from the function's scope.

from dataclasses import dataclass
from typing import Callable

from l2sched.device.kernel_spec import BARRIER_BYTES, BUILDABLE_FORMS, copy_smem_bytes
from l2sched.units import ALIGN

#: Alignment (bytes) of the int32 switch word the kernels read.
SWITCH_ALIGN = 4


@dataclass(frozen=True)
class IssueForm:
    """The inline PTX one worker issues per chunk: ``asm`` with operands
    ``(address, size, policy)`` (copy: ``(shared buffer, address, size,
    mbarrier, policy)``), its LLVM ``constraints``, ``loads`` when it
    returns a loaded 32-bit word (output first in ``constraints``; kept alive
    so ptxas does not drop the load), and ``chunk``, the bytes per
    instruction when the form fixes it (None: the spec's)."""

    asm: str
    constraints: str = "l,r,l,~{memory}"
    loads: bool = False
    chunk: int | None = None


#: (mode, the policy is a cache hint) -> ``make(chunk, ptx_policy) ->
#: IssueForm``. A spec whose (mode, hint) has no form is refused by
#: ``KernelSpec.check`` (``register_form`` keeps
#: ``device.kernel_spec.BUILDABLE_FORMS``, which it reads, in step).
FORMS: dict[tuple[str, bool], Callable[[int, "str | None"], IssueForm]] = {}


def register_form(mode: str, hinted: bool,
                  make: Callable[[int, "str | None"], IssueForm]) -> None:
    """Make fill mode ``mode`` buildable with a cache-hint policy
    (``hinted``) or a plain one (``PTX_POLICY`` value None) through
    ``make(chunk, ptx_policy) -> IssueForm``. Replaces an earlier form of
    the same key."""
    FORMS[(mode, hinted)] = make
    BUILDABLE_FORMS.add((mode, hinted))


def _bulk_form(chunk: int, ptx_policy) -> IssueForm:
    return IssueForm("cp.async.bulk.prefetch.L2.global.L2::cache_hint [$0], $1, $2;")


def load_form(chunk: int, ptx_policy, size_hint: bool = True) -> IssueForm:
    """One 4-byte load per ``min(chunk, 256)`` bytes, with the PTX L2
    prefetch-size hint for the rest of that span (none for 32 B: a load
    fetches its whole 32-byte sector, nor without ``size_hint``). Raises
    ``ValueError`` for a span other than 32/64/128/256 B."""
    if size_hint:
        chunk = min(chunk, 256)
        if chunk not in (32, 64, 128, 256):
            raise ValueError(f"load mode needs chunk 32/64/128/256 (or more), got {chunk}")
    hint = "" if not size_hint or chunk == 32 else f".L2::{chunk}B"
    return IssueForm(f"ld.global.L1::no_allocate.L2::cache_hint{hint}.u32 $0, [$1], $3;",
                     "=r,l,r,l,~{memory}", loads=True, chunk=chunk)


def _copy_form(chunk: int, ptx_policy) -> IssueForm:
    return IssueForm("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [$0], [$1], $2, [$3], $4;", "r,l,r,r,l,~{memory}")


register_form("bulk", True, _bulk_form)
register_form("load", True, load_form)
register_form("copy", True, _copy_form)


def compile_fill(spec, ptx_policy: str | None, ffi: bool):
    """Trace and compile the fill kernel of ``spec`` (a
    ``runtime.kernel.KernelSpec``) with the PTX cache-policy qualifier
    ``ptx_policy`` (``None`` = no cache hint); ``ffi`` compiles for TVM-FFI
    calls. Returns the compiled callable ``f(table_ptr, switch_ptr,
    row_begin, row_end, stream)`` (``switch_ptr``: an int32 word, low bit 1 =
    fill, 0 = exit at once). Raises on any failure (the caller turns it into
    one log line)."""
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    if spec.mode == "copy":
        fill = _copy_fill(spec, ptx_policy)
    else:
        fill = _issue_fill(spec, ptx_policy)
    import cuda.bindings.driver as cuda_drv
    ptr = cute.runtime.make_ptr(Int64, 0, cute.AddressSpace.gmem, assumed_align=ALIGN)
    switch = cute.runtime.make_ptr(Int32, 0, cute.AddressSpace.gmem,
                                   assumed_align=SWITCH_ALIGN)
    if ffi:
        stream_arg = cute.runtime.make_fake_stream()
        return cute.compile(fill, ptr, switch, Int32(0), Int32(0), stream_arg,
                            options="--enable-tvm-ffi")
    return cute.compile(fill, ptr, switch, Int32(0), Int32(0), cuda_drv.CUstream(0))


def _rows_to_walk(switch, row_begin, row_end):
    """The end of the rows a worker walks: ``row_end`` when the switch
    word's low bit is set, else ``row_begin`` (nothing). Traced inside a
    kernel."""
    import cutlass.cute as cute
    from cutlass import Int32

    on = Int32(cute.make_tensor(switch, cute.make_layout(1))[0]) & Int32(1)
    return row_begin + (row_end - row_begin) * on


def _policy(llvm, Int64, ptx_policy):
    """The cache-policy register (``createpolicy``), made at trace time."""
    return llvm.inline_asm(
        res=Int64.mlir_type, operands_=[],
        asm_string=f"createpolicy.fractional.{ptx_policy or 'L2::evict_normal'}"
                   ".b64 $0, 1.0;",
        constraints="=l", has_side_effects=True)


def _issue_fill(spec, ptx_policy):
    """The kernel of an issue mode (``bulk``, ``load`` and the lab's): every
    thread a worker, one instruction (its ``FORMS`` entry) per chunk."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64
    from cutlass._mlir.dialects import llvm

    grid, threads = spec.grid, spec.threads
    workers = grid * threads
    form = FORMS[(spec.mode, ptx_policy is not None)](spec.chunk, ptx_policy)
    chunk = form.chunk or spec.chunk
    issue_asm, issue_cons = form.asm, form.constraints
    issue_res = "i32" if form.loads else None

    def result_type():  # MLIR types need the trace's context: built at trace time
        return Int32.mlir_type if issue_res == "i32" else None

    def consume(res):  # the loaded word (load mode) or a constant 0
        return Int32(res) if issue_res == "i32" else Int32(0)

    @cute.kernel
    def fill_kernel(table: cute.Pointer, switch: cute.Pointer, row_begin: Int32,
                    row_end: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        worker = Int32(bid) * threads + Int32(tid)
        rows = cute.make_tensor(table, cute.make_layout((row_end, 2), stride=(2, 1)))
        stop = _rows_to_walk(switch, row_begin, row_end)
        pol = _policy(llvm, Int64, ptx_policy)
        phase = Int32(0)
        acc = Int32(0)
        for r in cutlass.range(row_begin, stop, 1):
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
    def fill(table: cute.Pointer, switch: cute.Pointer, row_begin: Int32,
             row_end: Int32, stream):
        fill_kernel(table, switch, row_begin, row_end).launch(
            grid=(grid, 1, 1), block=(threads, 1, 1), stream=stream)

    return fill


def _copy_fill(spec, ptx_policy):
    """The ``copy`` kernel: thread 0 of each CTA streams its chunks through
    ``stages`` shared-memory buffers with TMA bulk copies.

    The launch asks for ``copy_smem_bytes(spec)`` of dynamic shared memory;
    above 48 KiB a kernel needs the ``cudaFuncAttributeMaxDynamicSharedMemorySize``
    opt-in. CuTe DSL sets it on every kernel it emits, on every arch: its
    kernel op carries ``cu_attrs`` with ``max_dynamic_shared_size_bytes =
    #cuda.dev_max_shared_memory_optin`` (the loading device's opt-in maximum;
    nvidia-cutlass-dsl 4.8.0, ``cutlass_dsl/cutlass.py``,
    ``_generate_cuda_kernel_op``). ``runtime.kernel.get_kernel`` fits the
    shape to that maximum before compiling (``fit_spec``)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int8, Int32, Int64
    from cutlass._mlir.dialects import llvm

    grid, threads, chunk, stages = spec.grid, spec.threads, spec.chunk, spec.stages
    smem_bytes = copy_smem_bytes(spec)
    copy_asm = FORMS[("copy", ptx_policy is not None)](chunk, ptx_policy).asm

    @cute.kernel
    def copy_kernel(table: cute.Pointer, switch: cute.Pointer, row_begin: Int32,
                    row_end: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        if tid == 0:
            rows = cute.make_tensor(table, cute.make_layout((row_end, 2), stride=(2, 1)))
            stop = _rows_to_walk(switch, row_begin, row_end)
            bars = cute.arch.get_dyn_smem(Int64, alignment=BARRIER_BYTES)
            base = cute.arch.get_dyn_smem(Int8, alignment=BARRIER_BYTES)
            buffers = (base + BARRIER_BYTES).toint()  # 32-bit shared address
            for s in cutlass.range_constexpr(stages):  # unrolled at trace time
                cute.arch.mbarrier_init(bars + s, 1)
            cute.arch.mbarrier_init_fence()
            pol = _policy(llvm, Int64, ptx_policy)
            issued = Int32(0)
            phase = Int32(0)
            for r in cutlass.range(row_begin, stop, 1):
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
    def fill(table: cute.Pointer, switch: cute.Pointer, row_begin: Int32,
             row_end: Int32, stream):
        copy_kernel(table, switch, row_begin, row_end).launch(
            grid=(grid, 1, 1), block=(threads, 1, 1), smem=smem_bytes, stream=stream)

    return fill
