"""Device profiles: the hardware numbers the lint's cost model reads.

A profile is one TOML file in ``l2sched/data/devices/`` (adding a device is
adding a file; ``docs/devices.md`` describes the format). Every number carries
its source in a comment next to it; numbers nobody measured are marked
``ASSUMPTION``. Units: bytes (B), GB/s = 10^9 B/s (so ``GB/s * 1e3`` is bytes
per microsecond), microseconds (us).

``load_device(name_or_path)`` reads and validates a profile and raises
``L2sInputError`` naming the file and the key on any problem;
``device_names()`` lists the shipped profiles.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]

from l2sched.errors import (
    Diagnostic,
    L2sInputError,
    Span,
    closest,
    source_lines,
    suggest,
)
from l2sched.files import read_input_text

#: Where the shipped profiles live (package data of ``l2sched.data.devices``).
DEVICES_DIR = Path(__file__).resolve().parent.parent / "data" / "devices"


@dataclass(frozen=True)
class AllReduceModel:
    """All-reduce time at one TP degree: ``latency_us + bytes / bandwidth``,
    with ``busbw_gbps`` in GB/s (10^9 B/s): an effective per-message rate
    (message bytes / time), not NCCL's ``2(n-1)/n``-scaled bus bandwidth.
    ``measured``: ISO date (``YYYY-MM-DD``) of the measurement the numbers
    were fitted to, ``""`` for an ASSUMPTION; ``source``: where they come
    from (a result file)."""

    latency_us: float
    busbw_gbps: float
    measured: str = ""
    source: str = ""

    def time_us(self, nbytes: int) -> float:
        """Predicted all-reduce time (us) of a ``nbytes``-byte message."""
        return self.latency_us + nbytes / (self.busbw_gbps * 1e3)


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU's cost-model numbers (see ``docs/devices.md``).

    Bytes: ``l2_bytes``, ``set_aside_max_bytes``,
    ``evict_last_protected_bytes`` (evict_last bytes that survive a stream
    without a set-aside). Fractions: ``evict_normal_survival``,
    ``fill_effect`` (the share of the cold-to-L2-hot time difference that a
    consumer gains from bytes a fill made resident; 1 = as fast as a hot
    re-read, measured by effect per device and fill kernel). Bandwidths in
    GB/s: ``dram_read_gbps`` (device-memory ceiling shared by all concurrent
    reads), ``gemm_dram_gbps``/``gemm_l2_gbps`` (an M<=256 GEMM reading its
    weight from device memory / from L2), ``fill_gbps`` (bulk-prefetch fill).
    Times in us: ``gemm_fixed_us``, ``fill_launch_us``, ``kernel_gap_us``,
    ``small_kernel_us``, ``attention_core_us``. ``allreduce`` maps a TP
    degree to its ``AllReduceModel``. ``compute_capability``: ``(major,
    minor)`` of the GPU the profile describes, ``None`` when not given."""

    name: str
    description: str
    path: str
    l2_bytes: int
    set_aside_max_bytes: int
    evict_last_protected_bytes: int
    evict_normal_survival: float
    fill_effect: float
    dram_read_gbps: float
    gemm_dram_gbps: float
    gemm_l2_gbps: float
    gemm_fixed_us: float
    fill_gbps: float
    fill_launch_us: float
    kernel_gap_us: float
    small_kernel_us: float
    attention_core_us: float
    allreduce: Mapping[int, AllReduceModel] = field(default_factory=dict)
    compute_capability: tuple[int, int] | None = None

    def allreduce_us(self, tp: int, nbytes: int) -> float:
        """All-reduce time (us) at TP degree ``tp`` for ``nbytes`` bytes; 0 at
        TP 1. A degree missing from the profile uses the nearest larger one
        (else the largest), so the estimate errs slow."""
        if tp <= 1 or not self.allreduce:
            return 0.0
        degrees = sorted(self.allreduce)
        pick = next((d for d in degrees if d >= tp), degrees[-1])
        return self.allreduce[pick].time_us(nbytes)

    def protected_bytes(self, set_aside: int, policy: str) -> int:
        """Bytes of filled lines that survive streaming traffic: the
        persisting set-aside when one is reserved (``set_aside`` bytes, -1 =
        the device maximum), else the profile's measured no-set-aside figure;
        0 for policies other than ``evict_last``."""
        if policy != "evict_last":
            return 0
        if set_aside < 0:
            return self.set_aside_max_bytes
        if set_aside > 0:
            return min(set_aside, self.set_aside_max_bytes)
        return self.evict_last_protected_bytes


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
_TOP_KEYS = ("name", "description", "compute_capability", "l2", "bandwidth",
             "latency", "allreduce")


def device_names() -> list[str]:
    """Names of the shipped profiles (``l2sched/data/devices/*.toml``)."""
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


def profile_path(name_or_path: str | os.PathLike) -> Path:
    """The file of a profile given by shipped name or by path. Raises
    ``L2sInputError`` for an unknown name (with a suggestion)."""
    text = os.fspath(name_or_path)
    if text.endswith(".toml") or os.sep in text:
        return Path(text)
    path = DEVICES_DIR / f"{text}.toml"
    if not path.exists():
        raise L2sInputError(f"unknown device profile '{text}'"
                            f"{suggest(text, device_names())} (shipped: "
                            f"{', '.join(device_names())})")
    return path


_HEADER_RE = re.compile(r"\s*\[\s*([^\]\s]+)\s*\]")


def _key_span(path: str, text: str, section: str, key: str) -> Span | None:
    """Span of ``key`` inside ``[section]`` of the TOML text (of the
    ``[section]`` header itself when ``key`` is empty), if found."""
    current = ""
    for i, line in enumerate(source_lines(text), 1):
        s = line.strip()
        if s.startswith("["):
            m = _HEADER_RE.match(line)
            current = m.group(1) if m else s.strip("[]").strip()
            if not key and current == section:
                col = line.index("[") + 1
                return Span(path, i, col, i, col + len(s.split("#")[0].rstrip()))
            continue
        if key and current == section and s.split("=")[0].strip() == key:
            col = line.index(key) + 1
            return Span(path, i, col, i, col + len(key))
    return None


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
    shown = str(path)
    text = read_profile_text(path)
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
    return parse_device(raw, shown, text)


class _Problems:
    """The diagnostics of one profile file: ``bad(section, key, msg)``
    records one at the key's line (``section.key: msg``)."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text
        self.lines = source_lines(text)
        self.found: list[Diagnostic] = []

    def bad(self, section: str, key: str, msg: str) -> None:
        span = _key_span(self.path, self.text, section, key) if self.text else None
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
    ar = _parse_allreduce(raw.get("allreduce"), problems)
    if problems.found:
        raise L2sInputError(problems.found)
    return DeviceProfile(path=path, allreduce=ar, **values)


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
        known = [k for s_, k in _FIELDS if s_ == section]
        for key in sec:
            if key not in known:
                bad(section, key, f"unknown key{suggest(key, known)} "
                                  f"(keys: {', '.join(known)})")


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
    import datetime
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10
