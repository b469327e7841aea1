"""Values of a schedule: sizes in bytes, whole numbers, names from a fixed
list, the header settings, and layer selectors evaluated over a model's
layer kinds.

Each function records its problems in a ``DiagnosticSink`` (with the span
of the value) and returns ``None`` (or an empty set) instead of raising, so
one run reports every error of a file.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from l2sched.errors import DiagnosticSink, L2sError, Span, suggest
from l2sched.lang import nodes as n
from l2sched.lang.schedule import (
    MAX_SIZE_BYTES,
    MAX_TOKENS_LIMIT,
    MAX_TP,
    POLICIES,
    SELECTOR_ALL,
    SET_ASIDE_MAX,
)
from l2sched.model.adapters import adapter_names
from l2sched.model.config import (
    ModelConfigRef,
    load_model_config,
    shipped_config_names,
    shipped_config_path,
    unknown_config_message,
)
from l2sched.device import device_names, load_device
from l2sched.units import FILL_MODES, UNITS


def size_bytes(size: n.Size, sink: DiagnosticSink, what: str) -> int | None:
    """Bytes of ``size``, or ``None`` after recording an error (no unit,
    unknown unit, not a whole number of bytes)."""
    if not size.unit:
        sink.error(f"{what} {size.number} has no unit; write e.g. {size.number}MB "
                   f"(units: {', '.join(UNITS)})", size.span)
        return None
    if size.unit not in UNITS:
        # a one-letter guess ("B" for "TB") would name a unit 10^12 times off
        guess = suggest(size.unit, [u for u in UNITS if len(u) > 1])
        hint = guess or f" (units: {', '.join(UNITS)})"
        sink.error(f"unknown size unit '{size.unit}'{hint}", size.span)
        return None
    value = Decimal(size.number) * UNITS[size.unit]
    if value != value.to_integral_value():
        sink.error(f"{what} {size.text} is not a whole number of bytes", size.span)
        return None
    if value > MAX_SIZE_BYTES:
        sink.error(f"{what} {size.text} is larger than any device memory (at most "
                   f"1000GB = 10^12 B)", size.span)
        return None
    return int(value)


def _whole(value: n.Scalar, sink: DiagnosticSink, key: str, minimum: int,
           maximum: int) -> int | None:
    if isinstance(value, n.Size) and not value.unit and "." not in value.number:
        if len(value.number.lstrip("0")) > len(str(maximum)):  # no int() of 10^5 digits
            sink.error(f"{key} must be at most {maximum:,}, got {len(value.number)} "
                       f"digits", value.span)
            return None
        number = int(value.number)
        if number < minimum:
            sink.error(f"{key} must be at least {minimum}, got {number}", value.span)
            return None
        if number > maximum:
            sink.error(f"{key} must be at most {maximum:,}, got {number:,}", value.span)
            return None
        return number
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


def fill_mode(value: n.Scalar, sink: DiagnosticSink) -> str | None:
    """The fill mode ``value`` names (``units.FILL_MODES``), or ``None`` after
    recording an error."""
    return _choice(value, sink, "fill kernel", FILL_MODES)


def _device(value: n.Scalar, sink: DiagnosticSink) -> str | None:
    """A ``device`` value: a shipped profile name (``device h200``), or a
    profile file (``device "profiles/gb10.toml"``, or a bare name ending in
    ``.toml``) resolved against the directory of the file that names it
    (the current directory for ``--set``) and read to check it. Returns the
    name or the file's path."""
    text = _text(value)
    is_file = isinstance(value, n.StringValue) or (isinstance(value, n.Name)
                                                   and text.endswith(".toml"))
    if not is_file:
        return _choice(value, sink, "device profile", device_names())
    where = value.span.path if value.span else ""
    base = os.path.dirname(where) if where and not where.startswith("--set") else ""
    path = text if os.path.isabs(text) else os.path.join(base, text)
    if not os.path.exists(path) and text in device_names():
        sink.error(f"device profile file '{text}' does not exist; for the shipped "
                   f"profile write {text} without quotes", value.span)
        return None
    try:
        load_device(path)
    except L2sError as e:
        first = e.diagnostics[0]
        more = f" (+{len(e.diagnostics) - 1} more)" if len(e.diagnostics) > 1 else ""
        sink.error(f"device profile '{text}': "
                   f"{first.span}: {first.message}{more}" if first.span else
                   f"device profile '{text}': {first.message}{more}", value.span)
        return None
    return path


def _model_config(value: n.Scalar, sink: DiagnosticSink):
    """A ``model_config`` value: a shipped config's name
    (``model_config qwen3-235b-a22b``, ``l2sched/data/NAME-config.json``), or
    a ``config.json`` or model directory (``model_config "cfg/config.json"``,
    or a bare name ending in ``.json``) resolved against the directory of
    the file that names it (the current directory for ``--set``). Returns
    ``(ModelConfigRef, config dict)``, the config read and validated."""
    text = _text(value)
    is_file = isinstance(value, n.StringValue) or text.endswith(".json")
    if not is_file:
        path = shipped_config_path(text)
        if path is None:
            sink.error(unknown_config_message(text, 'model_config "config.json"'),
                       value.span)
            return None
    else:
        where = value.span.path if value.span else ""
        base = os.path.dirname(where) if where and not where.startswith("--set") else ""
        path = text if os.path.isabs(text) else os.path.join(base, text)
        if not os.path.exists(path) and text in shipped_config_names():
            sink.error(f"model config file '{text}' does not exist; for the shipped "
                       f"config write {text} without quotes", value.span)
            return None
    try:
        config = load_model_config(path)
    except L2sError as e:
        first = e.diagnostics[0]
        more = f" (+{len(e.diagnostics) - 1} more)" if len(e.diagnostics) > 1 else ""
        sink.error(f"model config '{text}': {first.span or path}: {first.message}{more}",
                   value.span)
        return None
    return ModelConfigRef(text, str(path), "schedule"), config


def setting_value(key: str, value: n.Scalar, sink: DiagnosticSink):
    """Typed value of header setting ``key`` or ``None`` after an error
    (``model_config``: ``(ModelConfigRef, config dict)``)."""
    if key == "model":
        return _choice(value, sink, "model adapter", adapter_names())
    if key == "model_config":
        return _model_config(value, sink)
    if key == "device":
        return _device(value, sink)
    if key == "tp":
        return _whole(value, sink, "tp", 1, MAX_TP)
    if key == "max_tokens":
        # int32 token counts (MAX_TOKENS_LIMIT)
        return _whole(value, sink, "max_tokens", 1, MAX_TOKENS_LIMIT)
    if key == "ep":
        got = _choice(value, sink, "ep value", ("on", "off"))
        return None if got is None else got == "on"
    if key == "policy":
        return _choice(value, sink, "cache policy", POLICIES)
    if key == "kernel":
        return fill_mode(value, sink)
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


def select_layers(selector: n.Selector, kinds: Sequence | None,
                  sink: DiagnosticSink,
                  selectors: Mapping[str, Callable[[Any], bool]] | None = None
                  ) -> set[int]:
    """Evaluate ``selector`` over a model whose layer ``i`` has kind
    ``kinds[i]`` (the adapter's layer kind); ``selectors`` are the model
    adapter's ``SELECTORS`` (name -> predicate on a kind; ``all`` is always
    there). ``kinds`` None means the model's layers are unknown (an unknown
    or missing model, a config that failed: that error is reported
    already), so only what the selector says by itself is checked;
    ``selectors`` None means the model is unknown, so names other than
    ``all`` are not checked either. Records errors for unknown names,
    indices that are not whole numbers, empty ranges (``5..3``) and, when
    the layers are known, indices past the last layer; each range gets at
    most one error. Returns the selected indices (none when ``kinds`` is
    None)."""
    count = len(kinds) if kinds is not None else None
    kinds = kinds or ()

    def whole(text: str, span: Span) -> int | None:
        if "." in text:
            sink.error(f"layer index '{text}' must be a whole number", span)
            return None
        return int(text)

    def exists(i: int, span: Span) -> bool:
        if count is not None and i >= count:
            sink.error(f"layer {i} does not exist; the model has layers 0..{count - 1}",
                       span)
            return False
        return True

    def ev(node) -> set[int]:
        if isinstance(node, n.SelName):
            name = node.name
            if name == SELECTOR_ALL:
                return set(range(len(kinds)))
            if selectors is None:
                return set()
            if name in selectors:
                pred = selectors[name]
                return {i for i, k in enumerate(kinds) if pred(k)}
            names = (SELECTOR_ALL, *selectors)
            hint = suggest(name, names) or \
                f" (one of: {', '.join(names)}, an index or a range)"
            sink.error(f"unknown layer selector '{name}'{hint}", node.span)
            return set()
        if isinstance(node, n.SelIndex):
            i = whole(node.index, node.span)
            if i is None or not exists(i, node.span):
                return set()
            return {i} if count is not None else set()
        if isinstance(node, n.SelRange):
            # one error per range: a bad end, else empty, else past the end
            lo = whole(node.lo, node.span)
            hi = whole(node.hi, node.span) if lo is not None else None
            if lo is None or hi is None:
                return set()
            if lo > hi:
                sink.error(f"empty layer range {lo}..{hi} (ranges are lo..hi, inclusive)",
                           node.span)
                return set()
            if not exists(hi, node.span) or count is None:
                return set()
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
