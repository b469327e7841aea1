"""The device profile of the TP emulation: the measured profile of the GPU
that runs it, with the all-reduce of the box it emulates.

``emulation_profile_text`` takes a base profile (the lent H200's, measured)
and changes three things, each named in the file's header and ``[origin]``:

- ``[allreduce.tpN]``: the emulated interconnect's all-reduce model, taken
  from another profile (default ``sm120-rtx-pro-6000-maxq``: 4 GPUs over
  PCIe, its ASSUMPTION in that file) or a fixed ``--allreduce-us``. The
  engine's idle intervals are this model's times (``plugin.idle_for``), so
  the fit and the engine read one number.
- ``fill.MODE.allreduce_slowdown = 0``: an idle interval is a spin kernel on
  one SM that reads no memory, so a fill beside it does not slow it (the
  measured slowdowns are of NCCL all-reduces on 2 H200s).
- ``name``/``description``: the emulation's, so a schedule fitted on it says
  which box it is for.

Everything else (L2, bandwidths, fill kernels, per-op tables) stays the base
profile's measured numbers: the GPU is the one doing the work.
"""

from __future__ import annotations

import re

from l2sched.device import load_device
from l2sched.device.allreduce import AllReduceModel, allreduce_table
from l2sched.device.edit import profile_table_header
from l2sched.device.parse import profile_path, read_profile_text

#: busbw_gbps of a fixed ``--allreduce-us`` model: the bytes term is
#: negligible (64 tokens x 4096 x 2 B = 0.5 MB -> 0.0005 us).
FIXED_BUSBW_GBPS = 1e6


def allreduce_model(tp: int, source: str | None, fixed_us: float | None
                    ) -> tuple[AllReduceModel, str]:
    """``(model, where from)`` of the emulated all-reduce at TP ``tp``: the
    fixed ``fixed_us`` (latency only) when given, else profile ``source``'s
    ``[allreduce.tpN]``. Raises ``ValueError`` when neither or a profile
    without that degree is given."""
    if fixed_us is not None:
        if fixed_us <= 0:
            raise ValueError(f"--allreduce-us must be > 0, got {fixed_us}")
        return (AllReduceModel(float(fixed_us), FIXED_BUSBW_GBPS),
                f"fixed {fixed_us:g} us per all-reduce (--allreduce-us)")
    if not source:
        raise ValueError("give an all-reduce source profile or --allreduce-us")
    prof = load_device(source)
    model = prof.allreduce.get(tp)
    if model is None:
        raise ValueError(f"profile {source} has no [allreduce.tp{tp}]")
    return (AllReduceModel(model.latency_us, model.busbw_gbps),
            f"[allreduce.tp{tp}] of profile {prof.name}: "
            f"{model.latency_us:g} us + bytes / {model.busbw_gbps:g} GB/s")


def emulation_profile_text(base: str, tp: int, name: str, *, source: str | None = None,
                           fixed_us: float | None = None) -> str:
    """The emulation's profile text (see the module docstring). ``base``:
    the measured profile's name or path; ``tp``: the emulated degree;
    ``name``: the new profile's name. Raises ``ValueError`` (bad all-reduce
    source) or ``L2sInputError`` (unreadable base, or a result that does not
    load as a profile)."""
    model, where = allreduce_model(tp, source, fixed_us)
    text = read_profile_text(profile_path(base))
    lines = text.splitlines(keepends=True)
    out, table, ar_written = [], "", False
    skip_table = False
    for line in lines:
        header = profile_table_header(line)
        if header is not None:
            table = header
            skip_table = header == f"allreduce.tp{tp}"
            if skip_table:
                out.append(allreduce_table(tp, model, (f"emulated: {where}",)))
                ar_written = True
                continue
        elif skip_table:
            continue
        if not table and re.match(r'^\s*name\s*=', line):
            line = f'name = "{name}"\n'
        elif not table and re.match(r'^\s*description\s*=', line):
            line = (f'description = "one GPU emulating TP rank 0 of TP{tp}: idle intervals '
                    f'for all-reduces ({where})"\n')
        elif table.startswith("fill.") and re.match(r"^\s*allreduce_slowdown\s*=", line):
            line = ("allreduce_slowdown = 0  # emulation: the all-reduce is an idle spin "
                    "kernel reading no memory\n")
        elif table == "origin" and re.match(
                rf'^\s*"(allreduce\.tp{tp}|fill\.\w+\.allreduce_slowdown)"\s*=', line):
            key = line.split("=", 1)[0].strip()
            why = (where if key.startswith('"allreduce') else
                   "emulation: idle spin kernels are not slowed by fills")
            line = f'{key} = {{ kind = "estimate", source = "{_toml_escape(why)}" }}\n'
        out.append(line)
    if not ar_written:
        out.append("\n" + allreduce_table(tp, model, (f"emulated: {where}",)))
    head = (f"# Emulation profile (lab/engine_tp): {profile_path(base).name} with the all-reduce "
            f"of {where};\n# fills do not slow the idle intervals (allreduce_slowdown 0). "
            "Written by lab.engine_tp.emulation_profile.\n")
    new = head + "".join(out)
    from l2sched.device import load_device_text
    load_device_text(new, f"<emulation profile {name}>")  # raises if it does not load
    return new


def _toml_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')
