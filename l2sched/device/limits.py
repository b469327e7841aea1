"""The hardware limits a fill kernel is chosen and built against
(``DeviceLimits``), as the CUDA driver reports them for one GPU, and the
same numbers for a GPU that is not present, read from its device profile
(``DeviceProfile.limits``). Unit: bytes.

The runtime reads the live device's (``runtime.limits.read_device_limits``,
``cuDeviceGetAttribute``); ``l2sched profile`` records them in the profile it
writes (``[gpu] smem_per_block_optin_bytes`` and ``sm_count``, ``[l2] bytes``
and ``set_aside_max_bytes``, ``compute_capability``: ``docs/devices.md``).
Nothing in the code assumes one GPU's values; the known values of the two
GPUs this project targets, with their sources, are in the shipped profiles
(``l2sched/data/devices/``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceLimits:
    """One GPU's limits: ``smem_per_block_optin_bytes`` (the largest shared
    memory one thread block may use after opting in,
    ``CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``, B),
    ``sm_count`` (``CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT``), ``l2_bytes``
    (``CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE``, B), ``persisting_l2_max_bytes``
    (``CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE``, B) and
    ``compute_capability`` ``(major, minor)``
    (``CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR``/``_MINOR``). ``source``
    says where the numbers come from (the driver, or a profile's path)."""

    smem_per_block_optin_bytes: int
    sm_count: int
    l2_bytes: int
    persisting_l2_max_bytes: int
    compute_capability: tuple[int, int]
    source: str = ""

    def describe(self) -> str:
        """``sm_90, 132 SMs, 232,448 B shared memory per block (opt-in), ...``."""
        major, minor = self.compute_capability
        return (f"sm_{major}{minor}, {self.sm_count} SMs, "
                f"{self.smem_per_block_optin_bytes:,} B shared memory per block "
                f"(opt-in), {self.l2_bytes:,} B L2, {self.persisting_l2_max_bytes:,} B "
                f"persisting-L2 maximum")
