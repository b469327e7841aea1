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

from .errors import Diagnostic, L2sInputError, Span, source_lines, suggest

DEVICES_DIR = Path(__file__).resolve().parent / "data" / "devices"


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
    degree to its ``AllReduceModel``."""

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


def _read_profile_text(path: Path) -> str:
    """The profile's text without a leading byte-order mark (TOML would
    reject it as a bare "Invalid statement"); ``L2sInputError`` naming the
    file as ``files.read_input_text`` raises it."""
    from .files import read_input_text
    return read_input_text(path, "device profile").removeprefix("\ufeff")


def load_device(name_or_path: str | os.PathLike) -> DeviceProfile:
    """Read and validate a device profile (shipped name or ``.toml`` path).

    Raises ``L2sInputError`` naming the file and the ``section.key`` of every
    missing, mistyped or out-of-range value (all of them in one error)."""
    path = profile_path(name_or_path)
    shown = str(path)
    text = _read_profile_text(path)
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
        raise L2sInputError(f"{shown}: not valid TOML: {e}") from None
    except ValueError as e:  # an integer literal of thousands of digits
        raise L2sInputError(f"{shown}: not valid TOML: {str(e).split(';')[0]}") from None
    return parse_device(raw, shown, text)


def parse_device(raw: Mapping[str, Any], path: str = "<profile>",
                 text: str = "") -> DeviceProfile:
    """Validate a parsed profile dict (see ``load_device``)."""
    problems: list[Diagnostic] = []
    lines = source_lines(text)

    def bad(section: str, key: str, msg: str) -> None:
        span = _key_span(path, text, section, key) if text else None
        where = ".".join(p for p in (section, key) if p)
        line = lines[span.line - 1] if span and span.line <= len(lines) else None
        # A span already names the file (FILE:line:col: ...); without one
        # the message does.
        prefix = "" if span else f"{path}: "
        problems.append(Diagnostic(f"{prefix}{where}: {msg}", span,
                                   source_line=line))

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def in_range(section: str, key: str, v: Any, low: float, high: float,
                 unit: str) -> bool:
        """True when ``v`` (a number) is finite and in ``low..high``; else
        report it at the key."""
        if isinstance(v, float) and not math.isfinite(v):
            bad(section, key, f"must be a finite number, got {v}")
            return False
        if low > 0 and v <= 0:
            bad(section, key, f"must be > 0, got {v}")
            return False
        if low == 0 and v < 0:
            bad(section, key, f"must be >= 0, got {v}")
            return False
        if not low <= v <= high:
            u = f" {unit}" if unit else ""
            bad(section, key, f"must be in {low:g}..{high:g}{u}, got {v:g}")
            return False
        return True

    values: dict[str, Any] = {}
    for key in ("name", "description"):
        v = raw.get(key)
        if not isinstance(v, str) or not v:
            bad("", key, "missing or not a non-empty string")
        values[key] = v
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
    for (section, key), (attr, typ, low, high, unit) in _FIELDS.items():
        sec = raw.get(section)
        if not isinstance(sec, dict) or key not in sec:
            bad(section, key, f"missing ({'integer' if typ is int else 'number'})")
            continue
        v = sec[key]
        ok = isinstance(v, int) if typ is int else isinstance(v, (int, float))
        if not ok or isinstance(v, bool):
            bad(section, key, f"expected {'an integer' if typ is int else 'a number'}, "
                              f"got {v!r}")
            continue
        if not in_range(section, key, v, low, high, unit):
            continue
        values[attr] = typ(v)
    l2, aside = values.get("l2_bytes"), values.get("set_aside_max_bytes")
    if l2 is not None and aside is not None and aside > l2:
        bad("l2", "set_aside_max_bytes", f"must not exceed l2.bytes ({l2}), "
                                         f"got {aside}")
    ar: dict[int, AllReduceModel] = {}
    sec = raw.get("allreduce")
    if not isinstance(sec, dict):
        bad("allreduce", "", "missing section [allreduce] with [allreduce.tpN] tables")
    else:
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
            table = f"allreduce.{k}"
            # (int() of a few thousand digits raises ValueError)
            degree = int(k[2:]) if len(k) <= 8 else MAX_TP_DEGREE + 1
            if not 1 <= degree <= MAX_TP_DEGREE:
                bad(table, "", f"TP degree must be in 1..{MAX_TP_DEGREE}, got "
                    f"{k[2:] if len(k) <= 24 else k[2:22] + '...'}")
                continue
            unknown = [key for key in v if key not in _ALLREDUCE_KEYS]
            for key in unknown:
                bad(table, key, f"unknown key{suggest(key, _ALLREDUCE_KEYS)} "
                                f"(keys: {', '.join(_ALLREDUCE_KEYS)})")
            if unknown:
                continue
            missing = [key for key in ("latency_us", "busbw_gbps") if key not in v]
            if missing:
                bad(table, "" if len(missing) > 1 else missing[0],
                    "needs numbers latency_us and busbw_gbps")
                continue
            ok = True
            for key, (low, high, unit) in _ALLREDUCE_RANGES.items():
                if not number(v[key]):
                    bad(table, key, f"expected a number, got {v[key]!r}")
                    ok = False
                elif not in_range(table, key, v[key], low, high, unit):
                    ok = False
            if not ok:
                continue
            lat, bw = float(v["latency_us"]), float(v["busbw_gbps"])
            when, src = v.get("measured", ""), v.get("source", "")
            if not isinstance(when, str) or (when and not _is_iso_date(when)):
                bad(table, "measured", f"expected a date string "
                    f"YYYY-MM-DD, got {when!r}")
                continue
            if not isinstance(src, str):
                bad(table, "source", f"expected a string, got {src!r}")
                continue
            ar[degree] = AllReduceModel(lat, bw, when, src)
        if not tables:
            bad("allreduce", "", "needs at least one [allreduce.tpN] table "
                "(e.g. [allreduce.tp4] with latency_us and busbw_gbps)")
    if problems:
        raise L2sInputError(problems)
    return DeviceProfile(path=path, allreduce=ar, **values)


def _is_iso_date(text: str) -> bool:
    import datetime
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


# ---------------------------------------------------------------------------
# Measured collective model


def fit_allreduce(points, *, measured: str = "", source: str = "") -> AllReduceModel:
    """Fit ``time_us = latency_us + bytes / (busbw_gbps * 1e3)`` to measured
    all-reduce times.

    ``points``: ``(bytes, us)`` pairs (message bytes, measured time in us;
    at least two distinct sizes). The fit is least squares on the relative
    error (each point weighted by ``1 / us^2``), so 8 KB and 2 MB messages
    count alike. A negative intercept is refitted through the origin
    (latency 0). ``measured``/``source`` are copied into the result.
    Raises ``ValueError`` for fewer than two distinct sizes, a non-positive
    time or a fit without a positive bandwidth (time not growing with
    bytes)."""
    pts = [(float(b), float(t)) for b, t in points]
    if len({b for b, _ in pts}) < 2:
        raise ValueError("fit_allreduce needs measurements at two or more "
                         "message sizes")
    if any(t <= 0 or b < 0 for b, t in pts):
        raise ValueError("fit_allreduce: times must be > 0 us and bytes >= 0")
    w = [1.0 / (t * t) for _, t in pts]
    sw = sum(w)
    sx = sum(wi * b for wi, (b, _) in zip(w, pts))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts))
    sxx = sum(wi * b * b for wi, (b, _) in zip(w, pts))
    sxy = sum(wi * b * t for wi, (b, t) in zip(w, pts))
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det
    lat = (sy - slope * sx) / sw
    if lat < 0:
        lat, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError("fit_allreduce: the measured time does not grow with "
                         "the message size; no bandwidth can be fitted")
    return AllReduceModel(lat, 1.0 / (slope * 1e3), measured, source)


def allreduce_table(degree: int, model: AllReduceModel,
                    comments: tuple[str, ...] = ()) -> str:
    """The TOML text of ``[allreduce.tpDEGREE]`` for ``model`` (numbers
    rounded to 0.01 us / 0.1 GB/s), ``comments`` as ``#`` lines under the
    header."""
    lines = [f"[allreduce.tp{degree}]"] + [f"# {c}" for c in comments]
    lines += [f"latency_us = {model.latency_us:.2f}",
              f"busbw_gbps = {model.busbw_gbps:.1f}"]
    if model.measured:
        lines.append(f'measured = "{model.measured}"')
    if model.source:
        lines.append(f"source = {_toml_str(model.source)}")
    return "\n".join(lines) + "\n"


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_allreduce_model(name_or_path: str | os.PathLike, degree: int,
                          model: AllReduceModel,
                          comments: tuple[str, ...] = ()) -> Path:
    """Put ``model`` into the profile file as ``[allreduce.tpDEGREE]``:
    the existing table of that degree is replaced (its comment lines inside
    the table too; comments above the next table stay), or a new one is
    added after the last ``[allreduce.tpN]`` table. Other tables and
    comments are kept byte for byte. The new text is validated as a profile
    before it is written. Returns the path. Raises ``L2sInputError`` when
    the file cannot be read or the result does not load, ``ValueError`` for
    ``degree < 2``."""
    if degree < 2:
        raise ValueError(f"an all-reduce model needs a TP degree >= 2, got {degree}")
    path = profile_path(name_or_path)
    text = _read_profile_text(path)
    lines = text.splitlines(keepends=True)
    headers = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")]
    block = allreduce_table(degree, model, comments).splitlines(keepends=True)

    def table_end(h: int) -> int:
        """End of the table at line ``h``: the next header, less the blank
        and comment lines right above it (they belong to the next table)."""
        nxt = next((i for i in headers if i > h), len(lines))
        while nxt > h + 1 and (not lines[nxt - 1].strip()
                               or lines[nxt - 1].lstrip().startswith("#")):
            nxt -= 1
        return nxt

    want = f"[allreduce.tp{degree}]"
    here = next((i for i in headers if lines[i].strip() == want), None)
    if here is not None:
        lines[here:table_end(here)] = block
    else:
        ars = [i for i in headers if lines[i].strip().startswith("[allreduce.tp")]
        at = table_end(ars[-1]) if ars else len(lines)
        if at and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        lines[at:at] = block
    new = "".join(lines)
    try:
        parse_device(_toml.loads(new), str(path), new)
    except _toml.TOMLDecodeError as e:  # pragma: no cover - we wrote valid TOML
        raise L2sInputError(f"{path}: the updated profile is not valid TOML: {e}") from None
    path.write_text(new, encoding="utf-8")
    return path
