"""Semantic stage: parsed files -> one resolved ``Schedule``.

Resolves ``extends`` chains (relative to the extending file, then among the
shipped schedules), merges settings and windows, applies ``set`` lines and the
CLI's ``--set KEY=VALUE`` overrides (the same code path), converts sizes to
bytes, evaluates layer selectors against the model's layer kinds and checks
every name against the model adapter's hook catalogue and the device
profiles. All problems of a run are collected and raised together as one
``L2sSemanticError`` (or the first ``L2sSyntaxError``/``L2sInputError``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import nodes as n
from .adapters import adapter_names, get_adapter
from .errors import (
    DiagnosticSink,
    L2sError,
    L2sSemanticError,
    L2sSyntaxError,
    L2sUsageError,
    Span,
    suggest,
)
from .syntax import packaged_dir, parse, parse_fragment, read_source

#: Size units: decimal (10^3 powers) and binary (2^10 powers) multiples.
UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
}

#: L2 cache policies a fill may use (PTX ``createpolicy.fractional.L2::*``).
POLICIES = ("evict_last", "evict_normal", "evict_first")

#: ``set_aside max``: reserve the device's maximum persisting-L2 set-aside.
SET_ASIDE_MAX = -1

#: Default of ``max_tokens``: decode steps with more tokens are not
#: prefetched (prefetch-background.md: "Prefetch only in decode with <= 256
#: tokens").
DEFAULT_MAX_TOKENS = 256

#: Longest ``extends`` chain (files, the extending one included).
MAX_EXTENDS_DEPTH = 64

#: Largest budget or set-aside accepted: 1 TB (10^12 B), above the memory
#: of any device a schedule can target.
MAX_SIZE_BYTES = 10**12

_SETTING_KEYS = ("model", "device", "tp", "ep", "max_tokens", "policy", "set_aside")
_WINDOW_KEYS = ("budget", "at", "layers", "carry")
_SELECTOR_NAMES = ("all", "kda", "mla", "dense", "moe")


def device_profile_names() -> list[str]:
    """Names of the shipped device profiles (``l2sched/data/devices/*.toml``)."""
    d = Path(__file__).resolve().parent / "data" / "devices"
    return sorted(p.stem for p in d.glob("*.toml"))


def format_size(nbytes: int) -> str:
    """Human text for a byte count: ``52.56 MB (52,559,872 B)`` style,
    decimal MB (10^6 B), as used in every report. Exact for any int
    (integer arithmetic, halves rounded to even as ``format(float)`` did)."""
    if nbytes >= 10**6:
        return _fixed(nbytes, 10**6, 2) + " MB"
    if nbytes >= 10**3:
        return _fixed(nbytes, 10**3, 1) + " KB"
    return f"{nbytes} B"


def _fixed(value: int, unit: int, places: int) -> str:
    """``value / unit`` (``value`` >= 0) with ``places`` decimals, halves
    rounded to even."""
    scale = 10**places
    q, r = divmod(value * scale, unit)
    if 2 * r > unit or (2 * r == unit and q % 2):
        q += 1
    whole, frac = divmod(q, scale)
    return f"{whole}.{frac:0{places}d}"


@dataclass(frozen=True)
class Window:
    """A resolved window.

    ``budget`` in bytes; ``layers`` the sorted decoder-layer indices it fires
    in; ``carry`` the name of the later window that takes the bytes this
    budget could not; ``targets`` in fill order; ``index`` its declaration
    order in the merged schedule (base file first). ``spans`` maps ``name``,
    ``at``, ``budget``, ``layers``, ``carry`` to where each value was set
    (an override's value span when a ``set`` changed it)."""

    name: str
    hook: str
    budget: int
    layers: tuple[int, ...]
    carry: str | None
    targets: tuple[n.Target, ...]
    index: int
    span: Span
    spans: Mapping[str, Span] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Schedule:
    """A schedule after ``extends``, overrides and name resolution.

    ``tp`` is the tensor-parallel degree, ``ep`` expert parallelism on/off,
    ``max_tokens`` the largest decode step (tokens) that prefetches,
    ``policy`` one of ``POLICIES``, ``set_aside`` bytes of persisting L2 to
    reserve (0 = leave the driver limit alone, ``SET_ASIDE_MAX`` = device
    maximum). ``layer_kinds`` lists the model's decoder layers; ``files`` the
    extends chain, base first. ``spans`` maps each setting key to where its
    value was given; ``sources`` maps each file to its text (for carets)."""

    name: str
    path: str
    model: str
    device: str
    tp: int
    ep: bool
    max_tokens: int
    policy: str
    set_aside: int
    windows: tuple[Window, ...]
    layer_kinds: tuple
    files: tuple[str, ...]
    spans: Mapping[str, Span] = field(default_factory=dict, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False,
                                       repr=False)

    def window(self, name: str) -> Window:
        """The window called ``name``. Raises ``KeyError``."""
        for w in self.windows:
            if w.name == name:
                return w
        raise KeyError(name)


# --------------------------------------------------------------------------
# value conversion


def size_bytes(size: n.Size, sink: DiagnosticSink, what: str) -> int | None:
    """Bytes of ``size``, or ``None`` after recording an error (no unit,
    unknown unit, not a whole number of bytes)."""
    if not size.unit:
        sink.error(f"{what} {size.number} has no unit; write e.g. {size.number}MB "
                   f"(units: {', '.join(UNITS)})", size.span)
        return None
    if size.unit not in UNITS:
        hint = suggest(size.unit, UNITS) or f" (units: {', '.join(UNITS)})"
        sink.error(f"unknown size unit '{size.unit}'{hint}", size.span)
        return None
    value = Decimal(size.number) * UNITS[size.unit]
    if value != value.to_integral_value():
        sink.error(f"{what} {size.text} is not a whole number of bytes", size.span)
        return None
    if value > MAX_SIZE_BYTES:
        sink.error(f"{what} {size.text} is larger than any device memory (at most "
                   f"1 TB = 10^12 B)", size.span)
        return None
    return int(value)


def _whole(value: n.Scalar, sink: DiagnosticSink, key: str, minimum: int) -> int | None:
    if isinstance(value, n.Size) and not value.unit and "." not in value.number:
        number = int(value.number)
        if number >= minimum:
            return number
        sink.error(f"{key} must be at least {minimum}, got {number}", value.span)
        return None
    sink.error(f"{key} takes a whole number, got '{_text(value)}'", value.span)
    return None


def _text(value: n.Scalar) -> str:
    return value.text


def _choice(value: n.Scalar, sink: DiagnosticSink, key: str,
            choices: Sequence[str]) -> str | None:
    text = _text(value)
    if isinstance(value, n.Name) and text in choices:
        return text
    if isinstance(value, n.StringValue) and text in choices:
        sink.error(f"{key} takes a name, not a string: write {text} without quotes",
                   value.span)
        return None
    hint = suggest(text, choices) or f" (one of: {', '.join(choices)})"
    sink.error(f"unknown {key} '{text}'{hint}", value.span)
    return None


def _setting_value(key: str, value: n.Scalar, sink: DiagnosticSink):
    """Typed value of header setting ``key`` or ``None`` after an error."""
    if key == "model":
        return _choice(value, sink, "model adapter", adapter_names())
    if key == "device":
        return _choice(value, sink, "device profile", device_profile_names())
    if key == "tp":
        return _whole(value, sink, "tp", 1)
    if key == "max_tokens":
        return _whole(value, sink, "max_tokens", 1)
    if key == "ep":
        got = _choice(value, sink, "ep value", ("on", "off"))
        return None if got is None else got == "on"
    if key == "policy":
        return _choice(value, sink, "cache policy", POLICIES)
    if key == "set_aside":
        if isinstance(value, n.Name) and value.text == "max":
            return SET_ASIDE_MAX
        if isinstance(value, n.Size) and not value.unit and value.number == "0":
            return 0
        if isinstance(value, n.Size) and value.unit:
            return size_bytes(value, sink, "set_aside")
        sink.error(f"set_aside takes a size (e.g. 40MB), 'max', or 0 to leave the "
                   f"driver limit alone; got '{_text(value)}'", value.span)
        return None
    raise AssertionError(key)  # pragma: no cover


# --------------------------------------------------------------------------
# layer selectors


def select_layers(selector: n.Selector, kinds: Sequence, sink: DiagnosticSink
                  ) -> set[int]:
    """Evaluate ``selector`` over a model whose layer ``i`` has kind
    ``kinds[i]`` (``LayerKind``). Records errors for unknown names, indices
    out of ``0..len(kinds)-1`` and empty ranges; returns the selected indices."""
    count = len(kinds)

    def index(text: str, span: Span) -> int | None:
        i = int(text) if "." not in text else None
        if i is None:
            sink.error(f"layer index '{text}' must be a whole number", span)
            return None
        if i >= count:
            sink.error(f"layer {i} does not exist; the model has layers 0..{count - 1}",
                       span)
            return None
        return i

    def ev(node) -> set[int]:
        if isinstance(node, n.SelName):
            name = node.name
            if name == "all":
                return set(range(count))
            if name in ("kda", "mla"):
                return {i for i, k in enumerate(kinds) if k.attention == name}
            if name in ("dense", "moe"):
                return {i for i, k in enumerate(kinds) if k.mlp == name}
            hint = suggest(name, _SELECTOR_NAMES) or \
                f" (one of: {', '.join(_SELECTOR_NAMES)}, an index or a range)"
            sink.error(f"unknown layer selector '{name}'{hint}", node.span)
            return set()
        if isinstance(node, n.SelIndex):
            i = index(node.index, node.span)
            return set() if i is None else {i}
        if isinstance(node, n.SelRange):
            lo, hi = index(node.lo, node.span), index(node.hi, node.span)
            if lo is None or hi is None:
                return set()
            if lo > hi:
                sink.error(f"empty layer range {lo}..{hi} (ranges are lo..hi, inclusive)",
                           node.span)
            return set(range(lo, hi + 1))
        if isinstance(node, n.SelInter):
            sets = [ev(x) for x in node.items]
            return set.intersection(*sets)
        if isinstance(node, n.SelUnion):
            return set().union(*(ev(x) for x in node.items))
        if isinstance(node, n.Selector):
            inc = ev(node.include)
            return inc - ev(node.exclude) if node.exclude is not None else inc
        raise AssertionError(node)  # pragma: no cover

    return ev(selector)


def format_layers(layers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0..2, 5`` (the selector spelling)."""
    out, run = [], []
    for i in sorted(layers):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


# --------------------------------------------------------------------------
# loading


@dataclass
class _Draft:
    """Mutable merge of a file chain before validation."""

    settings: dict = field(default_factory=dict)  # key -> (value, span)
    windows: dict = field(default_factory=dict)  # name -> dict of fields
    files: list = field(default_factory=list)


def _resolve_extends(ref: n.StringValue, from_path: str) -> str:
    candidate = Path(from_path).parent / ref.text
    if candidate.exists() or os.path.isabs(ref.text):
        return str(candidate)
    shipped = packaged_dir("l2sched.schedules", "schedules") / ref.text
    return str(shipped) if shipped.exists() else str(candidate)


def _load_chain(path: str, sink: DiagnosticSink, seen: tuple[str, ...] = (),
                via: n.StringValue | None = None) -> list[n.ScheduleFile]:
    real = os.path.realpath(path) if "\0" not in path else path
    if real in seen:
        sink.error(f"extends cycle: {' -> '.join(seen + (real,))}",
                   via.span if via else None)
        return []
    if len(seen) >= MAX_EXTENDS_DEPTH:
        sink.error(f"extends chain deeper than {MAX_EXTENDS_DEPTH} files",
                   via.span if via else None)
        return []
    try:
        text = read_source(path)
    except L2sError as e:
        if via is not None:  # say where the missing base was named
            sink.error(f"cannot extend '{via.text}': "
                       f"{e.diagnostics[0].message} ({path})", via.span)
            return []
        raise
    sink.add_source(path, text)
    return _with_bases(parse(text, path), path, sink, seen + (real,))


def _with_bases(tree: n.ScheduleFile, path: str, sink: DiagnosticSink,
                seen: tuple[str, ...]) -> list[n.ScheduleFile]:
    """``tree`` preceded by its ``extends`` chain (base first); ``seen``
    holds the real paths already on the chain, ``tree``'s included."""
    if tree.extends is None:
        return [tree]
    if not tree.extends.text.strip():
        sink.error("extends needs a file name", tree.extends.span)
        return [tree]
    base = _resolve_extends(tree.extends, path)
    return _load_chain(base, sink, seen, tree.extends) + [tree]


def _merge(chain: list[n.ScheduleFile], sink: DiagnosticSink) -> tuple[_Draft, list]:
    draft = _Draft()
    overrides: list[n.Override] = []
    for tree in chain:
        draft.files.append(tree.path)
        seen_here: dict[str, Span] = {}
        for item in tree.items:
            if isinstance(item, n.Setting):
                key = item.key.text
                if key in seen_here:
                    sink.error(f"'{key}' is set twice in this file (first at "
                               f"{seen_here[key]})", item.key.span)
                    continue
                seen_here[key] = item.key.span
                draft.settings[key] = item.value
            elif isinstance(item, n.Window):
                name = item.name.text
                if name in draft.windows:
                    first = draft.windows[name]["span"]
                    extra = (" in the base schedule; change it with "
                             f"'set window.{name}.budget = ...' and friends"
                             if first.path != item.span.path else "")
                    sink.error(f"window '{name}' is already defined at {first}{extra}",
                               item.name.span)
                    continue
                for dup in item.duplicates:
                    sink.error(f"window '{name}' has a second '{_CLAUSE[dup.text]}' "
                               f"clause", dup.span)
                draft.windows[name] = {
                    "name": item.name, "hook": item.hook, "budget": item.budget,
                    "layers": item.layers, "carry": item.carry,
                    "targets": item.targets, "span": item.name.span,
                    "node": item,
                }
            else:
                overrides.append(item)
    return draft, overrides


_CLAUSE = {"hook": "at", "budget": "budget", "layers": "layers", "carry": "carry"}
_FIELD = {"at": "hook", "budget": "budget", "layers": "layers", "carry": "carry"}


def parse_override_arg(arg: str, index: int = 1) -> n.Override:
    """A CLI ``--set KEY=VALUE`` argument as an ``Override`` whose spans point
    into the argument (path ``--set #index``, line 1). Raises
    ``L2sSemanticError`` when there is no ``=``, ``L2sUsageError`` for a
    newline or other control character (it would split the value)."""
    path = f"--set #{index}"
    problem = check_override_arg(arg)
    if problem is not None:
        raise L2sUsageError(f"{path}: {problem}")
    key, eq, value = arg.partition("=")
    if not eq or not key.strip():
        sink = DiagnosticSink()
        sink.add_source(path, arg)
        sink.error("--set takes KEY=VALUE, e.g. --set window.B.budget=25MB",
                   Span(path, 1, 1, 1, len(arg) + 1))
        sink.raise_if_errors()
    kcol = len(key) - len(key.lstrip()) + 1
    vcol = len(key) + 2 + len(value) - len(value.lstrip())
    key, value = key.strip(), value.strip()
    return n.Override(
        n.Name(key, span=Span(path, 1, kcol, 1, kcol + len(key))), value,
        value_span=Span(path, 1, vcol, 1, vcol + max(len(value), 1)),
        span=Span(path, 1, 1, 1, len(arg) + 1))


def _is_control(ch: str) -> bool:
    """A control character (C0, DEL, C1) other than a tab."""
    return ch != "\t" and (ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0)


def override_control_message(ch: str) -> str:
    """The error text for a control character ``ch`` in a ``--set`` value."""
    what = {"\n": "a newline", "\r": "a carriage return"}.get(ch, "a control character")
    return (f"the value contains {what} (U+{ord(ch):04X}); give one KEY=VALUE "
            f"per --set")


def check_override_arg(arg: str) -> str | None:
    """The usage-error text for a ``--set`` argument that cannot be one
    line of a schedule (a newline or other control character), else None."""
    bad = next((c for c in arg if _is_control(c)), None)
    return None if bad is None else override_control_message(bad)


def _override_keys(draft: _Draft) -> list[str]:
    keys = list(_SETTING_KEYS)
    for name in draft.windows:
        keys += [f"window.{name}.{k}" for k in _WINDOW_KEYS]
    return keys


def _apply_override(ov: n.Override, draft: _Draft, sink: DiagnosticSink,
                    base_failed: bool = False) -> None:
    key = ov.key.text
    vs = ov.value_span

    def fragment(start: str):
        try:
            return parse_fragment(ov.value, start, vs.path, vs.line, vs.column)
        except L2sSyntaxError as e:
            for d in e.diagnostics:  # show the file's line, not the value's
                sink.add(dataclasses.replace(d, source_line=None))
            return None

    if key in _SETTING_KEYS:
        value = fragment("scalar_value")
        if value is not None:
            draft.settings[key] = value
        return
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "window" and parts[2] in _WINDOW_KEYS:
        _, wname, wkey = parts
        if wname not in draft.windows:
            if base_failed:  # the window may live in the missing base
                return
            sink.error(f"unknown window '{wname}'{suggest(wname, draft.windows)}",
                       ov.key.span)
            return
        win = draft.windows[wname]
        if wkey == "budget":
            value = fragment("size_value")
        elif wkey == "layers":
            value = fragment("selector_value")
        else:
            value = fragment("scalar_value")
            if value is not None and not isinstance(value, n.Name):
                sink.error(f"window.{wname}.{wkey} takes a name, got '{value.text}'",
                           value.span)
                return
            if wkey == "carry" and value is not None and value.text == "none":
                win["carry"] = None
                return
        if value is not None:
            win[_FIELD[wkey]] = value
        return
    sink.error(f"unknown setting '{key}'{suggest(key, _override_keys(draft))}",
               ov.key.span)


def _default_model_config(adapter) -> Mapping:
    loader: Callable | None = getattr(adapter, "default_config", None)
    return loader() if loader else {}


def resolve(chain: list[n.ScheduleFile], overrides: Sequence[n.Override] = (),
            model_config: Mapping | None = None,
            sink: DiagnosticSink | None = None) -> Schedule:
    """Merge an extends chain (base first), apply file ``set`` lines then
    ``overrides``, validate, and build the ``Schedule``.

    ``model_config`` is a HF text-config dict for the layer kinds (default:
    the adapter's embedded config). Raises ``L2sSemanticError`` with every
    problem found."""
    sink = sink or DiagnosticSink()
    top = chain[-1]
    draft, file_overrides = _merge(chain, sink)
    # A base that could not be loaded (its error is already reported) would
    # have given settings and windows: do not bury that error under one
    # "has no 'model' setting" per key or "unknown window" per set line.
    # (The chain stops at the file whose base failed, so that file is first.)
    base_failed = chain[0].extends is not None
    for ov in list(file_overrides) + list(overrides):
        _apply_override(ov, draft, sink, base_failed)

    values: dict = {}
    spans: dict = {}
    for key in _SETTING_KEYS:
        if key in draft.settings:
            raw = draft.settings[key]
            values[key] = _setting_value(key, raw, sink)
            spans[key] = raw.span
    for key in ("model", "device", "tp"):
        if key not in draft.settings and not base_failed:
            sink.error(f"schedule '{top.name.text}' has no '{key}' setting "
                       f"(write e.g. '{_EXAMPLE[key]}')", top.name.span)
    values.setdefault("ep", False)
    values.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    values.setdefault("policy", "evict_last")
    values.setdefault("set_aside", 0)

    adapter = None
    kinds: list = []
    if values.get("model"):
        adapter = get_adapter(values["model"])
        try:
            kinds = list(adapter.layer_kinds(model_config if model_config is not None
                                             else _default_model_config(adapter)))
        except (ValueError, KeyError, TypeError) as e:
            sink.error(f"model config: {e}", None)

    windows = _resolve_windows(draft, adapter, kinds, sink)
    sink.raise_if_errors(L2sSemanticError)
    return Schedule(
        name=top.name.text, path=top.path, model=values["model"],
        device=values["device"], tp=values["tp"], ep=values["ep"],
        max_tokens=values["max_tokens"], policy=values["policy"],
        set_aside=values["set_aside"], windows=tuple(windows),
        layer_kinds=tuple(kinds), files=tuple(draft.files), spans=spans,
        sources={p: "\n".join(lines) for p, lines in sink.sources.items()})


_EXAMPLE = {"model": "model glm5next", "device": "device h200", "tp": "tp 4"}


def _resolve_windows(draft: _Draft, adapter, kinds, sink) -> list[Window]:
    hooks = getattr(adapter, "HOOKS_BY_NAME", {}) if adapter else {}
    resolved: list[Window] = []
    order: dict[str, int] = {name: i for i, name in enumerate(draft.windows)}
    # Windows whose layers could not be resolved (their error is reported):
    # the shared-layer check below would only cascade from it.
    unresolved: set[str] = set()
    for index, (name, w) in enumerate(draft.windows.items()):
        spans = {"name": w["name"].span}
        ok = True
        hook = w["hook"]
        if hook is None:
            sink.error(f"window '{name}' has no hook point; add 'at HOOK' "
                       f"(e.g. at attn.pre_all_reduce)", w["name"].span)
            ok = False
        elif adapter and hook.text not in hooks:
            sink.error(f"unknown hook point '{hook.text}'{suggest(hook.text, hooks)}",
                       hook.span, notes=(f"{adapter.NAME} hook points: "
                                         + ", ".join(hooks),))
            ok = False
        if hook is not None:
            spans["at"] = hook.span
        budget = None
        if w["budget"] is None:
            sink.error(f"window '{name}' has no budget; add e.g. 'budget 20MB'",
                       w["name"].span)
            ok = False
        else:
            spans["budget"] = w["budget"].span
            budget = size_bytes(w["budget"], sink, "budget")
            ok = ok and budget is not None
        if w["layers"] is not None:
            spans["layers"] = w["layers"].span
            before = len(sink.diagnostics)
            layers = select_layers(w["layers"], kinds, sink)
            if len(sink.diagnostics) != before:
                unresolved.add(name)
            # An empty result already explained by an error in the selector
            # itself (unknown name, bad index) is not reported twice.
            if kinds and not layers and len(sink.diagnostics) == before:
                sink.error(f"the layer selector of window '{name}' selects no layer",
                           w["layers"].span)
        else:
            layers = set(range(len(kinds)))
        if not kinds or not layers:  # model or selector error already reported
            unresolved.add(name)
        if ok and adapter and kinds:
            hp = hooks[hook.text]
            missing = sorted(i for i in layers if not hp.exists_in(kinds[i]))
            if missing:
                kind_names = sorted({str(kinds[i]) for i in missing})
                sink.error(
                    f"hook point '{hook.text}' does not fire in layers "
                    f"{format_layers(missing)} ({', '.join(kind_names)}) selected by "
                    f"window '{name}'", (w["layers"] or hook).span)
        carry = w["carry"]
        if carry is not None:
            spans["carry"] = carry.span
            target = draft.windows.get(carry.text)
            if carry.text == name:
                sink.error(f"window '{name}' carries into itself", carry.span)
            elif target is None:
                sink.error(f"carry to unknown window '{carry.text}'"
                           f"{suggest(carry.text, draft.windows)}", carry.span)
            elif ok and target["hook"] is not None and target["hook"].text in hooks:
                src = hooks[hook.text].order
                dst = hooks[target["hook"].text].order
                later = dst > src or (dst == src and order[carry.text] > index)
                if not later:
                    sink.error(
                        f"carry from window '{name}' ({hook.text}) to '{carry.text}' "
                        f"({target['hook'].text}) goes back in time: bytes can only "
                        f"carry to a window that fires later in the layer", carry.span)
        for t in w["targets"]:
            for pat in t.patterns + t.excludes:
                if pat.text.count("[") != pat.text.count("]"):
                    sink.error(f"unbalanced '[' in pattern '{pat.text}'", pat.span)
        if ok:
            resolved.append(Window(
                name=name, hook=hook.text, budget=budget, layers=tuple(sorted(layers)),
                carry=carry.text if carry is not None else None,
                targets=tuple(w["targets"]), index=index, span=w["span"],
                spans=spans))
    by_name = {w.name: w for w in resolved}
    for w in resolved:
        target = by_name.get(w.carry) if w.carry else None
        if target is None or {w.name, target.name} & unresolved:
            continue
        if not set(w.layers) & set(target.layers):
            sink.error(
                f"window '{w.name}' carries into '{target.name}', but they share no "
                f"layer ('{w.name}' fires in {format_layers(w.layers)}, "
                f"'{target.name}' in {format_layers(target.layers)}): every carried "
                f"byte would be left over", w.spans["carry"])
    return resolved


def _cli_overrides(overrides: Sequence[str], sink: DiagnosticSink) -> list:
    out = []
    for i, arg in enumerate(overrides, 1):
        ov = parse_override_arg(arg, i)
        sink.add_source(ov.span.path, arg)
        out.append(ov)
    return out


def load_schedule(path: str | os.PathLike, overrides: Sequence[str] = (),
                  model_config: Mapping | None = None) -> Schedule:
    """Read, parse and resolve the schedule at ``path``.

    ``overrides`` are CLI-style ``KEY=VALUE`` strings (``window.B.budget=25MB``,
    ``policy=evict_normal``), applied after the file's own ``set`` lines.
    Raises ``L2sInputError`` (unreadable file), ``L2sSyntaxError`` or
    ``L2sSemanticError`` (every semantic problem of the run at once)."""
    sink = DiagnosticSink()
    cli = _cli_overrides(overrides, sink)
    chain = _load_chain(str(path), sink)
    if not chain:
        sink.raise_if_errors(L2sSemanticError)
    return resolve(chain, cli, model_config, sink)


def load_schedule_text(text: str, path: str = "<string>",
                       overrides: Sequence[str] = (),
                       model_config: Mapping | None = None) -> Schedule:
    """``load_schedule`` for in-memory text; ``extends`` resolves relative to
    the current directory, then among the shipped schedules."""
    sink = DiagnosticSink()
    sink.add_source(path, text)
    cli = _cli_overrides(overrides, sink)
    chain = _with_bases(parse(text, path), path, sink, (os.path.realpath(path),))
    return resolve(chain, cli, model_config, sink)
