"""The persisting-L2 set-aside: a device-wide driver limit
(``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``) that protects ``evict_last`` lines
from normal-priority traffic, set on the primary context torch uses.

The limit is hardware state shared by everything on the device, so it is
modelled as such, in one process-wide ledger per device:

* every plan (an *owner*) has at most one request; a new request of the
  same owner replaces its old one, a request of 0 withdraws it;
* what is in force is the largest active request (``-1`` = the device
  maximum, the largest), clamped to
  ``CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`` (39,321,600 B on the
  lent H200, the ``h200`` profile's ``l2.set_aside_max_bytes``), whatever
  order the plans came in;
* the limit that was in force before the first request on a device is read
  and kept; when the last request is withdrawn (``release_set_aside``) it is
  set again;
* every request and withdrawal is one log line: applied (with what is in
  force, and whose request that is) or refused (during a CUDA-graph
  capture, no driver, a driver error), and a refused request changes
  nothing.

``planned_set_aside`` tells the lint what will be in force once a plan's
request is made. Nothing here imports torch or the driver at module import;
the driver is ``cuda.bindings.driver``, imported at each call (tests put a
fake in ``sys.modules``).
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass, field

log = logging.getLogger("l2sched.runtime")

#: The owner of requests made without one (a process with one plan).
DEFAULT_OWNER = "default"


@dataclass
class _Device:
    """Ledger of one device: the limit before the first request (B), the
    active requests (owner -> bytes, -1 = maximum), the limit in force as
    read back after the last change (B)."""

    previous: int
    requests: dict = field(default_factory=dict)
    in_force: int = 0


_lock = threading.Lock()
_ledger: dict[int, _Device] = {}


def reset_ledger() -> None:
    """Forget every request without touching the driver (tests)."""
    with _lock:
        _ledger.clear()


def _largest(requests) -> int:
    """The request in force among ``requests`` (bytes; -1 wins; 0 when
    there is none)."""
    values = list(requests)
    if any(v < 0 for v in values):
        return -1
    return max(values, default=0)


def in_force(device_index: int) -> int | None:
    """The set-aside in force on ``device_index`` through the ledger (bytes,
    as read back), ``None`` when no plan has a request there."""
    with _lock:
        dev = _ledger.get(device_index)
        return None if dev is None else dev.in_force


def planned_set_aside(device_index: int, nbytes: int,
                      owner: str = DEFAULT_OWNER) -> int:
    """What will be in force on ``device_index`` once ``owner`` requests
    ``nbytes`` (bytes, ``-1`` = the device maximum, 0 = no request), in the
    schedule's units: the largest of that request and every other owner's
    active request, 0 when there is none (the driver's own limit, normally
    none). The lint models this value; no driver call."""
    with _lock:
        dev = _ledger.get(device_index)
        others = [v for o, v in (dev.requests.items() if dev else ()) if o != owner]
    return _largest(others + ([nbytes] if nbytes else []))


def set_aside_requests(device_index: int) -> dict[str, int]:
    """The active requests on ``device_index``: owner -> bytes (-1 = the
    device maximum); empty when there is none."""
    with _lock:
        dev = _ledger.get(device_index)
        return dict(dev.requests) if dev else {}


def _driver():
    return importlib.import_module("cuda.bindings.driver")


def _capturing() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # no CUDA: nothing can be capturing
        return False


class DeviceDriver:
    """The CUDA driver calls l2sched makes, on device ``index``'s primary
    context (``cuda.bindings.driver``, imported on first use): the
    persisting-L2 limit (``max``, bytes) and device attributes
    (``attribute``). Raises ``RuntimeError`` naming a failed call."""

    def __init__(self, index: int):
        self.drv = drv = _driver()
        self.ok(drv.cuInit(0))
        self.dev = self.ok(drv.cuDeviceGet(index))
        self.max = int(self.ok(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
            self.dev)))
        self.limit = drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE

    def attribute(self, name: str) -> int:
        """``cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_<name>)`` of this
        device."""
        attr = getattr(self.drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(self.ok(self.drv.cuDeviceGetAttribute(attr, self.dev),
                           f"cuDeviceGetAttribute({name})"))

    def ok(self, res, what: str = "driver call"):
        if res[0] != self.drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what}: {res[0]}")
        return res[1] if len(res) == 2 else (res[1:] or None)

    def _in_context(self, fn):
        drv = self.drv
        ctx = self.ok(drv.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.ok(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            return fn()
        finally:
            drv.cuCtxPopCurrent()
            drv.cuDevicePrimaryCtxRelease(self.dev)

    def get(self) -> int:
        """The limit now (B)."""
        return int(self._in_context(
            lambda: self.ok(self.drv.cuCtxGetLimit(self.limit), "cuCtxGetLimit")))

    def set(self, nbytes: int) -> int:
        """Set the limit to ``nbytes`` B; the value read back (B)."""
        def go():
            self.ok(self.drv.cuCtxSetLimit(self.limit, nbytes), "cuCtxSetLimit")
            return int(self.ok(self.drv.cuCtxGetLimit(self.limit), "cuCtxGetLimit"))
        return self._in_context(go)


def _owner_of(requests: dict, value: int) -> str:
    return next(o for o, v in sorted(requests.items()) if v == value)


def apply_set_aside(device_index: int, nbytes: int, owner: str = DEFAULT_OWNER,
                    *, capturing: bool | None = None) -> int | None:
    """Record ``owner``'s request for a persisting-L2 set-aside of ``nbytes``
    bytes on device ``device_index`` (``-1`` = the device maximum; 0
    withdraws ``owner``'s request, as ``release_set_aside``) and set the
    device-wide limit to the largest active request, clamped to the device
    maximum, through ``cuda.bindings``' ``cuCtxSetLimit`` on the primary
    context; the limit before the first request is kept for
    ``release_set_aside``. ``capturing``: whether the current stream is
    being captured (``None`` = ask torch); a request during a capture is
    refused (the limit must be set before any capture).

    Returns the limit in force afterwards (bytes, read back), or ``None``
    when the request was refused (capture, no driver, driver error), in
    which case nothing changed. One log line either way; never raises."""
    if nbytes == 0:
        return release_set_aside(device_index, owner, capturing=capturing)
    where = f"persisting-L2 set-aside on device {device_index}"
    if capturing if capturing is not None else _capturing():
        log.warning("l2sched: %s: %s's request of %d B refused: requested during "
                    "a CUDA-graph capture; in force %s", where, owner, nbytes,
                    _in_force_text(device_index))
        return None
    with _lock:
        dev = _ledger.get(device_index)
        try:
            d = DeviceDriver(device_index)
            if dev is None:
                dev = _Device(previous=d.get())
                dev.in_force = dev.previous
            requests = dict(dev.requests, **{owner: int(nbytes)})
            top = _largest(requests.values())
            want = d.max if top < 0 else min(top, d.max)
            got = dev.in_force if want == dev.in_force and dev.requests else d.set(want)
        except Exception as e:
            log.warning("l2sched: %s: %s's request of %d B refused: %s: %s; in force "
                        "%s", where, owner, nbytes, type(e).__name__, e,
                        f"{dev.in_force:,} B" if dev else "unchanged")
            return None
        dev.requests, dev.in_force = requests, got
        _ledger[device_index] = dev
        whose = _owner_of(requests, top)
    log.info("l2sched: %s: %s requests %s B (device max %s B): in force %s B%s%s",
             where, owner, f"{nbytes:,}" if nbytes > 0 else "the maximum",
             f"{d.max:,}", f"{got:,}",
             f" ({whose}'s request, the largest)" if whose != owner else "",
             " (clamped to the device maximum)" if top < 0 or top > d.max else "")
    return got


def _in_force_text(device_index: int) -> str:
    v = in_force(device_index)
    return "unchanged" if v is None else f"{v:,} B"


def release_set_aside(device_index: int, owner: str = DEFAULT_OWNER, *,
                      capturing: bool | None = None) -> int | None:
    """Withdraw ``owner``'s request on device ``device_index``: the limit
    becomes the largest remaining request, or, when none remains, the limit
    that was in force before the first request. Returns the limit in force
    afterwards (bytes, read back), ``None`` when ``owner`` had no request or
    the driver refused (logged; the request then stays). Never raises."""
    where = f"persisting-L2 set-aside on device {device_index}"
    with _lock:
        dev = _ledger.get(device_index)
        if dev is None or owner not in dev.requests:
            return None
        if capturing if capturing is not None else _capturing():
            log.warning("l2sched: %s: %s's release refused: during a CUDA-graph "
                        "capture; in force %s B", where, owner, f"{dev.in_force:,}")
            return None
        rest = {o: v for o, v in dev.requests.items() if o != owner}
        try:
            d = DeviceDriver(device_index)
            top = _largest(rest.values())
            want = (d.max if top < 0 else min(top, d.max)) if rest else dev.previous
            got = dev.in_force if want == dev.in_force else d.set(want)
        except Exception as e:
            log.warning("l2sched: %s: %s's release refused: %s: %s; in force %s B",
                        where, owner, type(e).__name__, e, f"{dev.in_force:,}")
            return None
        if rest:
            dev.requests, dev.in_force = rest, got
            how = f"{_owner_of(rest, top)}'s request, the largest left"
        else:
            del _ledger[device_index]
            how = "restored the limit before the first request"
    log.info("l2sched: %s: %s withdrew its request: in force %s B (%s)", where,
             owner, f"{got:,}", how)
    return got


def reset_persisting_lines(device_index: int) -> bool:
    """Demote every persisting L2 line on device ``device_index`` to normal
    (``cuCtxResetPersistingL2Cache`` on the primary context; CUDA
    Programming Guide, "Reset L2 Access to Normal"). Persisting lines
    survive a change of the limit, so a plan's ``evict_last`` lines would
    otherwise stay protected for whatever runs next. Returns whether the
    driver did it; never raises (a refusal is one log line)."""
    try:
        d = DeviceDriver(device_index)
        d._in_context(lambda: d.ok(d.drv.cuCtxResetPersistingL2Cache(),
                                   "cuCtxResetPersistingL2Cache"))
    except Exception as e:
        log.warning("l2sched: persisting-L2 lines on device %d not reset: %s: %s",
                    device_index, type(e).__name__, e)
        return False
    return True
