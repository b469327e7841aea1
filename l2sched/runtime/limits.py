"""The live GPU's limits (``device.limits.DeviceLimits``), read from the CUDA
driver (``cuda.bindings.driver.cuDeviceGetAttribute``, through the same
driver wrapper as the persisting-L2 set-aside, ``runtime.set_aside``) when
fill kernels are chosen and built (``runtime.kernel.get_kernel``) and when
``l2sched profile`` records them. Read once per device and process; nothing
is imported at module import (tests hand ``set_aside`` a fake driver).
"""

from __future__ import annotations

import threading

from l2sched.device.limits import DeviceLimits
from l2sched.runtime.set_aside import DeviceDriver

_lock = threading.Lock()
_cache: dict[int, DeviceLimits] = {}


def read_device_limits(device_index: int = 0) -> DeviceLimits:
    """The limits of CUDA device ``device_index`` as the driver reports them
    (cached per device). Raises when the driver cannot be asked (no
    ``cuda.bindings``, no device, a driver error)."""
    with _lock:
        got = _cache.get(device_index)
        if got is not None:
            return got
        d = DeviceDriver(device_index)
        got = DeviceLimits(
            smem_per_block_optin_bytes=d.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            sm_count=d.attribute("MULTIPROCESSOR_COUNT"),
            l2_bytes=d.attribute("L2_CACHE_SIZE"),
            persisting_l2_max_bytes=d.max,
            compute_capability=(d.attribute("COMPUTE_CAPABILITY_MAJOR"),
                                d.attribute("COMPUTE_CAPABILITY_MINOR")),
            source=f"CUDA driver, device {device_index}")
        _cache[device_index] = got
        return got


def reset_for_tests() -> None:
    """Forget the limits read so far (tests)."""
    with _lock:
        _cache.clear()
