"""Which device profile describes a GPU: the driver's identity of the GPU
(``GpuIdentity``: name, L2 bytes, SM count, compute capability) compared
with a profile's ``[gpu]`` table, ``l2.bytes`` and ``compute_capability``
(``docs/devices.md``). The compute capability alone does not identify a GPU:
the L2 differs within one capability (H100 and H200; RTX 5090 and RTX PRO
6000)."""

from __future__ import annotations

from dataclasses import dataclass

from l2sched.device.parse import device_names, load_device
from l2sched.device.schema import DeviceProfile


@dataclass(frozen=True)
class GpuIdentity:
    """What the driver reports about one GPU (``torch.cuda.
    get_device_properties``): ``name``, ``l2_bytes`` (B), ``sm_count``
    (streaming multiprocessors) and ``compute_capability`` ``(major,
    minor)``."""

    name: str
    l2_bytes: int
    sm_count: int
    compute_capability: tuple[int, int]

    def describe(self) -> str:
        """``NVIDIA H200 (sm_90, 132 SMs, 62,914,560 B L2)``."""
        major, minor = self.compute_capability
        return (f"{self.name} (sm_{major}{minor}, {self.sm_count} SMs, "
                f"{self.l2_bytes:,} B L2)")


def _norm_name(name: str) -> str:
    return " ".join(name.split()).casefold()


def identity_mismatches(device_profile: DeviceProfile, gpu: GpuIdentity) -> list[str]:
    """How ``gpu`` differs from the GPU ``device_profile`` describes, one phrase
    per differing field (name, L2 bytes, SM count, compute capability; a
    field the profile does not give is not compared); empty when it
    matches. Names compare case-insensitively with blanks collapsed."""
    out = []
    if device_profile.gpu_names and _norm_name(gpu.name) not in {
            _norm_name(n) for n in device_profile.gpu_names}:
        out.append(f"name {gpu.name!r}, profile "
                   + " or ".join(repr(n) for n in device_profile.gpu_names))
    if gpu.l2_bytes != device_profile.l2_bytes:
        out.append(f"L2 {gpu.l2_bytes:,} B, profile {device_profile.l2_bytes:,} B")
    if device_profile.sm_count is not None and gpu.sm_count != device_profile.sm_count:
        out.append(f"{gpu.sm_count} SMs, profile {device_profile.sm_count}")
    cc = device_profile.compute_capability
    if cc is not None and tuple(gpu.compute_capability) != tuple(cc):
        out.append(f"sm_{gpu.compute_capability[0]}{gpu.compute_capability[1]}, "
                   f"profile sm_{cc[0]}{cc[1]}")
    return out


def matching_profiles(gpu: GpuIdentity) -> list[str]:
    """Names of the shipped profiles that describe ``gpu`` (no
    ``identity_mismatches``), sorted."""
    return [n for n in device_names() if not identity_mismatches(load_device(n), gpu)]


def profile_for_gpu(gpu: GpuIdentity) -> str | None:
    """The name of the first shipped profile (sorted by name) that
    describes ``gpu`` (``matching_profiles``) and was measured by ``l2sched
    profile`` (``DeviceProfile.is_measured``; an estimate from published
    numbers does not count); ``None`` when there is none."""
    return next((n for n in matching_profiles(gpu) if load_device(n).is_measured), None)
