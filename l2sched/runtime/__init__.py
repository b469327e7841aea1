"""The runtime stage: issuing a plan's fills at hook points, on a side
stream, gated per decode step, and installing the hooks into a module tree.

- ``gate``: whether a hook firing issues (``StepInfo``, ``gate``);
- ``base``: what every backend shares (``RuntimeBase``);
- ``dry_run``: a backend that records instead of touching a GPU;
- ``cuda``: the real backend (``CudaRuntime``), with ``streams`` (side
  stream, fork/join), ``table`` (the device fill table), ``kernel`` (the
  CuTe DSL fill kernel) and ``set_aside`` (the persisting-L2 limit);
- ``install``: hooks into a module tree, lazily bound, exactly removable.

``make_runtime`` picks a backend. Nothing here imports torch at module
import.
"""

from __future__ import annotations

from l2sched.compiler.plan import Plan
from l2sched.runtime.base import RuntimeBase
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.dry_run import DryRunRuntime
from l2sched.device import DeviceProfile

#: Runtime backends ``make_runtime`` knows.
BACKENDS = ("cuda", "dry-run", "auto")


def make_runtime(plan: Plan, backend: str = "auto", *, device_profile: DeviceProfile | None=None,
                 **kw) -> RuntimeBase:
    """A runtime for ``plan``: ``backend`` is ``cuda``, ``dry-run`` or ``auto``
    (``cuda`` when torch sees a CUDA device, else ``dry-run``).
    ``device_profile`` (a ``DeviceProfile``) gives the CUDA backend its fill
    kernels and their launch shapes (the dry-run backend its default fill
    mode, for the same launch groups). ``kw`` goes to the backend's
    constructor. Raises ``ValueError`` for an unknown backend."""
    if backend == "auto":
        try:
            import torch
            backend = "cuda" if torch.cuda.is_available() else "dry-run"
        except Exception:
            backend = "dry-run"
    if backend == "cuda":
        if device_profile is not None:
            kw.setdefault("fill", device_profile.fill_modes)
            kw.setdefault("fill_default", device_profile.fill_default)
        return CudaRuntime(plan, **kw)
    if backend == "dry-run":
        if device_profile is not None:  # the CUDA backend's launch groups
            kw.setdefault("fill_default", device_profile.fill_default)
        return DryRunRuntime(plan, **kw)
    raise ValueError(f"unknown backend {backend!r} ({', '.join(BACKENDS)})")
