"""The device profile the plugin lints with, checked against the rank's
GPU (name, L2 bytes, SM count, compute capability, as the driver reports
them)."""

from __future__ import annotations

from l2sched.device import (
    DeviceProfile,
    GpuIdentity,
    identity_mismatches,
    load_device,
    matching_profiles,
)
from l2sched.errors import L2sError, L2sPluginError
from l2sched.runtime import kernel as K


def first_line(err) -> str:
    """The first diagnostic of ``err`` (``FILE:LINE:COL: message (+N
    more)``), else its first line."""
    diags = getattr(err, "diagnostics", ())
    if diags:
        d = diags[0]
        where = f"{d.span}: " if d.span else ""
        more = f" (+{len(diags) - 1} more)" if len(diags) > 1 else ""
        return f"{where}{d.message}{more}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def gpu_identity(device_index: int) -> GpuIdentity:
    """What the driver reports about CUDA device ``device_index``
    (``torch.cuda.get_device_properties``: name, L2 bytes, SM count,
    compute capability)."""
    import torch

    p = torch.cuda.get_device_properties(device_index)
    return GpuIdentity(str(p.name), int(p.L2_cache_size),
                       int(p.multi_processor_count), (int(p.major), int(p.minor)))


def checked_device_profile(backend: str, wanted: str) -> DeviceProfile:
    """The device profile to lint with: ``wanted`` (the plugin's ``device``
    setting, else the schedule's ``device``: a shipped name or a ``.toml``
    path), after checking that it describes this rank's GPU
    (``gpu_identity.identity_mismatches``: name, L2 size, SM count, compute
    capability). The dry-run backend checks no GPU.

    Raises ``L2sPluginError``: ``bad device profile`` (the profile does not
    load), ``unsupported hardware`` (no CUDA device, compute capability
    below 9.0), ``device mismatch`` (the GPU is not the profile's; the
    detail names what differs and any shipped profile that matches)."""
    try:
        device_profile = load_device(wanted)
    except L2sError as e:
        raise L2sPluginError("bad device profile", first_line(e)) from None
    if backend == "dry-run":
        return device_profile
    import torch

    if not torch.cuda.is_available():
        raise L2sPluginError("unsupported hardware", "no CUDA device in this process "
                          "(use backend dry-run to check a schedule on CPU)")
    device_index = torch.cuda.current_device()
    ok, why = K.device_supported(device_index)
    if not ok:
        raise L2sPluginError("unsupported hardware", why)
    gpu = gpu_identity(device_index)
    differs = identity_mismatches(device_profile, gpu)
    if not differs:
        return device_profile
    match = matching_profiles(gpu)
    hint = (f"the shipped profile {match[0]} matches this GPU: use a schedule "
            f"written for it, or lint this one with \"device\": \"{match[0]}\""
            if match else "no shipped profile matches this GPU: write one "
            "(docs/devices.md) and name it with \"device\": \"PATH.toml\"")
    raise L2sPluginError("device mismatch", f"device profile {wanted} describes "
                         f"another GPU than this one, {gpu.describe()} "
                         f"({'; '.join(differs)}); {hint}")
