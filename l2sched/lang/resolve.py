"""Resolving a schedule: parsed files -> one ``Schedule``.

Resolves ``extends`` chains (relative to the extending file, then among the
shipped schedules), merges settings and windows, applies ``set`` lines and
the CLI's ``--set KEY=VALUE`` overrides (``lang.overrides``), converts
values (``lang.values``), evaluates layer selectors against the model's
layer kinds and checks every name against the model adapter's hook
catalogue and the device profiles. All problems of a run are collected and
raised together as one ``L2sSemanticError`` (or the first
``L2sSyntaxError``/``L2sInputError``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from l2sched import progress
from l2sched.errors import DiagnosticSink, L2sError, L2sSemanticError, Span, suggest
from l2sched.files import note_input, packaged_dir
from l2sched.lang import nodes as n
from l2sched.lang.measured import measured_results
from l2sched.lang.overrides import apply_override, parse_override_arg
from l2sched.lang.schedule import DEFAULT_MAX_TOKENS, SETTING_KEYS, Schedule, Window
from l2sched.lang.syntax import parse, read_source
from l2sched.lang.values import fill_mode, select_layers, setting_value, size_bytes
from l2sched.model.adapters import DEFAULT_ADAPTER, get_adapter
from l2sched.model.config import (
    ModelConfigRef,
    config_differences,
    config_model_mismatch,
    default_config,
    default_config_ref,
)
from l2sched.units import format_layers

#: Longest ``extends`` chain (files, the extending one included).
MAX_EXTENDS_DEPTH = 64


@dataclass
class Draft:
    """Mutable merge of a file chain before validation."""

    settings: dict = field(default_factory=dict)  # key -> (value, span)
    windows: dict = field(default_factory=dict)  # name -> dict of fields
    files: list = field(default_factory=list)


def _resolve_extends(ref: n.StringValue, from_path: str) -> str:
    candidate = Path(from_path).parent / ref.text
    if _exists(candidate) or os.path.isabs(ref.text):
        return str(candidate)
    shipped = packaged_dir("l2sched.schedules", "schedules") / ref.text
    return str(shipped) if _exists(shipped) else str(candidate)


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a name the OS cannot look up (too long, in a
    directory the user cannot enter, a NUL byte) counts as there, so that
    reading it reports why (``read_source``)."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return True


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
    note_input(path, "schedule")  # no output of the command may replace it
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


def _merge(chain: list[n.ScheduleFile], sink: DiagnosticSink) -> tuple[Draft, list]:
    draft = Draft()
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
                    "layers": item.layers, "carry": item.carry, "kernel": item.kernel,
                    "targets": item.targets, "span": item.name.span,
                    "node": item,
                }
            else:
                overrides.append(item)
    return draft, overrides


_CLAUSE = {"hook": "at", "budget": "budget", "layers": "layers", "carry": "carry",
           "kernel": "kernel"}



def resolve(chain: list[n.ScheduleFile], overrides: Sequence[n.Override] = (),
            model_config: Mapping | None = None,
            sink: DiagnosticSink | None = None,
            config_ref: ModelConfigRef | None = None) -> Schedule:
    """Merge an extends chain (base first), apply file ``set`` lines then
    ``overrides``, validate, and build the ``Schedule``.

    ``model_config`` is a HF text-config dict given in place of the
    schedule's ``model_config`` line (``--model-config``, the vLLM
    plugin's live model), ``config_ref`` what names it (origin
    ``"--model-config"``, ``"live model"``); without one, the line's config,
    else the one embedded for the model (``Schedule.model_config``).
    Raises ``L2sSemanticError`` with every problem found."""
    sink = sink or DiagnosticSink()
    top = chain[-1]
    progress.stage(f"resolving {top.path}")
    draft, file_overrides = _merge(chain, sink)
    # A base that could not be loaded (its error is already reported) would
    # have given settings and windows: do not bury that error under one
    # "has no 'model' setting" per key or "unknown window" per set line.
    # (The chain stops at the file whose base failed, so that file is first.)
    base_failed = chain[0].extends is not None
    for ov in list(file_overrides) + list(overrides):
        apply_override(ov, draft.settings, draft.windows, sink, base_failed)

    values: dict = {}
    spans: dict = {}
    for key in SETTING_KEYS:
        if key in draft.settings:
            raw = draft.settings[key]
            values[key] = setting_value(key, raw, sink)
            spans[key] = raw.span
    for key in ("model", "device", "tp"):
        if key not in draft.settings and not base_failed:
            sink.error(f"schedule '{top.name.text}' has no '{key}' setting "
                       f"(write e.g. '{_EXAMPLE[key]}')", top.name.span)
    values.setdefault("ep", False)
    values.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    values.setdefault("policy", "evict_last")
    values.setdefault("set_aside", 0)
    values.setdefault("kernel", None)

    adapter = None
    kinds: list | None = None  # unknown until the model's config gives them
    config, ref = None, None
    if values.get("model"):
        adapter = get_adapter(values["model"])
        config, ref = _model_config(adapter, values.get("model_config"), spans,
                                    model_config, config_ref, sink)
        try:
            # no config: another model's, already reported
            kinds = list(adapter.layer_kinds(config)) if config is not None else None
        except (ValueError, KeyError, TypeError) as e:
            sink.error(f"model config: {e}", None)

    windows = _resolve_windows(draft, adapter, kinds, sink)
    top_lines = sink.sources.get(top.path)
    measured = measured_results("\n".join(top_lines), top.path, sink) \
        if top_lines is not None else ()
    sink.raise_if_errors(L2sSemanticError)
    return Schedule(
        name=top.name.text, path=top.path, model=values["model"],
        device=values["device"], tp=values["tp"], ep=values["ep"],
        max_tokens=values["max_tokens"], policy=values["policy"],
        set_aside=values["set_aside"], windows=tuple(windows),
        layer_kinds=tuple(kinds or ()), files=tuple(draft.files), kernel=values["kernel"],
        spans=spans,
        sources={p: "\n".join(lines) for p, lines in sink.sources.items()},
        measured=measured,
        overrides=tuple(f"{ov.key.text}={ov.value}" for ov in overrides),
        model_config=config, config_ref=ref)


def _model_config(adapter, named, spans: dict, given: Mapping | None,
                  given_ref: ModelConfigRef | None, sink: DiagnosticSink):
    """``(config, ModelConfigRef)`` a schedule of model ``adapter`` is
    resolved with: ``given`` (``--model-config``, the live model) in place
    of the schedule's ``model_config`` line ``named`` (``(ref, config)``
    or None), else that line's, else the config embedded for the model. A
    line naming another model's config is an error at its value."""
    if named is not None:
        wrong = config_model_mismatch(named[1], named[0].name, adapter.NAME)
        if wrong:
            sink.error(wrong, spans["model_config"])
            named = None
    if given is not None:
        ref = given_ref or ModelConfigRef("the given config", "", "given")
        # a config named by a command-line option (--model-config): one
        # line naming the option, as the schedule's line gets at its value
        wrong = config_model_mismatch(given, ref.name, adapter.NAME) \
            if ref.origin.startswith("--") else None
        if wrong:
            sink.error(wrong, Span.file(ref.origin))
            return None, None
        if named is not None:
            ref = dataclasses.replace(ref, replaced=named[0], differs=config_differences(
                named[1], given, adapter))
        return given, ref
    if named is not None:
        return named[1], named[0]
    return default_config(adapter.NAME), default_config_ref(adapter.NAME)


_EXAMPLE = {"model": f"model {DEFAULT_ADAPTER}", "device": "device h200", "tp": "tp 4"}


def _resolve_windows(draft: Draft, adapter, kinds, sink) -> list[Window]:
    """Check every merged window against the model's hook catalogue and
    layer kinds and build the resolved ``Window``s (declaration order).
    Problems go to ``sink``; a window with an error in its hook or budget is
    left out of the result."""
    hooks = adapter.HOOKS_BY_NAME if adapter else {}
    order: dict[str, int] = {name: i for i, name in enumerate(draft.windows)}
    resolved: list[Window] = []
    # Windows whose layers could not be resolved (their error is reported):
    # the shared-layer check below would only cascade from it.
    unresolved: set[str] = set()
    for index, (name, w) in enumerate(draft.windows.items()):
        spans = {"name": w["name"].span}
        hook = w["hook"]
        ok = _check_hook(name, w, hooks, adapter, spans, sink)
        budget = None
        if w["budget"] is None:
            sink.error(f"window '{name}' has no budget; add e.g. 'budget 20MB'",
                       w["name"].span)
            ok = False
        else:
            spans["budget"] = w["budget"].span
            budget = size_bytes(w["budget"], sink, "budget")
            ok = ok and budget is not None
            if budget == 0 and w["budget"] is w["node"].budget:
                # 0 B is how a variant switches a window off: through an
                # override ('set window.A.budget = 0MB', --set), not here
                sink.error(f"window '{name}' has budget {w['budget'].text}: a window "
                           f"of 0 B fetches nothing; remove it, or switch it off in a "
                           f"variant with 'set window.{name}.budget = 0MB' (or --set "
                           f"window.{name}.budget=0MB)", w["budget"].span)
                ok = False
        layers, layers_ok = _window_layers(name, w, kinds, spans, sink,
                                           adapter.SELECTORS if adapter else None)
        if not layers_ok:
            unresolved.add(name)
        if ok and adapter and kinds:
            _check_hook_fires(name, w, hooks[hook.text], layers, kinds, sink)
        _check_carry(name, w, index, ok, draft.windows, order, hooks, spans, sink)
        for t in w["targets"]:
            for pat in t.patterns + t.excludes:
                if pat.text.count("[") != pat.text.count("]"):
                    sink.error(f"unbalanced '[' in pattern '{pat.text}'", pat.span)
        kernel = None
        if w["kernel"] is not None:
            spans["kernel"] = w["kernel"].span
            kernel = fill_mode(w["kernel"], sink)
            ok = ok and kernel is not None
        if ok:
            carry = w["carry"]
            resolved.append(Window(
                name=name, hook=hook.text, budget=budget, layers=tuple(sorted(layers)),
                carry=carry.text if carry is not None else None,
                targets=tuple(w["targets"]), index=index, span=w["span"],
                spans=spans, kernel=kernel))
    _check_carry_layers(resolved, unresolved, sink)
    return resolved


def _check_hook(name: str, w: dict, hooks, adapter, spans: dict,
                sink: DiagnosticSink) -> bool:
    """Whether window ``name`` names a hook point of the adapter (records
    the ``at`` span in ``spans``, problems in ``sink``)."""
    hook = w["hook"]
    if hook is None:
        sink.error(f"window '{name}' has no hook point; add 'at HOOK' "
                   f"(e.g. at attn.pre_all_reduce)", w["name"].span)
        return False
    spans["at"] = hook.span
    if adapter and hook.text not in hooks:
        sink.error(f"unknown hook point '{hook.text}'{suggest(hook.text, hooks)}",
                   hook.span, notes=(f"{adapter.NAME} hook points: "
                                     + ", ".join(hooks),))
        return False
    return True


def _window_layers(name: str, w: dict, kinds, spans: dict,
                   sink: DiagnosticSink, selectors) -> tuple[set[int], bool]:
    """The layers window ``name`` fires in (all layers without a
    selector; ``selectors``: the adapter's ``SELECTORS``, None for an
    unknown model) and whether they resolved without error."""
    if w["layers"] is None:
        layers = set(range(len(kinds or ())))
        return layers, bool(kinds)
    spans["layers"] = w["layers"].span
    before = len(sink.diagnostics)
    layers = select_layers(w["layers"], kinds, sink, selectors)
    errors = len(sink.diagnostics) != before
    # An empty result already explained by an error in the selector
    # itself (unknown name, bad index) is not reported twice.
    if kinds and not layers and not errors:
        sink.error(f"the layer selector of window '{name}' selects no layer",
                   w["layers"].span)
    return layers, bool(kinds) and bool(layers) and not errors


def _check_hook_fires(name: str, w: dict, hook, layers, kinds,
                      sink: DiagnosticSink) -> None:
    """Error when ``hook`` does not exist in some layer the window selects."""
    missing = sorted(i for i in layers if not hook.exists_in(kinds[i]))
    if missing:
        kind_names = sorted({str(kinds[i]) for i in missing})
        sink.error(
            f"hook point '{hook.name}' does not fire in layers "
            f"{format_layers(missing)} ({', '.join(kind_names)}) selected by "
            f"window '{name}'", (w["layers"] or w["hook"]).span)


def _check_carry(name: str, w: dict, index: int, ok: bool, windows: dict,
                 order: dict, hooks, spans: dict, sink: DiagnosticSink) -> None:
    """Errors for a ``carry`` into itself, into an unknown window, or into a
    window that fires earlier in the layer."""
    carry = w["carry"]
    if carry is None:
        return
    spans["carry"] = carry.span
    target = windows.get(carry.text)
    if carry.text == name:
        sink.error(f"window '{name}' carries into itself", carry.span)
    elif target is None:
        sink.error(f"carry to unknown window '{carry.text}'"
                   f"{suggest(carry.text, windows)}", carry.span)
    elif ok and target["hook"] is not None and target["hook"].text in hooks:
        hook = w["hook"]
        src = hooks[hook.text].order
        dst = hooks[target["hook"].text].order
        later = dst > src or (dst == src and order[carry.text] > index)
        if not later:
            sink.error(
                f"carry from window '{name}' ({hook.text}) to '{carry.text}' "
                f"({target['hook'].text}) goes back in time: bytes can only "
                f"carry to a window that fires later in the layer", carry.span)


def _check_carry_layers(resolved: list[Window], unresolved: set[str],
                        sink: DiagnosticSink) -> None:
    """Error when a window carries into one it shares no layer with."""
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


def _cli_overrides(overrides: Sequence[str], sink: DiagnosticSink) -> list:
    out = []
    for i, arg in enumerate(overrides, 1):
        ov = parse_override_arg(arg, i)
        sink.add_source(ov.span.path, arg)
        out.append(ov)
    return out


def load_schedule(path: str | os.PathLike, overrides: Sequence[str] = (),
                  model_config: Mapping | None = None,
                  config_ref: ModelConfigRef | None = None) -> Schedule:
    """Read, parse and resolve the schedule at ``path``.

    ``overrides`` are CLI-style ``KEY=VALUE`` strings (``window.B.budget=25MB``,
    ``policy=evict_normal``), applied after the file's own ``set`` lines;
    ``model_config``/``config_ref``: a config in place of the schedule's
    (``resolve``). Raises ``L2sInputError`` (unreadable file),
    ``L2sSyntaxError`` or ``L2sSemanticError`` (every semantic problem of
    the run at once)."""
    sink = DiagnosticSink()
    cli = _cli_overrides(overrides, sink)
    progress.stage(f"reading and parsing {path}")
    chain = _load_chain(str(path), sink)
    if not chain:
        sink.raise_if_errors(L2sSemanticError)
    return resolve(chain, cli, model_config, sink, config_ref)


def load_schedule_text(text: str, path: str = "<string>",
                       overrides: Sequence[str] = (),
                       model_config: Mapping | None = None,
                       config_ref: ModelConfigRef | None = None) -> Schedule:
    """``load_schedule`` for in-memory text; ``extends`` resolves relative to
    the current directory, then among the shipped schedules."""
    sink = DiagnosticSink()
    sink.add_source(path, text)
    cli = _cli_overrides(overrides, sink)
    chain = _with_bases(parse(text, path), path, sink, (os.path.realpath(path),))
    return resolve(chain, cli, model_config, sink, config_ref)
