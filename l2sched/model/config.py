"""Model configs: reading and validating a Hugging Face ``config.json``.

``load_model_config(path)`` returns the validated **text** config dict a
model adapter reads (layer kinds, per-rank tensor shapes); ``None`` gives
the config embedded for the adapter (``DEFAULT_ADAPTER``'s). Every problem is an
``L2sModelError`` naming the file and, where it can, the key's
``line:col``. Pure Python: no torch, no vLLM.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from l2sched.errors import (
    Diagnostic,
    DiagnosticSink,
    L2sModelError,
    Span,
    line_col,
    source_lines,
    suggest,
)
from l2sched.files import note_input
from l2sched.model.adapters import (
    DEFAULT_ADAPTER,
    ModelAdapter,
    adapter_for,
    adapter_of_config,
    get_adapter,
    supported_architectures,
)


def _key_span(path: str, text: str, key: str) -> Span | None:
    """The span of ``"key":`` in ``text`` (first occurrence), or ``None``."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    if not m:
        return None
    line, col = line_col(text, m.start())
    return Span(path, line, col, line, col + len(key) + 2)


def _key_diag(path: str, text: str, key: str, message: str) -> Diagnostic:
    """A diagnostic about ``key`` of the file ``path``: located at the key
    (``path:line:col``, with the source line) when ``text`` contains it, else
    the message is prefixed with ``path``."""
    span = _key_span(path, text, key) if text else None
    if span is None:
        return Diagnostic(message, Span.file(path))
    lines = source_lines(text)
    line = lines[span.line - 1] if span.line <= len(lines) else None
    return Diagnostic(message, span, source_line=line)


def _type_name(types: Sequence[type | None]) -> str:
    names = {int: "an integer", bool: "a boolean", str: "a string",
             list: "a list", None: "null", float: "a number"}
    return " or ".join(names[t] for t in types)


def _type_ok(value: Any, types: Sequence[type | None]) -> bool:
    for t in types:
        if t is None and value is None:
            return True
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t not in (int, None) and isinstance(value, t):  # type: ignore[arg-type]
            return True
    return False


#: Upper bound of an integer config key the adapter's ``CONFIG_BOUNDS``
#: does not list (lower bound 1): a sanity limit far above any real model,
#: so that a typo is an error naming the key (``docs/inventory.md``).
MAX_DIM = 1 << 20


def _bounds(adapter: ModelAdapter, key: str) -> tuple[int, int]:
    """``(lowest, highest)`` accepted for the integer key ``key``."""
    return adapter.CONFIG_BOUNDS.get(key, (1, MAX_DIM))


def validate_config(config: Mapping[str, Any], path: str = "<config>",
                    text: str = "", adapter: ModelAdapter | None = None) -> None:
    """Check a text config against what the adapter's inventory reads.

    ``adapter``: the model's adapter (default: ``DEFAULT_ADAPTER``'s). Every
    problem (missing key, wrong type, a value outside the adapter's
    ``CONFIG_BOUNDS``, what the adapter's ``validate_config`` refuses, layer
    kinds it does not know) becomes one diagnostic naming the key and
    ``path`` (with the key's line when ``text``, the file's contents, is
    given); all are raised together as one ``L2sModelError``."""
    if adapter is None:
        adapter = get_adapter(DEFAULT_ADAPTER)
    sink = DiagnosticSink()
    where = "text_config." if text and '"text_config"' in text else ""

    def err(key: str, msg: str) -> None:
        sink.add(_key_diag(path, text, key, f"{where}{key}: {msg}"))

    for key, types in adapter.REQUIRED_KEYS.items():
        if key not in config:
            sink.add(Diagnostic(f"missing key '{where}{key}' "
                                f"({_type_name(types)}, needed for the "
                                f"{adapter.NAME} tensor inventory)", Span.file(path)))
        elif not _type_ok(config[key], types):
            err(key, f"expected {_type_name(types)}, got "
                     f"{type(config[key]).__name__} {config[key]!r}")
        elif isinstance(config[key], int) and not isinstance(config[key], bool) \
                and config[key] < _bounds(adapter, key)[0]:
            err(key, f"must be positive, got {config[key]}")
        elif isinstance(config[key], int) and not isinstance(config[key], bool) \
                and config[key] > _bounds(adapter, key)[1]:
            err(key, f"must be at most {_bounds(adapter, key)[1]}, got "
                     f"{config[key]}")
    for key, types in adapter.OPTIONAL_KEYS.items():
        if key in config and not _type_ok(config[key], types):
            err(key, f"expected {_type_name(types)}, got "
                     f"{type(config[key]).__name__} {config[key]!r}")
    if sink.has_errors:
        sink.raise_if_errors(L2sModelError)
    adapter.validate_config(config, err)
    if not sink.has_errors:
        try:
            adapter.layer_kinds(config)
        except ValueError as e:
            err(str(e).split("[")[0], str(e))
    sink.raise_if_errors(L2sModelError)


#: Where the shipped model configs live (package data of ``l2sched.data``):
#: ``NAME-config.json``, named ``NAME`` by ``model_config NAME`` in a
#: schedule and by ``--model-config NAME``.
CONFIGS_DIR = Path(__file__).resolve().parent.parent / "data"
CONFIG_SUFFIX = "-config.json"


def shipped_config_names() -> list[str]:
    """Names of the shipped model configs (``l2sched/data/NAME-config.json``),
    sorted: ``glm53-flash``, ``qwen3-235b-a22b``, ``qwen3-30b-a3b``."""
    return sorted(p.name[: -len(CONFIG_SUFFIX)]
                  for p in CONFIGS_DIR.glob("*" + CONFIG_SUFFIX))


def model_config_help() -> str:
    """The ``--model-config`` help text of the commands that read a model
    config, from the registry and ``l2sched/data`` (no adapter is imported):
    ``HF config.json, model directory or shipped config name (NAME, ...;
    default: the embedded config of the default adapter, NAME)``."""
    return (f"HF config.json, model directory or shipped config name "
            f"({', '.join(shipped_config_names())}; default: the embedded config "
            f"of the default adapter, {DEFAULT_ADAPTER})")


def shipped_config_path(name: str) -> Path | None:
    """The file of the shipped model config ``name``, or ``None`` when no
    shipped config has that name."""
    return CONFIGS_DIR / f"{name}{CONFIG_SUFFIX}" if name in shipped_config_names() \
        else None


def _is_path(text: str) -> bool:
    """True when ``--model-config TEXT`` names a file or directory (one that
    exists, or a value that looks like a path), not a shipped config."""
    return os.path.exists(text) or os.sep in text or "/" in text or text.endswith(".json")


def config_file_arg(text: str) -> str:
    """What ``--model-config TEXT`` reads: the file or model directory
    ``TEXT`` when it exists or looks like a path, else the shipped config of
    that name (``qwen3-235b-a22b``), else ``TEXT`` (``load_model_config``
    then says there is no such file; ``read_config_arg`` says it is an
    unknown name and lists the shipped ones)."""
    if _is_path(text):
        return text
    shipped = shipped_config_path(text)
    return str(shipped) if shipped is not None else text


def unknown_config_message(text: str, file_hint: str) -> str:
    """``unknown model config 'TEXT'; did you mean '...'? (shipped: ...; or a
    file: FILE_HINT)``: what a name that is no shipped config gets, in a
    schedule's ``model_config`` line and in ``--model-config``."""
    names = shipped_config_names()
    return (f"unknown model config '{text}'{suggest(text, names)} (shipped: "
            f"{', '.join(names)}; or a file: {file_hint})")


@dataclass(frozen=True)
class ModelConfigRef:
    """Which model config a schedule was resolved with, for the one line
    ``check`` and ``lint`` print (``describe``), the plan's ``meta`` and the
    vLLM plugin's check.

    ``name``: a shipped config's name (``qwen3-235b-a22b``), else the file
    as it was named; ``path``: the file read (``""`` for a config that is
    no file, the live model's); ``origin``: ``"schedule"`` (its ``model_config`` line),
    ``"default"`` (the config embedded for its model), ``"--model-config"``
    or ``"live model"`` (a config given in place of the schedule's);
    ``replaced``: the schedule's own ``model_config`` when a given config
    took its place, and ``differs`` the config keys the inventory reads
    whose values differ between the two (``config_differences``)."""

    name: str
    path: str
    origin: str
    replaced: "ModelConfigRef | None" = None
    differs: tuple[str, ...] = ()

    @property
    def shipped_name(self) -> str | None:
        """The shipped config's name when ``path`` is one
        (``l2sched/data/NAME-config.json``), else None."""
        p = Path(self.path) if self.path else None
        if p is None or not p.name.endswith(CONFIG_SUFFIX) or \
                p.parent.resolve() != CONFIGS_DIR.resolve():
            return None
        return p.name[: -len(CONFIG_SUFFIX)]

    @property
    def shown_path(self) -> str:
        """``path`` as messages show it: a shipped config as
        ``l2sched/data/NAME-config.json`` (the same in a checkout and an
        installed wheel), any other file as it was named."""
        shipped = self.shipped_name
        return f"l2sched/data/{shipped}{CONFIG_SUFFIX}" if shipped else self.path

    def describe(self, model: str = "") -> str:
        """``qwen3-235b-a22b (l2sched/data/qwen3-235b-a22b-config.json)``,
        with the origin when it is not the schedule's line: ``..., the
        default of qwen3_moe`` (``model``), ``..., --model-config in place
        of the schedule's qwen3-235b-a22b (differs in num_hidden_layers)``."""
        shown = self.shown_path
        where = f" ({shown})" if shown and shown != self.name else ""
        text = f"{self.name}{where}"
        if self.origin == "default":
            text += f", the default of {model}" if model else ", the default"
        elif self.origin != "schedule":
            text += f", {self.origin}"
        if self.replaced is not None:
            text += f" in place of the schedule's {self.replaced.name}"
            if self.differs:
                text += f" (differs in {', '.join(self.differs)})"
        return text

    def to_json(self) -> dict:
        """``{"name", "path", "origin", "replaced", "differs"}`` (``path`` as
        ``shown_path``; ``replaced``: the name of the schedule's own config,
        or null)."""
        return {"name": self.name, "path": self.shown_path, "origin": self.origin,
                "replaced": self.replaced.name if self.replaced else None,
                "differs": list(self.differs)}


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any],
                       adapter: ModelAdapter) -> tuple[str, ...]:
    """The keys of ``adapter.REQUIRED_KEYS`` (what its inventory reads) whose
    values differ between configs ``a`` and ``b``, in the adapter's order."""
    return tuple(k for k in adapter.REQUIRED_KEYS if a.get(k) != b.get(k))


def default_config_ref(model: str) -> ModelConfigRef:
    """The ``ModelConfigRef`` of the config embedded for adapter ``model``."""
    file = get_adapter(model).DEFAULT_CONFIG
    name = file[: -len(CONFIG_SUFFIX)] if file.endswith(CONFIG_SUFFIX) else file
    return ModelConfigRef(name, str(CONFIGS_DIR / file), "default")


def given_config_ref(arg: str, origin: str = "--model-config") -> ModelConfigRef:
    """The ``ModelConfigRef`` of a config named on the command line
    (``--model-config ARG``, a shipped name or a file, ``config_file_arg``):
    named by the shipped name when it is a shipped config."""
    ref = ModelConfigRef(arg, config_file_arg(arg), origin)
    shipped = ref.shipped_name
    return ref if shipped is None else ModelConfigRef(shipped, ref.path, origin)


def read_config_arg(arg: str, option: str = "--model-config"
                    ) -> tuple[dict[str, Any], ModelConfigRef]:
    """The validated config and its ``ModelConfigRef`` (``given_config_ref``)
    that the command-line option ``option`` (``--model-config``) names: a
    shipped config's name, a ``config.json`` or a model directory; the one
    reader of the option for every command. A value that is neither a path
    nor a shipped name is one line ``--model-config: unknown model config
    'X'; did you mean ...``; a file's problems are reported at the file
    (``load_model_config``). Raises ``L2sModelError``."""
    if not _is_path(arg) and shipped_config_path(arg) is None:
        raise L2sModelError(Diagnostic(f"{option}: " + unknown_config_message(
            arg, "a config.json or model directory")))
    ref = given_config_ref(arg, option)
    return load_model_config(ref.path), ref


def config_model_mismatch(config: Mapping[str, Any], name: str, model: str,
                          whose: str = "schedule") -> str | None:
    """``model config 'NAME' is a config of model X, the schedule's model is
    Y`` when the validated ``config`` (named ``name``) is a config of
    another model than adapter ``model`` (the adapter of its
    ``architectures``, else of its ``model_type``: ``adapter_of_config``),
    else None. ``name`` empty: ``the given model config``. ``whose``: what
    has model ``model`` (``schedule``, ``plan``)."""
    own = adapter_of_config(config).NAME
    if own == model:
        return None
    what = f"model config '{name}'" if name else "the given model config"
    return f"{what} is a config of model {own}, the {whose}'s model is {model}"


def default_config_text(model: str = DEFAULT_ADAPTER) -> str:
    """Text of the config embedded for adapter ``model``
    (``adapter.default_config_text()``). Raises ``KeyError`` for an unknown
    adapter."""
    return get_adapter(model).default_config_text()


def default_config(model: str = DEFAULT_ADAPTER) -> dict[str, Any]:
    """The validated text config embedded for adapter ``model``
    (``load_model_config(None, model)``)."""
    return load_model_config(None, model)


def load_model_config(path: str | os.PathLike | None = None,
                      model: str = DEFAULT_ADAPTER) -> dict[str, Any]:
    """The validated HF **text** config dict of a model.

    ``path`` is a ``config.json``, a model directory holding one, or ``None``
    for the config embedded for adapter ``model``. A multimodal config (one
    with a ``text_config`` object) is unwrapped to its ``text_config`` (top-level ``torch_dtype`` carried over). Raises
    ``L2sModelError`` naming the file (and the key) when the file is missing,
    is not JSON, has an unknown architecture, or lacks or mistypes a key.

    Long function: one check per config key, in the order the errors are
    reported; split, the order would be spread over helpers."""
    if path is None:
        shown = f"<embedded {get_adapter(model).DEFAULT_CONFIG}>"
        text = default_config_text(model)
    else:
        shown = os.fspath(path)
        file = os.path.join(shown, "config.json") if os.path.isdir(shown) else shown
        try:
            # A FIFO or a device would block the read (or never end).
            if not stat.S_ISREG(os.stat(file).st_mode):
                raise L2sModelError(Diagnostic("not a regular file", Span.file(file)))
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            what = "has no config.json" if file != shown else "no such file"
            raise L2sModelError(Diagnostic(what, Span.file(shown))) from None
        except UnicodeDecodeError as e:
            raise L2sModelError(Diagnostic(
                f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
                Span.file(file))) from None
        except (OSError, ValueError) as e:
            raise L2sModelError(Diagnostic(f"cannot read: {e}", Span.file(file))) from None
        shown = file
        note_input(file, "model config")  # no output of the command may replace it
        # An editor's UTF-8 byte-order mark is not part of the text.
        text = text.removeprefix("\ufeff")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        # the error may sit just past the last line (an unterminated "{"
        # at the end of the file)
        lineno, colno = line_col(text, e.pos)
        lines = source_lines(text)
        line = lines[lineno - 1] if 1 <= lineno <= len(lines) else None
        raise L2sModelError(Diagnostic(
            f"not valid JSON: {e.msg}", Span.point(shown, lineno, colno),
            source_line=line)) from None
    except (ValueError, RecursionError) as e:
        # int() of a literal of thousands of digits, or nesting too deep
        msg = str(e).split(";")[0] or "nested too deeply"
        raise L2sModelError(Diagnostic(f"not valid JSON: {msg}", Span.file(shown))) from None
    if not isinstance(raw, dict):
        raise L2sModelError(Diagnostic(
            f"expected a JSON object, got {type(raw).__name__}", Span.file(shown)))
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if archs is not None and (not isinstance(archs, list) or not archs
                              or not all(isinstance(a, str) for a in archs)):
        raise L2sModelError(_key_diag(
            shown, text, "architectures",
            f"architectures: expected a non-empty list of strings, got {archs!r}"))
    if archs is None and model_type is None:
        raise L2sModelError(Diagnostic(
            f"missing key 'architectures' (and no 'model_type'); "
            f"supported: {', '.join(supported_architectures())}", Span.file(shown)))
    adapter = None
    for a in archs or [None]:
        adapter = adapter_for(a, model_type)
        if adapter is not None:
            break
    if adapter is None:
        key, val = ("architectures", archs) if archs else ("model_type",
                                                           model_type)
        raise L2sModelError(_key_diag(
            shown, text, key, f"{key}: unknown architecture {val!r}; supported: "
            f"{', '.join(supported_architectures())}"))
    config = raw
    if isinstance(raw.get("text_config"), dict):
        config = dict(raw["text_config"])
        for k in ("torch_dtype", "dtype"):
            if k in raw and k not in config:
                config[k] = raw[k]
    elif "text_config" in raw and raw["text_config"] is not None:
        raise L2sModelError(_key_diag(
            shown, text, "text_config", f"text_config: expected an object, got "
            f"{type(raw['text_config']).__name__}"))
    validate_config(config, shown, text, adapter)
    config = dict(config)
    config.setdefault("architectures", archs or [])
    return config


