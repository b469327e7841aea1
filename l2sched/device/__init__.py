"""Device profiles: one GPU's hardware numbers, as the lint's cost model
reads them (``docs/devices.md``).

- ``schema``: the data (``DeviceProfile``, ``FillMode``, ``OpTimes``);
- ``parse``: reading and validating a profile file, every problem located
  at ``file:line:column`` (``toml_keys`` finds a key's place in the text);
- ``interpolate``: measured points between and beyond themselves;
- ``allreduce``: the all-reduce model and its fit to measurements;
  ``edit`` writes a fitted table into a profile file;
- ``overlap``: a fill's measured cost to a concurrent op read as the
  lint's slowdown;
- ``identity``: which profile describes a GPU;
- ``limits``: the limits a fill kernel is built against (``DeviceLimits``);
  ``kernel_spec``: a fill kernel's launch shape and its fitting to them.

The package knows no model: op tables are keyed by the model adapter's
name (``[ops.MODEL."KIND"]``), and whether their layer kinds and ops exist
is checked by ``l2sched.model.device_ops`` where a schedule's model meets
the profile. A loaded profile is called ``device_profile``; ``device`` is
the name or path a schedule or ``--device`` writes.
"""

from l2sched.device.allreduce import AllReduceModel, fit_allreduce
from l2sched.device.edit import profile_table_header, write_allreduce_model
from l2sched.device.identity import (
    GpuIdentity,
    identity_mismatches,
    matching_profiles,
    profile_for_gpu,
)
from l2sched.device.overlap import slowdown_for_extra
from l2sched.device.parse import (
    DEVICES_DIR,
    device_names,
    load_device,
    load_device_text,
    parse_device,
    profile_error,
    profile_path,
    read_profile_text,
)
from l2sched.device.schema import DEFAULT_BULK_SHAPE, DeviceProfile, FillMode, OpTimes

__all__ = [
    "AllReduceModel", "DEFAULT_BULK_SHAPE", "DEVICES_DIR", "DeviceProfile", "FillMode",
    "GpuIdentity", "OpTimes", "device_names", "fit_allreduce", "identity_mismatches",
    "load_device", "load_device_text", "matching_profiles", "parse_device", "profile_error",
    "profile_for_gpu", "profile_path", "profile_table_header", "read_profile_text",
    "slowdown_for_extra", "write_allreduce_model",
]
