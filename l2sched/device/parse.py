"""Reading device profiles: the hardware numbers the lint's cost model reads.

A profile is one TOML file in ``l2sched/data/devices/`` (adding a device is
adding a file; ``docs/devices.md`` describes the format). Every number carries
its source in a comment next to it; numbers nobody measured are marked
``ASSUMPTION``. Units: bytes (B), GB/s = 10^9 B/s (so ``GB/s * 1e3`` is bytes
per microsecond), microseconds (us).

``load_device(name_or_path)`` reads and validates a profile and raises
``L2sInputError`` naming the file, line and column of the key of every
problem; ``device_names()`` lists the shipped profiles. The op tables
(``[ops.MODEL."KIND"]``) are checked for their values here; whether their
layer kinds and op names exist is the model's business
(``l2sched.model.device_ops``), checked where a schedule's model meets the
profile.

Long module: one validating reader of one file format: the range of every
key and the error each bad value gives sit together, so a new key is added
in one place.
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]

from l2sched.device.allreduce import AllReduceModel
from l2sched.device.interpolate import log_interp
from l2sched.device.provenance import check_origin_entry, origin_from_entry, profile_fields
from l2sched.device.schema import (DEFAULT_BULK_SHAPE, LEGACY_OPS_MODEL, DeviceProfile,
                                    FillMode, OpTimes)
from l2sched.device.toml_keys import KeyIndex
from l2sched.errors import (
    Diagnostic,
    L2sInputError,
    Span,
    closest,
    source_lines,
    suggest,
)
from l2sched.files import read_input_text
from l2sched.units import FILL_MODES

#: Where the shipped profiles live (package data of ``l2sched.data.devices``).
DEVICES_DIR = Path(__file__).resolve().parent.parent / "data" / "devices"

# (toml section, key) -> (attribute, type, low, high, unit): the value must
# lie in ``low..high`` (both inclusive). Ranges are sanity bounds, far wider
# than any real GPU, that keep the lint's arithmetic finite and its step
# times readable (``docs/devices.md`` lists them). A bandwidth's low bound is
# positive: a value <= 0 is reported as "must be > 0".
MAX_BYTES = 10**15
MIN_GBPS, MAX_GBPS = 1e-3, 1e6
MAX_US = 1e6
_FIELDS: dict[tuple[str, str], tuple[str, type, float, float, str]] = {
    ("l2", "bytes"): ("l2_bytes", int, 1, MAX_BYTES, "B"),
    ("l2", "set_aside_max_bytes"): ("set_aside_max_bytes", int, 0, MAX_BYTES, "B"),
    ("l2", "evict_last_protected_bytes"): ("evict_last_protected_bytes", int, 0,
                                           MAX_BYTES, "B"),
    ("l2", "evict_normal_survival"): ("evict_normal_survival", float, 0, 1, ""),
    ("l2", "fill_effect"): ("fill_effect", float, 0, 1, ""),
    ("bandwidth", "dram_read_gbps"): ("dram_read_gbps", float, MIN_GBPS, MAX_GBPS,
                                      "GB/s"),
    ("bandwidth", "gemm_dram_gbps"): ("gemm_dram_gbps", float, MIN_GBPS, MAX_GBPS,
                                      "GB/s"),
    ("bandwidth", "gemm_l2_gbps"): ("gemm_l2_gbps", float, MIN_GBPS, MAX_GBPS, "GB/s"),
    ("bandwidth", "gemm_fixed_us"): ("gemm_fixed_us", float, 0, MAX_US, "us"),
    ("bandwidth", "fill_gbps"): ("fill_gbps", float, MIN_GBPS, MAX_GBPS, "GB/s"),
    ("bandwidth", "fill_launch_us"): ("fill_launch_us", float, 0, MAX_US, "us"),
    ("latency", "kernel_gap_us"): ("kernel_gap_us", float, 0, MAX_US, "us"),
    ("latency", "small_kernel_us"): ("small_kernel_us", float, 0, MAX_US, "us"),
    ("latency", "attention_core_us"): ("attention_core_us", float, 0, MAX_US, "us"),
}

#: Keys of an ``[allreduce.tpN]`` table, and the ranges of its numbers.
_ALLREDUCE_KEYS = ("latency_us", "busbw_gbps", "measured", "source")
_ALLREDUCE_RANGES = {"latency_us": (0, MAX_US, "us"),
                     "busbw_gbps": (MIN_GBPS, MAX_GBPS, "GB/s")}
#: TP degrees an ``[allreduce.tpN]`` table may name.
MAX_TP_DEGREE = 1024
#: Top-level keys and tables of a profile.
_TOP_KEYS = ("name", "description", "compute_capability", "gpu", "l2", "bandwidth",
             "latency", "allreduce", "fill", "ops", "provenance", "measured", "origin")
#: Keys of the ``[gpu]`` table (what the driver reports about the GPU).
_GPU_KEYS = ("names", "sm_count", "smem_per_block_optin_bytes")
#: Most SMs a profile may name (a sanity bound, like the others).
MAX_SMS = 100_000
#: Most shared memory per thread block a profile may name (B; a sanity
#: bound: 16 MiB, far above any GPU's opt-in limit).
MAX_SMEM_PER_BLOCK = 1 << 24
#: Optional keys of the number tables, parsed apart (``_parse_measured_tables``).
_OPTIONAL_KEYS = {"l2": ("effective_bytes", "set_aside_stream_slowdown"),
                  "latency": ("fill_slowdown_scale", "fill_fork_m", "fill_fork_us")}
#: Optional numbers of the number tables (as ``_FIELDS``); absent = the
#: ``DeviceProfile`` default.
_OPTIONAL_FIELDS: dict[tuple[str, str], tuple[str, type, float, float, str]] = {
    ("l2", "set_aside_stream_slowdown"): ("set_aside_stream_slowdown", float, 0, 100, ""),
    ("latency", "fill_slowdown_scale"): ("fill_slowdown_scale", float, 0, 1000, ""),
}
#: Keys of a ``[fill.MODE]`` table: (type, low, high, unit); ``source`` is a
#: string. Sanity bounds as for ``_FIELDS``.
_FILL_KEYS: dict[str, tuple[type, float, float, str]] = {
    "grid": (int, 1, 1 << 20, "CTAs"), "threads": (int, 1, 1024, "threads"),
    "chunk": (int, 16, 1 << 24, "B"), "stages": (int, 1, 64, ""),
    "gbps": (float, MIN_GBPS, MAX_GBPS, "GB/s"), "effect": (float, 0, 1, ""),
    "launch_us": (float, 0, MAX_US, "us"), "slowdown": (float, 0, 100, ""),
    "gemm_slowdown": (float, 0, 100, ""), "allreduce_slowdown": (float, 0, 100, ""),
    "attention_slowdown": (float, 0, 100, ""), "routing_slowdown": (float, 0, 100, ""),
}


def device_names() -> list[str]:
    """Names of the shipped profiles (``l2sched/data/devices/*.toml``)."""
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


def profile_path(name_or_path: str | os.PathLike) -> Path:
    """The file of a profile given by shipped name or by path: a value
    ending in ``.toml`` or holding a directory separator is a path, else a
    shipped profile's name (``h200``). Raises ``L2sInputError`` for a value
    that names no profile: an unknown name (with a suggestion), or an
    existing file that is not a ``.toml`` file (a schedule, a note), which
    is no profile name either. A path that does not exist or is a
    directory is returned, for the reader to say so."""
    text = os.fspath(name_or_path)
    plain = os.sep not in text and not (os.altsep and os.altsep in text)
    if plain and not text.endswith(".toml") and (DEVICES_DIR / f"{text}.toml").exists():
        return DEVICES_DIR / f"{text}.toml"
    if not text.endswith(".toml") and os.path.isfile(text):
        raise L2sInputError(f"'{text}' is not a .toml device profile file; a device "
                            f"profile is a shipped name ({', '.join(device_names())}) "
                            f"or a .toml file")
    if text.endswith(".toml") or not plain or os.path.isdir(text):
        return Path(text)
    raise L2sInputError(f"unknown device profile '{text}'"
                        f"{suggest(text, device_names())} (shipped: "
                        f"{', '.join(device_names())})")


def read_profile_text(path: Path) -> str:
    """The profile's text without a leading byte-order mark (TOML would
    reject it as a bare "Invalid statement"); ``L2sInputError`` naming the
    file as ``files.read_input_text`` raises it."""
    return read_input_text(path, "device profile").removeprefix("\ufeff")


def load_device(name_or_path: str | os.PathLike) -> DeviceProfile:
    """Read and validate a device profile (shipped name or ``.toml`` path).

    Raises ``L2sInputError`` naming the file and the ``section.key`` of every
    missing, mistyped or out-of-range value (all of them in one error)."""
    path = profile_path(name_or_path)
    return load_device_text(read_profile_text(path), str(path))


def load_device_text(text: str, shown: str) -> DeviceProfile:
    """Validate a device profile given as TOML ``text`` (e.g. the copy a
    bench result recorded), its problems located at ``shown:LINE:COL`` (the
    profile's ``path`` is ``shown``). Raises ``L2sInputError`` as
    ``load_device`` does."""
    try:
        raw = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(e))
        lines = source_lines(text)
        if m and 1 <= int(m.group(1)) <= len(lines):
            ln, col = int(m.group(1)), int(m.group(2))
            raise L2sInputError(Diagnostic(
                f"not valid TOML: {str(e)[:m.start()]}", Span.point(shown, ln, col),
                source_line=lines[ln - 1])) from None
        raise L2sInputError(Diagnostic(f"not valid TOML: {e}", Span.file(shown))) from None
    except ValueError as e:  # an integer literal of thousands of digits
        raise L2sInputError(Diagnostic(f"not valid TOML: {str(e).split(';')[0]}",
                                       Span.file(shown))) from None
    except RecursionError:  # arrays or inline tables nested hundreds deep
        raise L2sInputError(Diagnostic("not valid TOML: values nested too deeply to read",
                                       Span.file(shown))) from None
    return parse_device(raw, shown, text)


class _Problems:
    """The diagnostics of one profile file: ``bad(section, key, msg)``
    records one at the key's line (``section.key: msg``)."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text
        self.lines = source_lines(text)
        self.found: list[Diagnostic] = []

    @functools.cached_property
    def _index(self) -> KeyIndex:
        """The text's keys, read at the first problem (a clean file never is)."""
        return KeyIndex(self.text)

    def locate(self, want: tuple[str, ...]) -> Span | None:
        """The span of key path ``want`` in the text (``KeyIndex.span``);
        None without a text or when not even ``want[0]`` is written."""
        return self._index.span(self.path, want) if self.text else None

    def bad(self, section: str, key: str, msg: str, inner: str = "",
            written: str | None = None) -> None:
        """One problem of ``section`` (dotted: ``ops.MODEL.KIND``) and
        ``key`` (a name that may itself hold dots, an op's), located at the
        line that writes it (at ``inner``, a key inside that value, when
        given; at ``written`` in place of ``section`` when the file writes
        the table under another name)."""
        where_in = section if written is None else written
        want = tuple(p for p in where_in.split(".") if p) + tuple(k for k in (key, inner) if k)
        span = self.locate(want)
        where = ".".join(p for p in (section, key) if p)
        line = (self.lines[span.line - 1]
                if span and span.line <= len(self.lines) else None)
        # without a key's line, the problem is located at the file
        self.found.append(Diagnostic(f"{where}: {msg}", span or Span.file(self.path),
                                     source_line=line))

    def in_range(self, section: str, key: str, v: Any, low: float, high: float,
                 unit: str) -> bool:
        """True when ``v`` (a number) is finite and in ``low..high``; else
        report it at the key."""
        if isinstance(v, float) and not math.isfinite(v):
            self.bad(section, key, f"must be a finite number, got {v}")
            return False
        if low > 0 and v <= 0:
            self.bad(section, key, f"must be > 0, got {v}")
            return False
        if low == 0 and v < 0:
            self.bad(section, key, f"must be >= 0, got {v}")
            return False
        if not low <= v <= high:
            u = f" {unit}" if unit else ""
            self.bad(section, key, f"must be in {low:g}..{high:g}{u}, got {v:g}")
            return False
        return True


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_device(raw: Mapping[str, Any], path: str = "<profile>",
                 text: str = "") -> DeviceProfile:
    """Validate a parsed profile dict (see ``load_device``); ``text`` is the
    file's text, for ``line:col`` of each problem. Raises ``L2sInputError``
    with every problem at once."""
    problems = _Problems(path, text)
    values: dict[str, Any] = {}
    _check_keys(raw, problems, values)
    _parse_fields(raw, problems, values)
    _parse_fill_fork(raw, problems, values)
    ar = _parse_allreduce(raw.get("allreduce"), problems)
    _parse_fill(raw.get("fill"), "fill" in raw, problems, values)
    _parse_measured_tables(raw, problems, values)
    origin = _parse_origin(raw, problems, values)
    if not problems.found:
        device_profile = DeviceProfile(path=path, allreduce=ar, source_text=text, **values)
        known = set(profile_fields(device_profile))
        for key in origin:
            if key not in known:
                problems.bad("origin", key, f"names no field of this profile"
                             f"{suggest(key, sorted(known))}")
        if not problems.found:
            return device_profile
    # in file order; problems without a line (a missing key) last
    raise L2sInputError(sorted(problems.found, key=lambda d: (
        d.span.line == 0, d.span.line, d.span.column)))


def _parse_origin(raw: Mapping[str, Any], problems: _Problems, values: dict) -> dict:
    """The ``[origin]`` table (``l2sched.device.provenance``): one entry per
    field, ``"section.key" = {kind = ..., ...}``; sets ``values["origins"]``
    and returns the raw table (its keys are checked against the profile's
    fields once the profile is built)."""
    sec = raw.get("origin", {})
    if not isinstance(sec, dict):
        problems.bad("origin", "", "expected a table [origin] of {kind, ...} entries")
        return {}
    good = {}
    for key, entry in sec.items():
        wrong = check_origin_entry(entry)
        for inner, msg in wrong:
            problems.bad("origin", key, msg, inner=inner)
        if not wrong:
            good[key] = origin_from_entry(key, entry)
    values["origins"] = good
    return sec


def profile_error(device_profile: DeviceProfile,
                  problems: Iterable[tuple[str, str, str]]) -> L2sInputError:
    """The ``L2sInputError`` of ``problems`` found in a loaded profile by
    code outside this package (the model's check of the op tables):
    ``(section, key, message)`` each, ``section`` dotted (``ops.MODEL.
    kda+moe``), ``key`` a name that may hold dots (an op's). Each problem
    is located at ``path:line:column`` of the key in the profile's text as
    loaded (at the file when it was built without one); in file order."""
    found = _Problems(device_profile.path, device_profile.source_text)
    legacy = f"ops.{LEGACY_OPS_MODEL}."
    for section, key, msg in problems:
        # a table of the old layout is written without its model
        written = ("ops." + section[len(legacy):] if device_profile.legacy_ops
                   and section.startswith(legacy) else None)
        found.bad(section, key, msg, written=written)
    return L2sInputError(sorted(found.found, key=lambda d: (
        d.span.line == 0, d.span.line, d.span.column)))


def _parse_fill(sec: Any, present: bool, problems: _Problems, values: dict) -> None:
    """The ``[fill]`` table: ``default`` and one ``[fill.MODE]`` table per
    fill kernel with numbers; the bulk mode from the legacy keys when it has
    no table. Sets ``values["fill_modes"]`` and ``values["fill_default"]``."""
    bad = problems.bad
    modes: dict[str, FillMode] = {}
    tables_with_problems: set[str] = set()
    default = "bulk"
    if present and not isinstance(sec, dict):
        bad("fill", "", "expected a table [fill]")
        sec = {}
    for key, v in (sec or {}).items():
        if key == "default":
            if v not in FILL_MODES:
                bad("fill", "default", f"unknown fill kernel {v!r}"
                    f"{suggest(str(v), FILL_MODES)} (one of: {', '.join(FILL_MODES)})")
            else:
                default = v
            continue
        if key in FILL_MODES and not isinstance(v, dict):
            bad("fill", key, f"expected a table [fill.{key}] of the kernel's numbers, got "
                f"{v!r:.40}")
            continue
        if key not in FILL_MODES:
            bad("fill", key, f"unknown key{suggest(key, FILL_MODES + ('default',))}; "
                f"expected default or a table [fill.MODE] with MODE one of "
                f"{', '.join(FILL_MODES)}")
            continue
        got = _parse_fill_table(key, v, problems)
        if got is not None:
            modes[key] = got
        else:
            tables_with_problems.add(key)
    if "bulk" not in modes and all(k in values for k in
                                   ("fill_gbps", "fill_effect", "fill_launch_us")):
        modes["bulk"] = FillMode("bulk", **DEFAULT_BULK_SHAPE, gbps=values["fill_gbps"],
                                 effect=values["fill_effect"],
                                 launch_us=values["fill_launch_us"],
                                 source="bandwidth.fill_gbps, l2.fill_effect")
    # a table whose keys were reported exists: do not report it missing too
    if default not in modes and default not in tables_with_problems and "bulk" in modes:
        bad("fill", "default", f"default fill kernel {default!r} has no "
            f"[fill.{default}] table")
    values["fill_modes"] = modes
    values["fill_default"] = default


def _parse_fill_table(mode: str, v: Mapping[str, Any], problems: _Problems
                      ) -> FillMode | None:
    """The ``FillMode`` of table ``[fill.MODE]``, or ``None`` after
    reporting its problems."""
    table = f"fill.{mode}"
    got: dict[str, Any] = {}
    ok = True
    for key, val in v.items():
        if key == "source":
            if not isinstance(val, str):
                problems.bad(table, key, f"expected a string, got {val!r}")
                ok = False
            got[key] = val
            continue
        if key == "landed":
            pts = _points(val)
            if pts is None:
                problems.bad(table, key, "expected [[MB, fraction], ...] with MB "
                             "increasing and fractions in 0..1")
                ok = False
            got[key] = pts
            continue
        if key == "allreduce_extra_us":  # the additive term of profiles before 2026-12-01
            problems.bad(table, key, "replaced by allreduce_slowdown (a fraction per us of "
                         "overlap); measure it with `l2sched profile --collectives N` "
                         "(or the lab's `python -m lab bench tp-report RESULT "
                         "--update-profile`)")
            ok = False
            continue
        if key not in _FILL_KEYS:
            problems.bad(table, key, f"unknown key{suggest(key, list(_FILL_KEYS))} "
                         f"(keys: {', '.join(_FILL_KEYS)}, source)")
            ok = False
            continue
        typ, low, high, unit = _FILL_KEYS[key]
        if not _number(val) or (typ is int and not isinstance(val, int)):
            problems.bad(table, key, f"expected {'an integer' if typ is int else 'a number'}"
                         f", got {val!r}")
            ok = False
        elif problems.in_range(table, key, val, low, high, unit):
            got[key] = typ(val)
        else:
            ok = False
    missing = [k for k in ("gbps", "effect", "launch_us") if k not in v]
    if missing:
        problems.bad(table, "", f"needs {', '.join(missing)} (the fill kernel's "
                     "landed rate, effect and launch cost)")
        return None
    if not ok:
        return None
    if "chunk" in got and got["chunk"] % 16:
        problems.bad(table, "chunk", f"must be a multiple of 16, got {got['chunk']}")
        return None
    shape = {**DEFAULT_BULK_SHAPE, **{k: got[k] for k in DEFAULT_BULK_SHAPE if k in got}}
    return FillMode(mode, **shape, gbps=got["gbps"], effect=got["effect"],
                    launch_us=got["launch_us"], slowdown=got.get("slowdown", 0.0),
                    source=got.get("source", ""), landed=got.get("landed") or (),
                    allreduce_slowdown=got.get("allreduce_slowdown", 0.0),
                    gemm_slowdown=got.get("gemm_slowdown"),
                    attention_slowdown=got.get("attention_slowdown"),
                    routing_slowdown=got.get("routing_slowdown"))


def _points(val: Any) -> tuple[tuple[float, float], ...] | None:
    """``[[x, y], ...]`` with x increasing and y in 0..1, or None."""
    if not isinstance(val, list) or not val:
        return None
    out = []
    for p in val:
        if not (isinstance(p, list) and len(p) == 2 and all(_number(x) for x in p)
                and 0 <= p[1] <= 1 and (not out or p[0] > out[-1][0])):
            return None
        out.append((float(p[0]), float(p[1])))
    return tuple(out)


def _parse_measured_tables(raw: Mapping[str, Any], problems: _Problems,
                           values: dict) -> None:
    """``[provenance]``, ``[measured]``, ``l2.effective_bytes`` and the
    ``[ops.MODEL."KIND"]`` tables of a measured profile."""
    bad = problems.bad
    prov = raw.get("provenance", {})
    if not isinstance(prov, dict):
        bad("provenance", "", "expected a table [provenance]")
    elif _check_provenance(prov, problems):
        values["provenance"] = dict(prov)
    meas = raw.get("measured", {})
    if not isinstance(meas, dict) or not all(isinstance(v, dict) for v in meas.values()):
        bad("measured", "", "expected a table of {probe, median, p10, p90} tables")
    else:
        values["measured"] = {k: dict(v) for k, v in meas.items()}
    eff = (raw.get("l2") or {}).get("effective_bytes") if isinstance(raw.get("l2"), dict) \
        else None
    if eff is not None:
        if not isinstance(eff, int) or isinstance(eff, bool) or eff < 1:
            bad("l2", "effective_bytes", f"expected a positive integer, got {eff!r}")
        elif values.get("l2_bytes") and eff > 2 * values["l2_bytes"]:
            bad("l2", "effective_bytes", f"must not exceed twice l2.bytes, got {eff}")
        else:
            values["effective_l2_bytes"] = eff
    _parse_ops(raw, problems, values)




def _int_in(low: int, high: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


_TEXT = (lambda v: isinstance(v, str), "a string")
#: Keys of ``[provenance]`` (what ``l2sched profile`` records,
#: ``profile.probes.run_profile``): key -> (test, what the value must be).
_PROVENANCE_KEYS: dict[str, tuple[Any, str]] = {
    "gpu": (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    "compute_capability": (lambda v: isinstance(v, list) and len(v) == 2 and all(
        _int_in(0, 99)(x) for x in v), "[major, minor] (two integers 0..99)"),
    "sms": (_int_in(1, MAX_SMS), f"an integer in 1..{MAX_SMS}"),
    "l2_bytes": (_int_in(0, MAX_BYTES), "an integer in 0..10^15 (B)"),
    "memory_bytes": (_int_in(0, MAX_BYTES), "an integer in 0..10^15 (B)"),
    "set_aside_max_bytes": (_int_in(0, MAX_BYTES), "an integer in 0..10^15 (B)"),
    "tp": (_int_in(1, MAX_TP_DEGREE), f"an integer in 1..{MAX_TP_DEGREE}"),
    "quick": (lambda v: isinstance(v, bool), "true or false"),
    "date": (lambda v: isinstance(v, str) and _is_iso_date(v), "a date string YYYY-MM-DD"),
    "kept_from_base": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                       "a list of strings (section.key)"),
    "probe_seconds": (lambda v: isinstance(v, dict) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
        for x in v.values()), "a table of probe name = wall seconds (numbers >= 0)"),
    **{k: _TEXT for k in ("torch", "cuda", "cutlass_dsl", "driver", "command",
                          "base_profile")},
}


def _check_provenance(prov: Mapping[str, Any], problems: _Problems) -> bool:
    """Report every unknown key of ``[provenance]`` and every value of the
    wrong type or out of range; True when there is none."""
    ok = True
    for key, v in prov.items():
        if key not in _PROVENANCE_KEYS:
            problems.bad("provenance", key, f"unknown key{suggest(key, _PROVENANCE_KEYS)} "
                         f"(keys: {', '.join(_PROVENANCE_KEYS)})")
            ok = False
            continue
        test, what = _PROVENANCE_KEYS[key]
        if not test(v):
            problems.bad("provenance", key, f"expected {what}, got {v!r}"[:300])
            ok = False
    return ok


def _is_entry(v: Any) -> bool:
    """True for a value that is an op entry (``{m, cold_us, hot_us, ...}``)."""
    return isinstance(v, dict) and any(x in v for x in _OP_KEYS)


def _parse_ops(raw: Mapping[str, Any], problems: _Problems, values: dict) -> None:
    """The ``[ops.MODEL."KIND"]`` tables: ``values["ops"]`` maps each model
    to ``{(kind, op): OpTimes}``. Only the entries' values are checked here
    (``_op_times``); whether a model, kind or op exists is checked by the
    model (``l2sched.model.device_ops``). A table in the old layout
    (``[ops."KIND"]``: entries two levels under ``[ops]``) is read as
    every model's (key ``LEGACY_OPS_MODEL``), with a note in ``values["notes"]``."""
    bad = problems.bad
    ops = raw.get("ops", {})
    if not isinstance(ops, dict):
        bad("ops", "", "expected tables [ops.MODEL.\"KIND\"] of {m, cold_us, hot_us}")
        return
    tables: dict = {}
    legacy = [k for k, per in ops.items()
              if isinstance(per, dict) and any(_is_entry(v) for v in per.values())]
    if legacy:
        span = problems.locate(("ops", legacy[0]))
        at = f"{span}: " if span else f"{problems.path}: "
        values["notes"] = (
            f"{at}[ops.\"{legacy[0]}\"]"
            + (f" and {len(legacy) - 1} more" if len(legacy) > 1 else "")
            + ": op tables without a model apply to every model; write "
            "[ops.MODEL.\"KIND\"] (docs/devices.md)",)
        values["legacy_ops"] = True
    for model, kinds in ops.items():
        if model in legacy:
            kinds, prefix, model = {model: kinds}, "ops", LEGACY_OPS_MODEL
        else:
            prefix = f"ops.{model}"
        if not isinstance(kinds, dict):
            bad(prefix, "", "expected tables [ops.MODEL.\"KIND\"] of the model's "
                "layer kinds")
            continue
        table: dict = tables.setdefault(model, {})
        for kind, per in kinds.items():
            if not isinstance(per, dict):
                bad(f"{prefix}.{kind}", "", "expected a table of ops")
                continue
            for op, v in per.items():
                got = _op_times(v)
                if isinstance(got, list):
                    for inner, msg in got:
                        bad(f"{prefix}.{kind}", op, msg, inner=inner)
                    continue
                table[(kind, op)] = got
    values["ops"] = tables


#: Largest token count of an op entry's ``m`` / ``step_m`` (vLLM's
#: decode batches are far below it; a larger one is a typo).
MAX_OP_TOKENS = 1 << 20
_OP_KEYS = ("m", "cold_us", "hot_us", "step_m", "step_gap_us")


def _op_times(v: Any) -> "OpTimes | list[tuple[str, str]]":
    """One op entry as ``OpTimes``, or everything wrong with it:
    ``[(the entry's key it is about, or "", a message naming that key)]``
    (a key whose own values are bad is not also compared with another)."""
    if not isinstance(v, dict):
        return [("", "expected an inline table {m = [...], cold_us = [...], hot_us = [...]}")]
    out = [(k, f"unknown key {k!r} (known: {', '.join(_OP_KEYS)})") for k in v
           if k not in _OP_KEYS]
    out += [("", f"missing {k}") for k in _OP_KEYS[:3] if k not in v]
    if ("step_m" in v) != ("step_gap_us" in v):
        out.append(("step_m" if "step_m" in v else "step_gap_us",
                    "step_m and step_gap_us go together (the step gap at each token count)"))
    good = set()  # keys whose values are each fine
    for k in _OP_KEYS:
        if k not in v:
            continue
        wrong = _bad_series(k, v[k], k in ("m", "step_m"))
        if wrong:
            out.append((k, wrong))
        else:
            good.add(k)
    for k, ref in (("cold_us", "m"), ("hot_us", "m"), ("step_gap_us", "step_m")):
        if k in good and ref in good and len(v[k]) != len(v[ref]):
            out.append((k, f"{k} has {len(v[k])} values, {ref} has {len(v[ref])}"))
    if out:
        return out
    step = (tuple(v["step_m"]), tuple(float(x) for x in v["step_gap_us"])) \
        if "step_m" in v else ((), ())
    got = OpTimes(tuple(v["m"]), tuple(float(x) for x in v["cold_us"]),
                  tuple(float(x) for x in v["hot_us"]), *step)
    for M, gap in zip(*step):
        cold = log_interp(got.m, (got.cold_us,), M)[0]
        if gap > cold + 1e-9:
            return [("step_gap_us", f"step_gap_us: {gap:g} us at M={M} is more than the op's "
                     f"cold time there ({cold:.3f} us): a fill cannot save more than the whole "
                     "op")]
    return got


def _bad_series(k: str, xs: Any, tokens: bool) -> str:
    """What is wrong with the list ``xs`` of key ``k`` (a message naming
    ``k``; "" when nothing): a non-empty list of increasing token counts in
    1..``MAX_OP_TOKENS`` (``tokens``), else of times in 0..``MAX_US`` us."""
    if not isinstance(xs, list) or not xs:
        return f"{k}: expected a non-empty list, got {xs!r:.40}"
    if tokens:
        bad = next((x for x in xs if not (isinstance(x, int) and not isinstance(x, bool)
                                          and 1 <= x <= MAX_OP_TOKENS)), None)
        if bad is not None:
            return f"{k}: {bad!r:.40} is not a token count in 1..{MAX_OP_TOKENS}"
        if any(b <= a for a, b in zip(xs, xs[1:])):
            return f"{k}: token counts must increase, got {xs!r:.60}"
        return ""
    bad = next((x for x in xs if not (_number(x) and 0 <= x < MAX_US)), None)
    if bad is not None:
        return f"{k}: {bad!r:.40} is not a time in 0..{MAX_US:g} us"
    return ""


def _parse_fill_fork(raw: Mapping[str, Any], problems: _Problems, values: dict) -> None:
    """``latency.fill_fork_m`` and ``latency.fill_fork_us`` (optional,
    together): the main-stream cost per forked fill (us) at each token
    count; sets ``values["fill_fork_m"]`` / ``values["fill_fork_us"]``."""
    sec = raw.get("latency")
    if not isinstance(sec, dict):
        return
    keys = ("fill_fork_m", "fill_fork_us")
    given = [k for k in keys if k in sec]
    if not given:
        return
    if len(given) == 1:
        problems.bad("latency", given[0], "fill_fork_m and fill_fork_us go together (the "
                     "main-stream cost per forked fill, us, at each token count)")
        return
    wrong = {k: _bad_series(k, sec[k], k == "fill_fork_m") for k in keys}
    for k, msg in wrong.items():
        if msg:
            problems.bad("latency", k, msg)
    if any(wrong.values()):
        return
    m, us = sec["fill_fork_m"], sec["fill_fork_us"]
    if len(m) != len(us):
        problems.bad("latency", "fill_fork_us", f"fill_fork_us has {len(us)} values, "
                     f"fill_fork_m has {len(m)}")
        return
    values["fill_fork_m"] = tuple(m)
    values["fill_fork_us"] = tuple(float(x) for x in us)


def _check_keys(raw: Mapping[str, Any], problems: _Problems, values: dict) -> None:
    """``name``/``description``, ``compute_capability``, unknown top-level
    keys and tables, unknown keys in the number tables."""
    bad = problems.bad
    for key in ("name", "description"):
        v = raw.get(key)
        if not isinstance(v, str) or not v:
            bad("", key, "missing or not a non-empty string")
        values[key] = v
    cc = raw.get("compute_capability")
    if cc is not None:
        if (not isinstance(cc, list) or len(cc) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool)
                           and 0 <= x <= 99 for x in cc)):
            bad("", "compute_capability", f"expected [major, minor] (two integers "
                f"0..99), got {cc!r}")
        else:
            values["compute_capability"] = (cc[0], cc[1])
    _check_gpu(raw.get("gpu"), "gpu" in raw, problems, values)
    for key in raw:
        if key not in _TOP_KEYS:
            what = "table" if isinstance(raw[key], dict) else "key"
            bad(key if what == "table" else "", "" if what == "table" else key,
                f"unknown top-level {what}{suggest(key, _TOP_KEYS)} "
                f"(known: {', '.join(_TOP_KEYS)})")
    for section in ("l2", "bandwidth", "latency"):
        sec = raw.get(section)
        if not isinstance(sec, dict):
            if section in raw:
                bad(section, "", "expected a table [" + section + "]")
            continue
        known = [k for s_, k in _FIELDS if s_ == section] + list(_OPTIONAL_KEYS.get(section, ()))
        for key in sec:
            if key not in known:
                bad(section, key, f"unknown key{suggest(key, known)} "
                                  f"(keys: {', '.join(known)})")


def _check_gpu(sec: Any, given: bool, problems: _Problems, values: dict) -> None:
    """The optional ``[gpu]`` table: ``names`` (non-empty strings),
    ``sm_count`` (an integer, 1..``MAX_SMS``) and
    ``smem_per_block_optin_bytes`` (an integer, 1..``MAX_SMEM_PER_BLOCK``)."""
    bad = problems.bad
    if not given:
        return
    if not isinstance(sec, dict):
        bad("gpu", "", "expected a table [gpu] with names and sm_count")
        return
    for key in sec:
        if key not in _GPU_KEYS:
            bad("gpu", key, f"unknown key{suggest(key, _GPU_KEYS)} "
                            f"(keys: {', '.join(_GPU_KEYS)})")
    names = sec.get("names")
    if names is not None:
        if (not isinstance(names, list) or not names
                or not all(isinstance(x, str) and x.strip() for x in names)):
            bad("gpu", "names", f"expected a list of device names as the driver "
                f"reports them (e.g. [\"NVIDIA H200\"]), got {names!r}")
        else:
            values["gpu_names"] = tuple(names)
    sms = sec.get("sm_count")
    if sms is not None:
        if not isinstance(sms, int) or isinstance(sms, bool):
            bad("gpu", "sm_count", f"expected an integer, got {sms!r}")
        elif problems.in_range("gpu", "sm_count", sms, 1, MAX_SMS, ""):
            values["sm_count"] = sms
    smem = sec.get("smem_per_block_optin_bytes")
    if smem is not None:
        if not isinstance(smem, int) or isinstance(smem, bool):
            bad("gpu", "smem_per_block_optin_bytes", f"expected an integer (bytes), "
                f"got {smem!r}")
        elif problems.in_range("gpu", "smem_per_block_optin_bytes", smem, 1,
                               MAX_SMEM_PER_BLOCK, "B"):
            values["smem_per_block_optin_bytes"] = smem


def _parse_fields(raw: Mapping[str, Any], problems: _Problems, values: dict) -> None:
    """The numbers of ``_FIELDS``: present, of their type, in range. A
    missing table is one problem, not one per key; none when it is already
    explained (the table is not a table, or an unknown table is a misspelling
    of it, reported by ``_check_keys``)."""
    bad = problems.bad
    misspelled = {closest(s, _TOP_KEYS) for s in raw
                   if s not in _TOP_KEYS and isinstance(raw[s], dict)}
    reported: set[str] = set()
    for (section, key), (attr, typ, low, high, unit) in _FIELDS.items():
        sec = raw.get(section)
        if not isinstance(sec, dict):
            if section not in raw and section not in misspelled | reported:
                keys = ", ".join(k for s_, k in _FIELDS if s_ == section)
                bad(section, "", f"missing table [{section}] (keys: {keys})")
            reported.add(section)
            continue
        if key not in sec:
            bad(section, key, f"missing ({'integer' if typ is int else 'number'})")
            continue
        v = sec[key]
        ok = isinstance(v, int) if typ is int else isinstance(v, (int, float))
        if not ok or isinstance(v, bool):
            bad(section, key, f"expected {'an integer' if typ is int else 'a number'}, "
                              f"got {v!r}")
            continue
        if not problems.in_range(section, key, v, low, high, unit):
            continue
        values[attr] = typ(v)
    for (section, key), (attr, typ, low, high, unit) in _OPTIONAL_FIELDS.items():
        sec = raw.get(section)
        if not isinstance(sec, dict) or key not in sec:
            continue
        v = sec[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            bad(section, key, f"expected a number, got {v!r}")
        elif problems.in_range(section, key, v, low, high, unit):
            values[attr] = float(v)
    l2, aside = values.get("l2_bytes"), values.get("set_aside_max_bytes")
    if l2 is not None and aside is not None and aside > l2:
        bad("l2", "set_aside_max_bytes", f"must not exceed l2.bytes ({l2}), "
                                         f"got {aside}")


def _parse_allreduce(sec: Any, problems: _Problems) -> dict[int, AllReduceModel]:
    """The ``[allreduce]`` section: ``model`` and one ``[allreduce.tpN]``
    table per measured TP degree."""
    bad = problems.bad
    ar: dict[int, AllReduceModel] = {}
    if not isinstance(sec, dict):
        bad("allreduce", "", "missing section [allreduce] with [allreduce.tpN] tables")
        return ar
    tables = 0
    for k, v in sec.items():
        if k == "model":
            if v != "latency_plus_bandwidth":
                bad("allreduce", "model", f"unknown model {v!r} "
                                          "(latency_plus_bandwidth)")
            continue
        if not (re.fullmatch(r"tp[0-9]+", k) and isinstance(v, dict)):
            if isinstance(v, dict):
                bad(f"allreduce.{k}", "", "expected a table named tpN "
                    "(e.g. [allreduce.tp4])")
            else:
                bad("allreduce", k, f"unknown key{suggest(k, ['model'])}; "
                    "expected model or a table named tpN (e.g. [allreduce.tp4])")
            continue
        tables += 1
        got = _parse_allreduce_table(k, v, problems)
        if got is not None:
            ar[got[0]] = got[1]
    if not tables:
        bad("allreduce", "", "needs at least one [allreduce.tpN] table "
            "(e.g. [allreduce.tp4] with latency_us and busbw_gbps)")
    return ar


def _parse_allreduce_table(k: str, v: Mapping[str, Any], problems: _Problems
                           ) -> tuple[int, AllReduceModel] | None:
    """``(degree, model)`` of table ``[allreduce.K]``, or ``None`` after
    reporting its problems."""
    bad = problems.bad
    table = f"allreduce.{k}"
    # (int() of a few thousand digits raises ValueError)
    degree = int(k[2:]) if len(k) <= 8 else MAX_TP_DEGREE + 1
    if not 1 <= degree <= MAX_TP_DEGREE:
        bad(table, "", f"TP degree must be in 1..{MAX_TP_DEGREE}, got "
            f"{k[2:] if len(k) <= 24 else k[2:22] + '...'}")
        return None
    unknown = [key for key in v if key not in _ALLREDUCE_KEYS]
    for key in unknown:
        bad(table, key, f"unknown key{suggest(key, _ALLREDUCE_KEYS)} "
                        f"(keys: {', '.join(_ALLREDUCE_KEYS)})")
    if unknown:
        return None
    missing = [key for key in ("latency_us", "busbw_gbps") if key not in v]
    if missing:
        bad(table, "" if len(missing) > 1 else missing[0],
            "needs numbers latency_us and busbw_gbps")
        return None
    ok = True
    for key, (low, high, unit) in _ALLREDUCE_RANGES.items():
        if not _number(v[key]):
            bad(table, key, f"expected a number, got {v[key]!r}")
            ok = False
        elif not problems.in_range(table, key, v[key], low, high, unit):
            ok = False
    if not ok:
        return None
    when, src = v.get("measured", ""), v.get("source", "")
    if not isinstance(when, str) or (when and not _is_iso_date(when)):
        bad(table, "measured", f"expected a date string YYYY-MM-DD, got {when!r}")
        return None
    if not isinstance(src, str):
        bad(table, "source", f"expected a string, got {src!r}")
        return None
    return degree, AllReduceModel(float(v["latency_us"]), float(v["busbw_gbps"]),
                                  when, src)


def _is_iso_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10
