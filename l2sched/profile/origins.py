"""Where each number of a profile ``l2sched profile`` writes came from (its
``[origin]`` table, ``l2sched.device.provenance``), and what it writes for
the numbers its probes do not measure.

With a base profile of the same GPU (``device.identity``: name, L2 bytes,
SM count, compute capability as this run's driver reported them) those
numbers are kept from the base and named as kept (``kind = "base"``, with
what they were there). With a base of another GPU, every kept number that
has a conservative rule (``provenance.CONSERVATIVE``: larger slowdowns,
smaller landed fractions, shorter idle time) gets its conservative value,
named as such (``kind = "conservative"`` and why), so a profile made on a
new GPU carries no number of the base's GPU as if it were its own. The
fill-vs-all-reduce slowdown (``fill.MODE.allreduce_slowdown``), which only
``--collectives`` measures, is treated the same way: kept from a base of
this GPU, conservative otherwise. Pure Python (no torch).
"""

from __future__ import annotations

import json
import re
from typing import Any

from l2sched.device import DeviceProfile, GpuIdentity, identity_mismatches, load_device_text
from l2sched.device.provenance import (FieldOrigin, conservative_value, field_origins,
                                       generic_key)

#: The comment line that opens the ``[origin]`` block ``origin_table`` writes.
_ORIGIN_HEAD = "# Where each number came from (docs/devices.md#where-every-number-came-from)."
#: The probe each field without a ``[measured]`` record comes from (for its
#: ``[origin]`` entry): field prefix -> probe.
PROBE_OF = {
    "gpu.": "driver (torch.cuda.get_device_properties, cuDeviceGetAttribute)",
    "l2.bytes": "driver (torch.cuda.get_device_properties)",
    "l2.set_aside_max_bytes": "driver (cudaLimitPersistingL2CacheSize read back)",
    "l2.fill_effect": "fill (the bulk kernel's effect)",
    "bandwidth.fill_": "fill (the bulk kernel's rate and launch)",
    "fill.": "fill, interference and graph probes",
    "ops.": "ops (cold/hot per op) and step_fill (step gaps)",
}


def toml_value(v: Any) -> str:
    """``v`` (bool, number, str, list, dict) as an inline TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k) if not k.isidentifier() else k} = "
                                f"{toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v))


def same_gpu(device_profile: DeviceProfile, provenance: dict) -> bool:
    """True when ``device_profile`` (a ``DeviceProfile``: the base) describes the GPU this run
    measured (``provenance``: its ``gpu`` name, ``l2_bytes``, ``sms`` and
    ``compute_capability``); False when any differs or the run's GPU is
    not known."""
    if not provenance.get("gpu") or not provenance.get("l2_bytes"):
        return False
    gpu = GpuIdentity(str(provenance["gpu"]), int(provenance["l2_bytes"]),
                      int(provenance.get("sms") or 0),
                      tuple(provenance.get("compute_capability") or (0, 0)))
    return not identity_mismatches(device_profile, gpu)


def default_profile_name(device_profile: DeviceProfile, provenance: dict) -> str:
    """The name of a measured profile without ``--name``: the base's when the
    base describes the GPU measured (``same_gpu``), else ``measured-`` and
    the GPU's name in lower case with runs of other characters as one
    ``-`` (``NVIDIA H100 80GB HBM3`` -> ``measured-nvidia-h100-80gb-hbm3``),
    so a profile of another GPU never carries the base's name (an H100
    profile named ``h200`` made the plugin's log say "no prefetch for
    h200": benchmarks/results/h100-2026-12-07-ds4-engine-verify/)."""
    if same_gpu(device_profile, provenance):
        return device_profile.name
    slug = re.sub(r"[^a-z0-9]+", "-", str(provenance.get("gpu") or "gpu").lower()).strip("-")
    return f"measured-{slug or 'gpu'}"


def _base_origin(device_profile: DeviceProfile, key: str,
                 base_key: str | None = None) -> FieldOrigin:
    """The origin of a number kept from ``device_profile`` (the base): what
    it was there."""
    there = field_origins(device_profile).get(base_key or key)
    return FieldOrigin(key, "base", base=device_profile.name,
                       base_kind=there.kind if there is not None else "")


def apply_base_policy(derived: dict, device_profile: DeviceProfile,
                      provenance: dict) -> dict:
    """Set the numbers ``derived`` (``write.derive``'s result) keeps from
    ``device_profile`` (the base profile) to the base's (same GPU) or their
    conservative values (another GPU), and the fill kernels'
    ``allreduce_slowdown`` likewise; records
    each one's origin in ``derived["origins"]`` (key -> ``FieldOrigin``)
    and the all-reduce tables to write in ``derived["allreduce"]``. Returns
    ``derived``."""
    origins: dict[str, FieldOrigin] = derived.setdefault("origins", {})
    same = same_gpu(device_profile, provenance)
    sections = derived["sections"]
    for key in derived["kept"]:
        section, _, name = key.partition(".")
        if section not in sections or not name:
            continue
        value = sections[section].get(name)
        got = None if same or value is None else conservative_value(key, value)
        if got is None:
            origins[key] = _base_origin(device_profile, key)
        else:
            sections[section][name] = got[0]
            origins[key] = FieldOrigin(key, "conservative", base=device_profile.name,
                                       source=f"{got[1]} (base {device_profile.name} describes "
                                              "another GPU)")
    tables = {}
    for deg, m in sorted(device_profile.allreduce.items()):
        key = f"allreduce.tp{deg}"
        if same:
            tables[deg] = (m.latency_us, m.busbw_gbps, m.measured, m.source)
            origins[key] = _base_origin(device_profile, key)
            continue
        lat = conservative_value("allreduce.latency_us", m.latency_us)
        bw = conservative_value("allreduce.busbw_gbps", m.busbw_gbps)
        tables[deg] = (lat[0], bw[0], "", "")
        origins[key] = FieldOrigin(key, "conservative", base=device_profile.name,
                                   source=f"latency: {lat[1]}; bus bandwidth: {bw[1]} (base "
                                          f"{device_profile.name} describes another GPU)")
    derived["allreduce"] = tables
    for mode, tab in derived["fill"].items():
        key = f"fill.{mode}.allreduce_slowdown"
        old = device_profile.fill_modes.get(mode)
        if same and old is not None and old.allreduce_slowdown:
            tab["allreduce_slowdown"] = old.allreduce_slowdown
            origins[key] = _base_origin(device_profile, key)
            continue
        value, why = conservative_value(key, old.allreduce_slowdown if old else 0.0)
        tab["allreduce_slowdown"] = value
        origins[key] = FieldOrigin(key, "conservative", source=why + (
            "" if same else f" (base {device_profile.name} describes another GPU)"))
    return derived


def origin_table(text: str, shown: str, derived: dict) -> list[str]:
    """The ``[origin]`` lines of profile ``text`` (every field of
    ``provenance.profile_fields``): ``derived["origins"]`` where the writer
    decided one, else measured by the run (the ``[measured]`` probe, or
    ``PROBE_OF``, with the run's date and any p10/p90)."""
    device_profile = load_device_text(text, shown)
    date = str(device_profile.provenance.get("date", ""))
    chosen = derived.get("origins", {})
    out = ["", _ORIGIN_HEAD, "[origin]"]
    for key, o in field_origins(device_profile).items():
        if key in chosen:
            o = chosen[key]
        elif o.kind == "measured" and (o.probe.startswith("l2sched profile (no")
                                       or not o.probe):
            probe = next((p for pre, p in PROBE_OF.items() if key.startswith(pre)),
                         "l2sched profile")
            o = FieldOrigin(key, "measured", probe, date, o.p10, o.p90)
        elif o.kind == "default" and generic_key(key) == "fill.MODE.allreduce_slowdown":
            o = FieldOrigin(key, "default", source=o.source)
        out.append(f'"{key}" = {toml_value(o.toml_entry())}')
    return out



def record_collectives(text: str, shown: str, derived: dict, lines: list[str],
                       date: str, source: str) -> str:
    """Profile ``text`` with its ``[origin]`` block rewritten after
    ``--collectives`` wrote the collective terms (``lines``: what
    ``collective_terms_text`` said it wrote: ``[allreduce.tpN] ...`` and
    ``[fill.MODE] allreduce_slowdown = ...``): those fields measured on
    ``date`` from ``source``."""
    origins = derived.setdefault("origins", {})
    probe = "l2sched profile --collectives (NCCL, all-reduce alone and beside a 30 MB fill)"
    for line in lines:
        m = re.match(r"\[(allreduce\.tp\d+)\] latency_us", line) or re.match(
            r"\[fill\.(\w+)\] allreduce_slowdown = ", line)
        if m is None:
            continue
        key = m.group(1) if m.group(1).startswith("allreduce") else \
            f"fill.{m.group(1)}.allreduce_slowdown"
        origins[key] = FieldOrigin(key, "measured", probe, date, source=source)
    at = text.find("\n" + _ORIGIN_HEAD)
    body = text[:at + 1] if at >= 0 else text
    return body.rstrip("\n") + "\n" + "\n".join(origin_table(body, shown, derived)) + "\n"
