"""A fill kernel's launch shape (``KernelSpec``: mode, grid, threads,
chunk, stages, cache policy) and what a device's limits allow of it
(``fit_spec``): pure data and arithmetic, no CUDA. The runtime builds and
launches the kernel of a spec (``runtime.kernel.get_kernel``, which fits
the shape to the live device first); the lint (L2S111) and the fit ask the
same fitting of a device that is not present, from its profile's limits
(``DeviceProfile.limits``), so they need no runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from l2sched.device.limits import DeviceLimits
from l2sched.units import ALIGN, CACHE_POLICIES, FILL_MODES

#: Cache policy of a plan (``units.CACHE_POLICIES``) -> PTX ``createpolicy``
#: priority qualifier (None: a plain instruction, no cache hint; only the
#: lab registers such a policy, ``register_cache_policy``).
PTX_POLICY: dict[str, str | None] = {p: f"L2::{p}" for p in CACHE_POLICIES}


def register_cache_policy(name: str, ptx: str | None) -> None:
    """Make ``KernelSpec(policy=name)`` buildable with the PTX priority
    qualifier ``ptx`` (None: the plain instructions of
    ``runtime.fill_kernels.FORMS`` registered with ``hinted=False``)."""
    PTX_POLICY[name] = ptx


#: (fill mode, whether the policy is a cache hint) pairs a ``KernelSpec``
#: may name: every built-in mode with a cache hint. The runtime's
#: ``fill_kernels.register_form`` adds each form it registers (the lab's
#: plain and extra forms), so this set names exactly the buildable forms.
BUILDABLE_FORMS: set[tuple[str, bool]] = {(mode, True) for mode in FILL_MODES}

#: Bytes of dynamic shared memory the copy kernel keeps in front of its
#: buffers for the mbarriers (one ``BARRIER_SLOT_BYTES`` barrier per stage,
#: so at most 128 stages), so the buffers start 1024-byte aligned.
BARRIER_BYTES = 1024
#: Bytes of one mbarrier object (PTX ISA, "mbarrier": a 64-bit shared-memory
#: object, 8-byte aligned).
BARRIER_SLOT_BYTES = 8
#: Bytes per bulk-prefetch request when no profile says otherwise: the chunk
#: of vLLM 0.33.0's Kimi-K3 prefetch kernel (docs/sources.md#kimi-k3-prefetch)
#: and the best chunk of the earlier H200 probe
#: (docs/sources.md#h200-early-probes); lab/experiments/kernel_search.py.
DEFAULT_CHUNK = 16384
#: CTAs per launch when no profile says otherwise: 2 per SM of the H200's
#: 132 SMs; the earlier probe was best at 264-528 CTAs x 32 threads
#: (docs/sources.md#h200-early-probes).
DEFAULT_GRID = 264
#: Threads per CTA (one warp), as in the Kimi-K3 kernel.
DEFAULT_THREADS = 32
#: Threads a CTA may have (CUDA C Programming Guide, "Compute capabilities":
#: 1024 on every compute capability this project runs on).
MAX_THREADS = 1024
#: Smallest chunk (B) a copy kernel is fitted down to: what ``KernelSpec``
#: and ``fill_kernels`` accept (a positive multiple of ``units.ALIGN``).
MIN_COPY_CHUNK = ALIGN


def copy_smem_bytes(spec: "KernelSpec") -> int:
    """Dynamic shared memory (bytes) a copy-mode kernel of ``spec`` needs:
    the barriers plus ``stages`` buffers of ``chunk`` bytes."""
    return BARRIER_BYTES + spec.stages * spec.chunk


@dataclass(frozen=True)
class KernelSpec:
    """Everything that defines one compiled fill kernel.

    ``mode`` in ``FILL_MODES`` (or a mode the lab registered,
    ``runtime.fill_kernels.register_form``); ``grid`` CTAs; ``threads`` per
    CTA; ``chunk`` bytes per request (a positive multiple of 16); ``stages``
    shared-memory buffers of ``chunk`` bytes (``copy`` mode; 1 otherwise);
    ``policy`` a cache policy (``PTX_POLICY``). ``check()`` raises
    ``ValueError`` naming the bad field; ``check(limits)`` also checks the
    shared memory against a device's ``DeviceLimits`` (``fit_spec`` makes a
    copy shape fit instead). No device's limit is assumed here."""

    mode: str = "bulk"
    grid: int = DEFAULT_GRID
    threads: int = DEFAULT_THREADS
    chunk: int = DEFAULT_CHUNK
    stages: int = 1
    policy: str = "evict_last"

    def check(self, limits: DeviceLimits | None = None) -> "KernelSpec":
        """This spec, after checking every field and, given ``limits``,
        that its shared memory (``smem_bytes``) fits the device's opt-in
        limit per block. Raises ``ValueError``."""
        if not any(mode == self.mode for mode, _ in BUILDABLE_FORMS):
            raise ValueError(f"unknown fill mode {self.mode!r} (known: "
                             f"{', '.join(FILL_MODES)})")
        if self.policy not in PTX_POLICY:
            raise ValueError(f"unknown cache policy {self.policy!r} (known: "
                             f"{', '.join(sorted(PTX_POLICY))})")
        if (self.mode, PTX_POLICY[self.policy] is not None) not in BUILDABLE_FORMS:
            raise ValueError(f"fill mode {self.mode!r} has no form for cache policy "
                             f"{self.policy!r}")
        for name in ("grid", "threads", "stages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.threads > MAX_THREADS:
            raise ValueError(f"threads must be at most {MAX_THREADS} (a CTA's limit), "
                             f"got {self.threads}")
        if self.chunk <= 0 or self.chunk % ALIGN:
            raise ValueError(f"chunk {self.chunk} is not a positive multiple of {ALIGN}")
        if self.mode == "copy" and self.stages * BARRIER_SLOT_BYTES > BARRIER_BYTES:
            raise ValueError(f"copy mode: stages must be at most "
                             f"{BARRIER_BYTES // BARRIER_SLOT_BYTES} (one "
                             f"{BARRIER_SLOT_BYTES}-byte mbarrier each in "
                             f"{BARRIER_BYTES} B), got {self.stages}")
        if limits is not None and self.smem_bytes > limits.smem_per_block_optin_bytes:
            raise ValueError(f"copy mode: stages x chunk + barriers = {self.smem_bytes:,} B "
                             f"does not fit the {limits.smem_per_block_optin_bytes:,} B of "
                             f"shared memory per block of the device ({limits.source})")
        return self

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory (B) the kernel asks for at launch:
        ``stages * chunk + BARRIER_BYTES`` for ``copy``, 0 otherwise."""
        return copy_smem_bytes(self) if self.mode == "copy" else 0

    def shape_text(self) -> str:
        """``copy grid=66 threads=32 chunk=32768 stages=4 (132,096 B shared
        memory)``."""
        smem = f" ({self.smem_bytes:,} B shared memory)" if self.smem_bytes else ""
        return (f"{self.mode} grid={self.grid} threads={self.threads} "
                f"chunk={self.chunk} stages={self.stages}{smem}")


def fit_spec(spec: KernelSpec, limits: DeviceLimits) -> KernelSpec | None:
    """``spec`` made to fit ``limits``: unchanged when its shared memory
    (``KernelSpec.smem_bytes``) fits the device's opt-in limit per block;
    else a copy shape with fewer stages (same chunk), and when even one
    stage does not fit, one stage of a smaller chunk (halved, a multiple of
    ``units.ALIGN``, never below ``MIN_COPY_CHUNK``); ``None`` when nothing
    fits. No log line (``get_kernel`` logs; the fit and the lint ask
    this for a device that is not present)."""
    room = limits.smem_per_block_optin_bytes
    if spec.smem_bytes <= room:
        return spec
    for stages in range(spec.stages - 1, 0, -1):
        cand = replace(spec, stages=stages)
        if cand.smem_bytes <= room:
            return cand
    chunk = spec.chunk
    while chunk > MIN_COPY_CHUNK:
        chunk = max(MIN_COPY_CHUNK, chunk // 2 // ALIGN * ALIGN)
        cand = replace(spec, stages=1, chunk=chunk)
        if cand.smem_bytes <= room:
            return cand
    return None
