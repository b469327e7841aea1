"""Reading a plan.json: its shape against ``l2sched/data/plan.schema.json``
(``jsonschema``), then its values against the model it names (the adapter's
hook catalogue, the per-rank inventory of ``model_config``, else the
config its ``meta.model_config`` names, else the embedded one), the device profile names and itself (a window issued
twice in a layer, bytes fetched twice in a step, a fill over its budget).

Every problem is located at ``path:line:col`` of the JSON value it is about
(an unknown key at the key, a missing key at the object that lacks it), and
all of a file's problems are reported in one ``L2sInputError``.
``compiler.json_spans`` is the locator.
"""

from __future__ import annotations

import functools
import json
import os
from collections import defaultdict
from importlib import resources
from json.decoder import scanstring
from typing import Any, Mapping

# json_spans and path_text are also read from here (tests/test_plan_schema.py)
from l2sched.compiler.json_spans import JsonPath, inline_refs, json_spans, path_text  # noqa: F401
from l2sched.device import device_names
from l2sched.errors import DiagnosticSink, L2sError, L2sInputError, LineIndex, Span, suggest
from l2sched.files import parse_json_text
from l2sched.model.adapters import adapter_names, get_adapter
from l2sched.model.config import (
    config_file_arg,
    config_model_mismatch,
    default_config,
    load_model_config,
)
from l2sched.model.inventory import TPSplitError, analytical_inventory

@functools.lru_cache(maxsize=1)
def plan_schema() -> dict:
    """The plan's JSON Schema (package data ``l2sched/data/plan.schema.json``)."""
    return json.loads(resources.files("l2sched.data").joinpath(
        "plan.schema.json").read_text(encoding="utf-8"))


def _short(v: Any) -> str:
    """``v`` as JSON, a long number by its digit count, a long text cut."""
    if isinstance(v, int) and not isinstance(v, bool) and len(str(abs(v))) > 20:
        return f"a {len(str(abs(v)))}-digit number"
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_WORDS = {"integer": "an integer", "string": "a string", "boolean": "true or false",
               "array": "a list", "object": "an object", "number": "a number"}


#: What an enumerated field names, for its message.
_ENUM_WORDS = {"kernel": "fill kernel", "policy": "cache policy", "reason": "reason"}


def _json_type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "object", type(None): "null"}.get(type(v), "value")


class _Reporter:
    """The diagnostics of one plan file, each at the text of its JSON path."""

    def __init__(self, text: str, path: str):
        self.path = path
        self.sink = DiagnosticSink()
        self.sink.add_source(path, text)
        self.text = text
        self.lines = LineIndex(text)  # many spans of one text: found by bisection
        self.values, self.keys, self.dups = json_spans(text)
        self.flagged: set[JsonPath] = set()

    def span(self, path: JsonPath, at_key: bool = False) -> Span:
        """The span of the value at ``path`` (its key with ``at_key``); the
        nearest enclosing value that is written, else 1:1."""
        p = tuple(path)
        if at_key and p in self.keys:
            start = self.keys[p]
            end = scanstring(self.text, start + 1)[1]
        else:
            while p and p not in self.values:
                p = p[:-1]
            start, end = self.values.get(p, (0, 1))
        line, col = self.lines.line_col(start)
        end_line, end_col = self.lines.line_col(max(end, start + 1))
        return Span(self.path, line, col, end_line, end_col)

    def error(self, path: JsonPath, message: str, at_key: bool = False,
              notes: tuple[str, ...] = ()) -> None:
        self.flagged.add(tuple(path))
        where = path_text(path)
        self.sink.error(f"{where}: {message}" if where else message,
                        self.span(path, at_key), notes=notes)

    def ok(self, path: JsonPath) -> bool:
        """True when no problem was reported at ``path`` or above it."""
        p = tuple(path)
        return not any(p[:i] in self.flagged for i in range(len(p) + 1))


def _schema_problems(rep: _Reporter, data: Any) -> None:
    """Every shape problem ``jsonschema`` finds, worded per keyword."""
    import jsonschema  # a dependency of l2sched (pyproject); loaded when a plan is read

    base = jsonschema.Draft202012Validator
    # JSON Schema counts 45.0 as an integer; a plan's counts are written as integers
    strict = base.TYPE_CHECKER.redefine(
        "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    validator = jsonschema.validators.extend(base, type_checker=strict)(
        inline_refs(plan_schema()))
    for err in validator.iter_errors(data):
        path, v, kw = tuple(err.absolute_path), err.instance, err.validator
        if kw == "type":
            want = err.validator_value
            rep.error(path, f"expected {_TYPE_WORDS.get(want, want)}, got "
                      f"{_json_type(v)} {_short(v)}")
        elif kw in ("minimum", "maximum"):
            bound = err.validator_value
            word = "at least" if kw == "minimum" else "at most"
            if path[-1:] == ("nbytes",) and bound == -1:
                rep.error(path, f"must be at least 1 (or -1 for the whole of a lazy "
                          f"tensor), got {_short(v)}")
            else:
                rep.error(path, f"must be {word} {bound:,}, got {_short(v)}")
        elif kw == "enum":
            choices = [c for c in err.validator_value if isinstance(c, str)]
            shown = ", ".join(c or '"" (the device profile\'s default)' for c in choices)
            hint = suggest(v, [c for c in choices if c]) if isinstance(v, str) else ""
            what = _ENUM_WORDS.get(path[-1] if path else "", "value")
            rep.error(path, f"unknown {what} {_short(v)}{hint} (one of: {shown})")
        elif kw == "required":
            names = [n for n in err.validator_value if n not in v]
            rep.error(path, ("" if path else "not an l2sched plan: ")
                      + f"missing key{'s' if len(names) > 1 else ''} "
                      + ", ".join(f"'{n}'" for n in names))
        elif kw == "additionalProperties":
            props = list(err.schema.get("properties", {}))
            for k in v:
                if k not in props:
                    rep.error(path + (k,), f"unknown key{suggest(k, props)} "
                              f"(keys: {', '.join(props)})", at_key=True)
        elif kw == "minLength":
            rep.error(path, "must not be empty")
        elif kw == "minItems":
            rep.error(path, "a fill fetches at least one byte range; got none")
        else:  # pragma: no cover - every keyword the schema uses is worded above
            rep.error(path, err.message)


def _bad_layer(rep: _Reporter, path: JsonPath, layer: Any, count: int | None) -> bool:
    """Report ``layer`` outside the model's layers; True when it is bad."""
    if count is not None and isinstance(layer, int) and layer >= count:
        rep.error(path, f"layer {layer} does not exist; the model has layers "
                  f"0..{count - 1}")
        return True
    return False


def _list(d: Any, key: str) -> list:
    """``d[key]`` when ``d`` is an object and that is a list, else ``[]``."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, list) else []


def _is_device_file(name: str) -> bool:
    return name.endswith(".toml") or "/" in name or os.sep in name


def _model_problems(rep: _Reporter, d: Mapping, model_config) -> None:
    """The plan's values against its model, device names and itself."""
    check = _ModelCheck(rep, d, model_config)
    overlaps: dict = defaultdict(list)  # (layer, tensor) -> [(start, end, path)]
    seen: dict = {}
    for k, issue in enumerate(_list(d, "issues")):
        if isinstance(issue, dict):
            check.issue(("issues", k), issue, seen, overlaps)
    _twice_fetched(rep, overlaps)
    for k, lo in enumerate(_list(d, "left_over")):
        if isinstance(lo, dict):
            check.left_over(("left_over", k))
    for k, e in enumerate(_list(d, "empty")):
        base = ("empty", k)
        if isinstance(e, dict):
            _bad_layer(rep, base + ("layer",), check.get(base + ("layer",), int), check.count)
            check.hook(base + ("hook",))


class _ModelCheck:
    """What ``_model_problems`` checks a plan against: its model adapter,
    the inventory of its model at its TP layout (None when the model has no
    embedded config, or the plan's layer count is another model's), the
    layer count, the hook catalogue; the header's problems are reported
    when it is made."""

    def __init__(self, rep: _Reporter, d: Mapping, model_config):
        self.rep, self.d = rep, d
        get = self.get
        model = get(("model",), str)
        if model is not None and model not in adapter_names():
            rep.error(("model",), f"unknown model adapter '{model}'"
                      f"{suggest(model, adapter_names())} (adapters: "
                      f"{', '.join(adapter_names())})")
            model = None
        device = get(("device",), str)
        if device is not None and device not in device_names() and \
                not _is_device_file(device):
            rep.error(("device",), f"unknown device profile '{device}'"
                      f"{suggest(device, device_names())} (shipped: "
                      f"{', '.join(device_names())}, or a .toml file)")
        tp, rank, ep = get(("tp",), int), get(("tp_rank",), int), get(("ep",), bool)
        if tp is not None and rank is not None and rank >= tp:
            rep.error(("tp_rank",), f"TP rank {rank} is outside 0..{tp - 1} (tp is {tp})")
            rank = None
        self.model, self.tp = model, tp
        self.inventory = None
        other = False  # a config of another model: its tensors are not this plan's
        if model_config is None and model is not None:
            model_config, other = self._meta_config(model)
        elif model is not None:
            wrong = config_model_mismatch(model_config, "", model, "plan")
            if wrong:
                rep.error(("model",), "--model-config: " + wrong)
                other = True
        if model is not None and tp is not None and rank is not None and ep is not None \
                and not other:
            try:
                config = model_config if model_config is not None else default_config(model)
                self.inventory = analytical_inventory(config, tp=tp, ep=ep, tp_rank=rank,
                                                      adapter=model)
            except TPSplitError as e:
                rep.error(("tp",), f"the model cannot run at tp {tp}: {e.reason}")
            except (L2sError, KeyError, ValueError, OSError):
                pass  # no embedded config for this model: its tensors are not checked
        inv = self.inventory
        count = len(inv.layers) if inv is not None else None
        num_layers = get(("num_layers",), int)
        if count is not None and num_layers is not None and num_layers != count:
            rep.error(("num_layers",), f"{model} ({inv.model_name}) has {count} "
                      f"decoder layers, not {num_layers}",
                      notes=("the plan records the model config it was compiled with "
                             "in meta.model_config (none: the embedded one); "
                             "--model-config reads it with another",))
            self.inventory = None  # its layers and tensors are another model's
            count = None
        self.count = num_layers if count is None else count
        self.hooks = get_adapter(model).HOOKS_BY_NAME if model is not None else None

    def _meta_config(self, model: str):
        """``(config, other)``: the config ``meta.model_config`` names
        (``compile`` records a schedule's ``model_config`` there: a shipped
        config's name or a file's absolute path), None when the plan names
        none; a config that cannot be read, or a config of another model
        than ``model`` (``other`` True), is an error at that value."""
        name = self.get(("meta", "model_config"), str)
        if name is None:
            return None, False
        try:
            config = load_model_config(config_file_arg(name))
        except L2sError as e:
            self.rep.error(("meta", "model_config"), f"model config '{name}': "
                           f"{e.diagnostics[0].span}: {e.diagnostics[0].message}")
            return None, False
        wrong = config_model_mismatch(config, name, model, "plan")
        if wrong:
            self.rep.error(("meta", "model_config"), wrong)
            return None, True
        return config, False

    def get(self, path: JsonPath, typ):
        """The value at ``path`` when it is there, of type ``typ`` and not
        already reported by the schema check; else None."""
        cur: Any = self.d
        for p in path:
            try:
                cur = cur[p]
            except (KeyError, IndexError, TypeError):
                return None
        if not self.rep.ok(path) or not isinstance(cur, typ) or (
                typ is int and isinstance(cur, bool)):
            return None
        return cur

    def hook(self, path: JsonPath) -> None:
        """A hook point name at ``path`` must be in the model's catalogue."""
        hook = self.get(path, str)
        if self.hooks is not None and hook is not None and hook not in self.hooks:
            self.rep.error(path, f"unknown hook point '{hook}' of {self.model}"
                           f"{suggest(hook, self.hooks)}")

    def entry(self, path: JsonPath, layer_path: JsonPath):
        """The inventory entry a ``tensor`` at ``path`` names, or None."""
        layer, tensor = self.get(layer_path, int), self.get(path, str)
        inv = self.inventory
        if inv is None or layer is None or tensor is None or layer >= self.count:
            return None
        try:
            return inv.tensor(layer, tensor)
        except KeyError:
            names = [t.path for t in inv.tensors(layer)]
            self.rep.error(path, f"no tensor '{tensor}' in layer {layer} "
                           f"({inv.kinds[layer]}) of {self.model} at TP{self.tp}"
                           f"{suggest(tensor, names)}")
            return None

    def issue(self, base: JsonPath, issue: dict, seen: dict, fetched: dict) -> None:
        """One issue: its layer and hook, a repeat of an earlier one, each
        range (``range``), its bytes against its budget."""
        rep, get = self.rep, self.get
        layer = get(base + ("layer",), int)
        _bad_layer(rep, base + ("layer",), layer, self.count)
        self.hook(base + ("hook",))
        key = (get(base + ("window",), str), layer, get(base + ("hook",), str))
        if None not in key and key in seen:
            rep.error(base, f"duplicates issues[{seen[key]}]: window '{key[0]}' is "
                      f"issued at {key[2]} of layer {layer} twice")
        if None not in key:
            seen.setdefault(key, base[1])
        total = 0
        for j, r in enumerate(_list(issue, "ranges")):
            if isinstance(r, dict):
                total += self.range(base + ("ranges", j), layer, fetched)
        budget = get(base + ("budget",), int)
        if budget is not None and total > budget and rep.ok(base + ("ranges",)):
            rep.error(base + ("budget",), f"the fill fetches {total:,} B, more than "
                      f"its budget of {budget:,} B")

    def range(self, rp: JsonPath, layer, fetched: dict) -> int:
        """One byte range of an issue fired in ``layer``; its span goes into
        ``fetched``. Returns its bytes counted against the budget."""
        rep, get, count, tp = self.rep, self.get, self.count, self.tp
        rl = get(rp + ("layer",), int)
        if _bad_layer(rep, rp + ("layer",), rl, count):
            return 0
        if (layer is not None and rl is not None and count
                and rl not in (layer, (layer + 1) % count)):
            rep.error(rp + ("layer",), f"a fill issued in layer {layer} fetches "
                      f"tensors of layer {layer} or {(layer + 1) % count}, not {rl}")
        off, nb = get(rp + ("offset",), int), get(rp + ("nbytes",), int)
        lazy = get(rp + ("lazy",), bool) or False
        if nb == 0:
            rep.error(rp + ("nbytes",), "a range of 0 B (a fill range holds at "
                      "least 1 byte)")
        elif nb == -1 and not lazy:
            rep.error(rp + ("nbytes",), "-1 (the whole tensor) is only for a lazy "
                      "range (\"lazy\": true)")
        entry = self.entry(rp + ("tensor",), rp + ("layer",))
        if entry is None or off is None or nb is None:
            return 0
        if lazy and not entry.lazy:
            rep.error(rp + ("lazy",), f"'{entry.path}' is not a lazy tensor (it "
                      f"exists before the first forward)")
        size = entry.nbytes
        if off >= size:
            rep.error(rp + ("offset",), f"offset {off:,} is past the end of "
                      f"'{entry.path}' ({size:,} B per rank at TP{tp})")
        elif nb > 0 and off + nb > size:
            rep.error(rp + ("nbytes",), f"offset {off:,} + nbytes {nb:,} runs past "
                      f"the end of '{entry.path}' ({size:,} B per rank at TP{tp})")
        else:
            fetched[(rl, entry.path)].append((off, size if nb == -1 else off + nb, rp))
            return max(nb, 0)
        return 0

    def left_over(self, base: JsonPath) -> None:
        """One left-over entry: its layers and its bytes against the tensor."""
        rep, get = self.rep, self.get
        if _bad_layer(rep, base + ("layer",), get(base + ("layer",), int), self.count):
            return
        fired = get(base + ("fired_in",), int)
        if fired is not None and fired >= 0:
            _bad_layer(rep, base + ("fired_in",), fired, self.count)
        entry = self.entry(base + ("tensor",), base + ("layer",))
        nb = get(base + ("nbytes",), int)
        if entry is not None and nb is not None and nb > entry.nbytes:
            rep.error(base + ("nbytes",), f"{nb:,} B is more than '{entry.path}' holds "
                      f"({entry.nbytes:,} B per rank at TP{self.tp})")


def _twice_fetched(rep: _Reporter, fetched: dict) -> None:
    """Bytes of one tensor fetched by two ranges of one step."""
    for (rl, tensor), spans in fetched.items():
        spans.sort()
        reach, owner = -1, None
        for start, end, rp in spans:
            if start < reach:
                rep.error(rp + ("offset",), f"bytes {start:,}..{min(end, reach):,} of "
                          f"'{tensor}' in layer {rl} are fetched twice in one step "
                          f"(also by {path_text(owner)})")
            if end > reach:
                reach, owner = end, rp


def check_plan_text(text: str, path: str = "<plan>", model_config=None) -> dict:
    """The plan JSON ``text`` (of file ``path``) as a dict, after checking
    its shape (``plan.schema.json``) and its values against its model
    (``model_config``: the config it was compiled with; default the model's
    embedded one). Raises ``L2sInputError`` with every problem, each at
    ``path:line:col`` of the value; ``not an l2sched plan: ...`` for text
    that is not JSON or not an object."""
    data = parse_json_text(text, path, "not an l2sched plan: ")
    rep = _Reporter(text, path)
    if not isinstance(data, dict):
        rep.error((), f"not an l2sched plan: expected a JSON object, got "
                  f"{_json_type(data)}")
        rep.sink.raise_if_errors(L2sInputError)
    for dup, at in rep.dups:
        rep.error(dup, "key written twice in one object (JSON keeps the last)",
                  at_key=True)
    old = [(("issues", k, "ranges", j), r) for k, i in enumerate(_list(data, "issues"))
           for j, r in enumerate(_list(i, "ranges")) if isinstance(r, dict) and "length" in r]
    if old:
        rep.error(old[0][0] + ("length",), "written by an older l2sched (ranges have "
                  "'length', not 'nbytes'); compile the schedule again", at_key=True)
        rep.sink.raise_if_errors(L2sInputError)
    try:
        _schema_problems(rep, data)
        _model_problems(rep, data, model_config)
    except RecursionError:
        rep.error(("meta",), "values nested too deeply to read")
    rep.sink.raise_if_errors(L2sInputError)
    return data
