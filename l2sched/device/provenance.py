"""Where every number of a device profile came from: measured on the box the
profile describes, kept from a named base profile, an estimate with a
source, or a conservative stand-in (``FieldOrigin``), one per field
(``profile_fields``), written in the profile's ``[origin]`` table
(``docs/devices.md``, "Where every number came from").

A profile without an ``[origin]`` table (every profile written before it
existed) still reads: ``field_origins`` derives each field's origin from
what such a file says. An estimate profile (no ``[provenance]``) is an
estimate throughout; for a profile ``l2sched profile`` measured, a field in
``[measured]`` is measured (its probe, the run's date and any p10/p90), one
named in ``provenance.kept_from_base`` is kept from ``base_profile``, an
``[allreduce.tpN]`` table with a ``measured`` date is measured, a
``fill.MODE.allreduce_slowdown`` is measured only when some all-reduce table
was (``--collectives`` writes both) and is *not measured* when absent (its
default 0 is no measurement), ``latency.fill_fork_us`` is *not measured*
when absent (0 us per forked fill is the reader's default, not a
measurement), and the other fields were measured by the run's probes (the
old writer listed every other field as kept).

``unmeasured_terms(device_profile, tp)`` names the terms a decision at TP
degree ``tp`` rests on that were not measured on the box (what ``l2sched
fit``, ``l2sched lint`` and the vLLM plugin report);
``allreduce_slowdown_unmeasured`` is the one ``fit`` refuses to write
windows on at TP > 1. ``CONSERVATIVE`` holds the values ``l2sched profile``
writes for a field it cannot measure when its base describes another GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

#: Kinds of origin: ``measured`` (on the GPU the profile describes, by a
#: probe or a calibration run), ``base`` (copied from the profile named in
#: ``base``), ``estimate`` (from a published or assumed number, ``source``),
#: ``conservative`` (a pessimistic stand-in for a number nobody measured,
#: ``source`` says why), ``default`` (not written; the reader's default).
KINDS = ("measured", "base", "estimate", "conservative", "default")
#: Keys of one ``[origin]`` entry and what each must be.
ORIGIN_KEYS = ("kind", "probe", "date", "p10", "p90", "repeats", "base", "base_kind",
               "source")

#: Pessimistic values (for a prefetch schedule) of the numbers no probe of
#: ``l2sched profile`` measures, used in place of the base's when the base
#: profile describes another GPU (``l2sched profile --base``): ``key ->
#: (how, value, why)``; ``how`` is ``set`` (this value), ``scale`` (the
#: base's times it) or ``at_least`` (the larger of the base's and it).
#: ASSUMPTIONS, each chosen beyond the worst the H200 measured.
CONSERVATIVE: dict[str, tuple[str, float, str]] = {
    "fill.MODE.allreduce_slowdown": (
        "at_least", 3.0, "above the largest fill-vs-all-reduce slowdown measured (load "
        "2.673 on 2 H200s with NCCL, benchmarks/results/h200x2-2026-12-01-profile-"
        "collectives.md); run `l2sched profile --collectives N` on this box"),
    "allreduce.latency_us": (
        "scale", 0.5, "half the base's all-reduce latency: a shorter all-reduce leaves a "
        "fill less idle time"),
    "allreduce.busbw_gbps": (
        "scale", 2.0, "twice the base's bus bandwidth: a faster all-reduce leaves a fill "
        "less idle time"),
    "latency.small_kernel_us": (
        "scale", 0.75, "0.75 x the base's: shorter stand-in kernels leave a fill less "
        "idle time"),
    "latency.attention_core_us": (
        "scale", 0.75, "0.75 x the base's: a shorter attention core leaves a fill less "
        "idle time"),
    "latency.fill_slowdown_scale": (
        "at_least", 1.5, "at least 1.5 (the base's calibration is of another GPU; the "
        "H200's ranged 1 to 4.5, docs/lint.md#validation)"),
    "l2.set_aside_stream_slowdown": (
        "at_least", 0.5, "at least 0.5 (the H200's probe measured 0.156)"),
    "latency.fill_fork_us": (
        "at_least", 7.0, "at least 7 us per fill at every M (a lone window cost the H200's "
        "captured step at most 6.7 us per fill: window A at M=16, "
        "benchmarks/results/h200-2026-12-01-diag-fork.md runs 1 and 3); run `l2sched "
        "profile` without --quick at --tp 4 on this box"),
    "l2.evict_last_protected_bytes": (
        "scale", 0.5, "half the base's: fewer protected bytes survive the expert stream"),
    "l2.evict_normal_survival": ("set", 0.0, "nothing survives a stream"),
    "fill.MODE.effect": ("scale", 0.5, "half the base's landed fraction"),
    "fill.MODE.landed": ("scale", 0.5, "half the base's landed fractions"),
    "fill.MODE.slowdown": ("at_least", 2.5, "above the largest measured (load 2.343 on "
                           "the H200)"),
    "fill.MODE.gemm_slowdown": ("at_least", 0.5, "above the largest measured (copy "
                                "0.448 on the H200)"),
    "fill.MODE.attention_slowdown": ("at_least", 2.5, "as fill.MODE.slowdown: no probe "
                                     "of the attention-core class has run"),
    "fill.MODE.routing_slowdown": ("at_least", 2.5, "as fill.MODE.slowdown: no probe of "
                                   "the routing class has run"),
}


@dataclass(frozen=True)
class FieldOrigin:
    """The origin of one profile field ``key`` (``l2.bytes``,
    ``fill.copy.allreduce_slowdown``, ``allreduce.tp4``, ``ops.glm5next``):
    ``kind`` (``KINDS``), the ``probe`` and ``date`` of a measurement, its
    run-to-run spread as ``p10``/``p90`` (in the field's unit) or
    ``repeats`` (the values of repeated runs), the ``base`` profile a kept
    field came from and what it was there (``base_kind``), and the
    ``source`` of an estimate or a conservative value."""

    key: str
    kind: str
    probe: str = ""
    date: str = ""
    p10: float | None = None
    p90: float | None = None
    repeats: tuple[float, ...] = ()
    base: str = ""
    base_kind: str = ""
    source: str = ""

    @property
    def measured(self) -> bool:
        """True when the number was measured on the GPU the profile describes."""
        return self.kind == "measured"

    def spread(self) -> tuple[float, float] | None:
        """``(low, high)`` of the recorded run-to-run spread (p10/p90 and
        the repeats together), or None without one."""
        vals = [v for v in (self.p10, self.p90) if v is not None] + list(self.repeats)
        return (min(vals), max(vals)) if len(vals) >= 2 else None

    def describe(self) -> str:
        """``measured (fill probe, 2026-12-01)``, ``kept from h200 (estimate
        there)``, ``estimate (SOURCE)``, ``conservative (WHY)``, ``not
        measured (default)``."""
        if self.kind == "measured":
            what = ", ".join(x for x in (self.probe, self.date) if x)
            return f"measured ({what})" if what else "measured"
        if self.kind == "base":
            there = f" ({self.base_kind} there)" if self.base_kind else ""
            return f"kept from {self.base or 'the base profile'}{there}"
        if self.kind == "default":
            return "not measured (the default)"
        return f"{self.kind} ({self.source})" if self.source else self.kind

    def short(self) -> str:
        """One or two words: ``measured``, ``kept from h200-estimate``,
        ``estimate``, ``conservative``, ``not measured``."""
        if self.kind == "base":
            return f"kept from {(self.base or 'the base').split()[0]}"
        return {"default": "not measured"}.get(self.kind, self.kind)

    def toml_entry(self) -> dict[str, Any]:
        """The ``[origin]`` entry's keys (empty ones left out)."""
        out: dict[str, Any] = {"kind": self.kind}
        for k in ("probe", "date", "p10", "p90", "base", "base_kind", "source"):
            v = getattr(self, k)
            if v not in ("", None):
                out[k] = v
        if self.repeats:
            out["repeats"] = list(self.repeats)
        return out


def origin_from_entry(key: str, entry: Mapping[str, Any]) -> FieldOrigin:
    """A ``FieldOrigin`` from one checked ``[origin]`` entry."""
    return FieldOrigin(key, entry["kind"], str(entry.get("probe", "")),
                       str(entry.get("date", "")), _opt(entry.get("p10")),
                       _opt(entry.get("p90")),
                       tuple(float(x) for x in entry.get("repeats", ())),
                       str(entry.get("base", "")), str(entry.get("base_kind", "")),
                       str(entry.get("source", "")))


def _opt(v) -> float | None:
    return None if v is None else float(v)


def check_origin_entry(entry: Any) -> list[tuple[str, str]]:
    """What is wrong with one ``[origin]`` entry: ``[(key inside it or "",
    message)]``; empty when it is fine."""
    if not isinstance(entry, dict):
        return [("", "expected an inline table {kind = \"measured\" | \"base\" | "
                     "\"estimate\" | \"conservative\", ...}")]
    out = [(k, f"unknown key {k!r} (keys: {', '.join(ORIGIN_KEYS)})")
           for k in entry if k not in ORIGIN_KEYS]
    kind = entry.get("kind")
    if kind not in KINDS:
        out.append(("kind" if "kind" in entry else "",
                    f"kind must be one of {', '.join(KINDS)}, got {kind!r}"))
    for k in ("probe", "date", "base", "base_kind", "source"):
        if k in entry and not isinstance(entry[k], str):
            out.append((k, f"{k}: expected a string, got {entry[k]!r:.40}"))
    for k in ("p10", "p90"):
        v = entry.get(k)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
            out.append((k, f"{k}: expected a number, got {v!r:.40}"))
    reps = entry.get("repeats")
    if reps is not None and not (isinstance(reps, list) and reps and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in reps)):
        out.append(("repeats", "repeats: expected a non-empty list of numbers (one value "
                    "per repeated run)"))
    if kind == "base" and not entry.get("base"):
        out.append(("kind", "a kept field names its base profile (base = \"NAME\")"))
    if kind in ("estimate", "conservative") and not entry.get("source"):
        out.append(("kind", f"an {kind} names its source (source = \"...\")"))
    return out


def profile_fields(device_profile) -> list[str]:
    """Every field of ``device_profile`` the cost model or the kernel
    choice reads, as ``[origin]`` names them: ``section.key``,
    ``fill.MODE.key``, ``allreduce.tpN`` (a whole table) and
    ``ops.MODEL`` (a model's op tables)."""
    out = [f"gpu.{k}" for k in ("sm_count", "smem_per_block_optin_bytes")
           if getattr(device_profile, k) is not None]
    out += ["l2.bytes", "l2.set_aside_max_bytes", "l2.evict_last_protected_bytes",
            "l2.evict_normal_survival", "l2.fill_effect"]
    if device_profile.effective_l2_bytes:
        out.append("l2.effective_bytes")
    out.append("l2.set_aside_stream_slowdown")
    out += [f"bandwidth.{k}" for k in ("dram_read_gbps", "gemm_dram_gbps", "gemm_l2_gbps",
                                       "gemm_fixed_us", "fill_gbps", "fill_launch_us")]
    out += [f"latency.{k}" for k in ("kernel_gap_us", "small_kernel_us",
                                     "attention_core_us", "fill_slowdown_scale",
                                     "fill_fork_us")]
    for mode, fm in sorted(device_profile.fill_modes.items()):
        keys = ["gbps", "effect", "launch_us", "slowdown"]
        # a class term is a field where the profile writes it; absent, the
        # class takes ``slowdown`` (FillMode.class_slowdown), that field's origin
        keys += [k for k in ("gemm_slowdown", "attention_slowdown", "routing_slowdown")
                 if getattr(fm, k) is not None]
        keys += ["landed"] if fm.landed else []
        out += [f"fill.{mode}.{k}" for k in keys + ["allreduce_slowdown"]]
    out += [f"allreduce.tp{d}" for d in sorted(device_profile.allreduce)]
    out += [f"ops.{m}" for m in sorted(device_profile.ops)]
    return out


def generic_key(key: str) -> str:
    """``fill.copy.effect`` -> ``fill.MODE.effect``; other keys as given."""
    parts = key.split(".")
    if parts[0] == "fill" and len(parts) == 3:
        return f"fill.MODE.{parts[2]}"
    return key


def _kept(key: str, kept: list[str]) -> bool:
    """Whether ``provenance.kept_from_base`` names ``key`` (or a table
    holding it: ``allreduce`` holds ``allreduce.tp4``)."""
    return any(key == k or key.startswith(k + ".") for k in kept)


def _derived_origin(device_profile, key: str) -> FieldOrigin:
    """The origin of ``key`` in a profile without an ``[origin]`` entry for
    it (see the module docstring)."""
    if key.endswith(".allreduce_slowdown"):
        fm = device_profile.fill_modes.get(key.split(".")[1])
        if fm is None or not fm.allreduce_slowdown:
            return FieldOrigin(key, "default", source="no fill-vs-all-reduce measurement "
                               "(0 is the reader's default)")
    if key == "latency.fill_fork_us" and not device_profile.fill_fork_us:
        return FieldOrigin(key, "default", source="no fork-cost measurement (0 us per "
                           "fill is the reader's default)")
    if not device_profile.is_measured:
        return FieldOrigin(key, "estimate", source="the profile's comments (an estimate "
                           "profile: no [provenance])")
    prov = device_profile.provenance
    date, base = str(prov.get("date", "")), str(prov.get("base_profile", ""))
    rec = device_profile.measured.get(key) or {}
    if rec:
        return FieldOrigin(key, "measured", str(rec.get("probe", "")), date,
                           _opt(rec.get("p10")), _opt(rec.get("p90")))
    if key.endswith(".allreduce_slowdown"):
        runs = [m for m in device_profile.allreduce.values() if m.measured]
        if runs:
            return FieldOrigin(key, "measured", "l2sched bench tp / profile --collectives",
                               runs[0].measured, source=runs[0].source)
        return FieldOrigin(key, "estimate", source="written without a record of its "
                           "measurement")
    if key.startswith("allreduce.tp"):
        m = device_profile.allreduce.get(int(key[len("allreduce.tp"):]))
        if m is not None and m.measured:
            return FieldOrigin(key, "measured", "l2sched bench tp (all-reduce curve fit)",
                               m.measured, source=m.source)
    if _kept(key, list(prov.get("kept_from_base", ()))):
        return FieldOrigin(key, "base", base=base or "the base profile")
    if key == "latency.fill_slowdown_scale" and device_profile.fill_slowdown_scale == 1.0:
        return FieldOrigin(key, "default", source="1 (the reader's default)")
    if key == "l2.set_aside_stream_slowdown" and not device_profile.set_aside_stream_slowdown:
        return FieldOrigin(key, "default", source="0 (the reader's default)")
    return FieldOrigin(key, "measured", "l2sched profile (no per-field record)", date)


def field_origins(device_profile) -> dict[str, FieldOrigin]:
    """``key -> FieldOrigin`` for every field of ``profile_fields``: the
    profile's ``[origin]`` entry where it has one, else derived from what
    an older file says (module docstring)."""
    given = getattr(device_profile, "origins", {}) or {}
    return {k: given.get(k) or _derived_origin(device_profile, k)
            for k in profile_fields(device_profile)}


def _used_degree(device_profile, tp: int) -> int | None:
    """The ``[allreduce.tpN]`` degree the model uses at ``tp``
    (``DeviceProfile.allreduce_us``: the nearest larger, else the largest)."""
    degrees = sorted(device_profile.allreduce)
    if tp <= 1 or not degrees:
        return None
    return next((d for d in degrees if d >= tp), degrees[-1])


def relevant(device_profile, key: str, tp: int, modes=None) -> bool:
    """Whether a decision at TP degree ``tp`` with fill kernels ``modes``
    (None = every kernel of the profile) rests on field ``key``: the
    all-reduce terms only at TP > 1 (one ``[allreduce.tpN]`` table, the one
    used at ``tp``), a fill kernel's numbers only for those kernels."""
    parts = key.split(".")
    if parts[0] == "fill" and len(parts) == 3:
        if modes is not None and parts[1] not in modes:
            return False
        return parts[2] != "allreduce_slowdown" or tp > 1
    if parts[0] == "allreduce":
        return key == f"allreduce.tp{_used_degree(device_profile, tp)}"
    return True


def unmeasured_terms(device_profile, tp: int, modes=None,
                     capture_launch: str | None = None) -> list[str]:
    """The fields a decision at TP degree ``tp`` (fill kernels ``modes``,
    None = all the profile has) rests on that were not measured on the GPU
    the profile describes, in ``profile_fields`` order, each as ``KEY
    (ORIGIN)`` (``fill.copy.allreduce_slowdown (not measured)``,
    ``latency.small_kernel_us (kept from h200-estimate)``; ``field_origins``
    has the whole record). Empty when every one was measured. For the vLLM
    plugin, ``l2sched fit`` and ``l2sched lint``.

    ``capture_launch``: how the fills will enter the captured step
    (``runtime.capture_nodes.CAPTURE_LAUNCHES``; None = not known). A fork cost
    (``latency.fill_fork_us``) measured with another capture launch
    (``fill_fork_launch``) is named first, as ``latency.fill_fork_us (measured with
    capture launch fork, not deferred)``: the cost differs by launch
    (``benchmarks/results/h200-2026-12-03-capture-launches/``)."""
    terms = [f"{k} ({o.short()})" for k, o in field_origins(device_profile).items()
             if not o.measured and relevant(device_profile, k, tp, modes)]
    measured_with = fill_fork_launch(device_profile)
    if capture_launch and measured_with and measured_with != capture_launch:
        terms.insert(0, f"latency.fill_fork_us (measured with capture launch {measured_with}, "
                        f"not {capture_launch})")
    return terms


def fill_fork_launch(device_profile) -> str | None:
    """The capture launch the profile's measured fork cost
    (``latency.fill_fork_us``) was measured with, from its ``[measured]``
    record (``l2sched profile``'s ``fill_fork`` probe); None when the term is
    absent or the record names none."""
    if not getattr(device_profile, "fill_fork_us", None):
        return None
    rec = (getattr(device_profile, "measured", None) or {}).get("latency.fill_fork_us")
    launch = rec.get("capture_launch") if isinstance(rec, dict) else None
    return launch if isinstance(launch, str) and launch else None


def allreduce_slowdown_unmeasured(device_profile, tp: int, modes=None) -> list[str]:
    """The ``fill.MODE.allreduce_slowdown`` terms (of ``modes``, None = all)
    not measured on the box, as ``unmeasured_terms`` writes them; empty at
    TP 1 (no all-reduce)."""
    if tp <= 1:
        return []
    return [t for t in unmeasured_terms(device_profile, tp, modes)
            if t.split(" ")[0].endswith(".allreduce_slowdown")]


def conservative_value(key: str, base_value: Any) -> tuple[Any, str] | None:
    """``(value, why)`` of ``CONSERVATIVE`` for field ``key`` given the
    base's value (a number, a list of numbers such as one per token count,
    each taken alike, or ``landed`` points); None when the field has
    no conservative rule (its base value is kept, named as kept)."""
    rule = CONSERVATIVE.get(generic_key(key))
    if rule is None:
        return None
    how, x, why = rule
    if key.endswith(".landed"):
        return [[mb, round(f * x, 3)] for mb, f in base_value], why
    if isinstance(base_value, (list, tuple)):  # a value per token count, each alike
        return [_conservative(how, x, v) for v in base_value], why
    return _conservative(how, x, base_value), why


def _conservative(how: str, x: float, base_value: Any) -> Any:
    """One number's conservative value by rule ``how`` with ``x``
    (``CONSERVATIVE``) from the base's ``base_value``."""
    if how == "set":
        return x
    if how == "scale":
        v = base_value * x
        return int(v) if isinstance(base_value, int) else round(v, 4)
    return max(float(base_value or 0.0), x)


@dataclass
class Origins:
    """The origins ``l2sched profile`` collects while it derives a profile:
    ``add(key, FieldOrigin kind, ...)`` one field at a time."""

    entries: dict[str, FieldOrigin] = field(default_factory=dict)

    def add(self, key: str, kind: str, **kw) -> None:
        """Record field ``key``'s origin (``FieldOrigin``'s fields)."""
        self.entries[key] = FieldOrigin(key, kind, **kw)
