"""The persisting-L2 set-aside: a device-wide driver limit
(``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``) that protects ``evict_last`` lines
from normal-priority traffic. Set once per device before any CUDA-graph
capture, on the primary context torch uses, and read back."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("l2sched.runtime")

_set_aside_lock = threading.Lock()
_set_aside_done: dict[int, int] = {}


def apply_set_aside(device_index: int, nbytes: int) -> int | None:
    """Set the persisting-L2 set-aside of device ``device_index`` to ``nbytes``
    bytes (``-1`` = the device maximum, 0 = leave the driver limit alone),
    once per device and process, through ``cuda.bindings``'
    ``cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)`` on the device's primary
    context (the context torch uses). The request is clamped to
    ``CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`` (39,321,600 B on the
    lent H200: the ``h200`` device profile's ``l2.set_aside_max_bytes``); the
    limit is read back and logged.

    Must run before any CUDA-graph capture (the caller's duty; it refuses while
    the current stream captures). Returns the limit read back in bytes, or
    ``None`` when nothing was done or it failed (logged once, never raises)."""
    if nbytes == 0:
        return None
    with _set_aside_lock:
        if device_index in _set_aside_done:
            return _set_aside_done[device_index]
        try:
            import torch
            if torch.cuda.is_current_stream_capturing():
                log.warning("l2sched: persisting-L2 set-aside not applied: "
                            "requested during a CUDA-graph capture")
                return None
            from cuda.bindings import driver as drv

            def ok(res):
                err = res[0]
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"driver error {err}")
                return res[1] if len(res) == 2 else res[1:]

            ok(drv.cuInit(0))
            dev = ok(drv.cuDeviceGet(device_index))
            dmax = ok(drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
                dev))
            want = dmax if nbytes < 0 else min(int(nbytes), int(dmax))
            ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
            err, = drv.cuCtxPushCurrent(ctx)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuCtxPushCurrent: {err}")
            try:
                limit = drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE
                err, = drv.cuCtxSetLimit(limit, want)
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"cuCtxSetLimit: {err}")
                got = int(ok(drv.cuCtxGetLimit(limit)))
            finally:
                drv.cuCtxPopCurrent()
                drv.cuDevicePrimaryCtxRelease(dev)
        except Exception as e:
            log.warning("l2sched: persisting-L2 set-aside not applied on device "
                        "%d: %s: %s", device_index, type(e).__name__, e)
            _set_aside_done[device_index] = None
            return None
        log.info("l2sched: persisting-L2 set-aside on device %d: requested %d B, "
                 "device max %d B, set %d B, read back %d B",
                 device_index, nbytes, dmax, want, got)
        _set_aside_done[device_index] = got
        return got
