"""Compile stage: a resolved ``Schedule`` + a tensor inventory -> ``Plan``.

For every decoder layer, windows fire in timeline order (hook order from the
adapter's catalogue, then declaration order). Each window's queue is its
carried-in bytes first, then its own targets expanded against the inventory
(consumption order). Budgets are greedy: whole tensors while they fit; the
tensor that straddles the budget splits into a head rounded down to
``SPLIT_GRANULARITY`` (4 KiB) and a tail, and the tail plus everything after
it flows to the window named by ``carry`` (same layer). What no window takes
is reported in ``Plan.left_over``. No byte is fetched twice in one decode
step: ranges are deduplicated per storage, and a strided view (MLA's
``W_UK_T``/``W_UV``) is fetched as the storage of the tensor it views.

Pure Python; imports neither torch nor vLLM.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import os
import re
from collections import defaultdict
from typing import Mapping

from l2sched import progress
from l2sched.compiler.plan import ByteRange, EmptyIssue, LeftOver, Plan, WindowIssue
from l2sched.errors import (
    DiagnosticSink,
    L2sCompileError,
    L2sSemanticError,
)
from l2sched.lang.schedule import Schedule, Window
from l2sched.model.adapters import get_adapter
from l2sched.model.config import default_config
from l2sched.model.inventory import Inventory, TPSplitError, analytical_inventory
from l2sched.units import SPLIT_GRANULARITY, plural


_GLOB_CHARS = re.compile(r"[*?\[]")


def is_literal(pattern: str) -> bool:
    """True when ``pattern`` has no glob character (``*``, ``?``, ``[``):
    it matches a path equal to it or under it, no regex needed."""
    return _GLOB_CHARS.search(pattern) is None


def module_prefixes(path: str) -> list[str]:
    """``path`` and every module that contains it: ``a.b.c`` -> ``a``,
    ``a.b``, ``a.b.c`` (what a pattern without glob characters matches)."""
    out = [path[:i] for i, c in enumerate(path) if c == "."]
    out.append(path)
    return out


def pattern_matches(pattern: str, path: str) -> bool:
    """True when glob ``pattern`` matches tensor ``path`` itself or names a
    module that contains it (``self_attn.o_proj`` matches
    ``self_attn.o_proj.weight``). Shell-style globs, case-sensitive. A
    pattern without glob characters is compared as text; else one regex
    match per call (``pattern_regex``, compiled once per pattern)."""
    if is_literal(pattern):
        return path == pattern or path.startswith(pattern + ".")
    return pattern_regex(pattern).match(path) is not None


class PathIndex:
    """Which of one layer's tensor paths (consumption order) glob patterns
    match (``pattern_matches``), at a cost that does not grow with the
    paths a pattern misses: a pattern without glob characters is one dict
    lookup (``module_prefixes`` of every path, indexed); a glob is matched
    only against the paths that start with its text before the first glob
    character (found by bisection in the sorted paths), so its regex is
    compiled only when some path could match. A target of 50,000 patterns
    that match nothing costs 50,000 lookups, not 50,000 x tensors
    matches."""

    def __init__(self, paths: tuple[str, ...]):
        self.paths = paths
        self.by_prefix: dict[str, list[int]] = {}
        for i, path in enumerate(paths):
            for m in module_prefixes(path):
                self.by_prefix.setdefault(m, []).append(i)
        order = sorted(range(len(paths)), key=paths.__getitem__)
        self.sorted_paths = [paths[i] for i in order]
        self.sorted_index = order
        #: pattern -> ``matching``'s answer (a schedule's patterns recur in
        #: every window expansion and rule)
        self.memo: dict[str, list[int]] = {}
        #: the work ``matching`` did: patterns looked up (``literal``,
        #: ``glob``) and paths a glob's regex was tried on (``tried``)
        self.calls = {"literal": 0, "glob": 0, "tried": 0}

    def matching(self, pattern: str) -> list[int]:
        """Indices of the paths ``pattern`` matches, ascending."""
        got = self.memo.get(pattern)
        if got is None:
            got = self.memo[pattern] = self._match(pattern)
        return got

    def _match(self, pattern: str) -> list[int]:
        if is_literal(pattern):
            self.calls["literal"] += 1
            return self.by_prefix.get(pattern, [])
        self.calls["glob"] += 1
        lead = _GLOB_CHARS.split(pattern, 1)[0]
        lo = bisect.bisect_left(self.sorted_paths, lead)
        hi = lo
        while hi < len(self.sorted_paths) and self.sorted_paths[hi].startswith(lead):
            hi += 1
        if lo == hi:
            return []
        self.calls["tried"] += hi - lo
        rx = pattern_regex(pattern)
        return sorted(self.sorted_index[k] for k in range(lo, hi)
                      if rx.match(self.sorted_paths[k]) is not None)

    def indices(self, patterns) -> set[int]:
        """Indices of the paths some pattern of ``patterns`` matches."""
        out: set[int] = set()
        for p in patterns:
            out.update(self.matching(p))
        return out


@functools.lru_cache(maxsize=64)
def path_index(paths: tuple[str, ...]) -> PathIndex:
    """The ``PathIndex`` of ``paths``, built once per distinct tuple (a
    model has a few layer kinds)."""
    return PathIndex(paths)


def layer_index(inventory, layer: int) -> PathIndex:
    """The ``PathIndex`` of layer ``layer``'s tensor paths."""
    return path_index(tuple(e.path for e in inventory.tensors(layer)))


@functools.lru_cache(maxsize=1 << 17)
def pattern_regex(pattern: str) -> re.Pattern:
    """The compiled regex of glob ``pattern`` that matches a tensor path
    when the pattern matches the path or one of its module prefixes (the
    path up to a ``.``): ``fnmatch.translate`` followed by an optional
    ``.rest``. Cached per pattern (a schedule's patterns are few and
    recur in every layer; a pair cache thrashed at thousands of patterns)."""
    body = fnmatch.translate(pattern)
    assert body.endswith(r"\Z")
    return re.compile(body[:-2] + r"(?:\..*)?\Z", re.DOTALL)


def _entries(inventory, layer: int):
    return inventory.tensors(layer)


def window_matches(window: Window, inventory,
                   layers: dict[str, list[int]]) -> dict[tuple[str, int], list]:
    """For each scope (``this``, ``next``) and target layer of ``layers``
    (scope -> layers), ``(target position, indices)`` of each target of
    ``window`` with that scope that names some of the layer's tensors, in
    source order: the indices (consumption order) of its patterns' matches
    less its excludes', lazily created tensors only for a ``lazy`` target.
    One pass over the targets."""
    looked = {scope: [(tl, layer_index(inventory, tl), _entries(inventory, tl))
                      for tl in tls] for scope, tls in layers.items()}
    out: dict[tuple[str, int], list] = {(scope, tl): [] for scope, tls in layers.items()
                                        for tl in tls}
    for pos, target in enumerate(window.targets):
        pats = [p.text for p in target.patterns]
        for tl, index, entries in looked.get(target.scope, ()):
            wanted = index.indices(pats)
            if wanted and target.excludes:
                wanted -= index.indices(p.text for p in target.excludes)
            picks = [i for i in sorted(wanted) if target.lazy or not entries[i].lazy]
            if picks:
                out[(target.scope, tl)].append((pos, picks))
    return out


def target_matches(window: Window, scope: str, inventory,
                   layer: int) -> list[tuple[int, list[int]]]:
    """``window_matches`` of one scope and target layer."""
    return window_matches(window, inventory, {scope: [layer]})[(scope, layer)]


def expand_targets(window: Window, layer: int, inventory,
                   own: range | None = None, matches=None) -> list[tuple[int, object]]:
    """The inventory entries ``window`` names when it fires in ``layer``, in
    fill order: targets in source order, each expanded in the inventory's
    consumption order, without repeats. Returns ``(target_layer, entry)``.
    ``own``: the layers this rank runs (pipeline parallel); a ``next``
    target outside them (another rank's layer) names nothing.
    ``matches(scope, target_layer)``: ``target_matches`` of the window (a
    cache of it); the cost grows with the targets that name a tensor, not
    with those that name none."""
    count = len(inventory.layers)
    if matches is None:
        def matches(scope, tl):
            return target_matches(window, scope, inventory, tl)
    parts = []
    for scope, tl in (("this", layer), ("next", (layer + 1) % count)):
        if own is None or tl in own:
            parts += [(pos, tl, picks) for pos, picks in matches(scope, tl)]
    parts.sort(key=lambda part: part[0])  # targets in source order
    out: list[tuple[int, object]] = []
    seen: set[tuple[int, str]] = set()
    for _pos, tl, picks in parts:
        entries = _entries(inventory, tl)
        for i in picks:
            entry = entries[i]
            if (tl, entry.path) not in seen:
                seen.add((tl, entry.path))
                out.append((tl, entry))
    return out


class TargetExpander:
    """``expand_targets`` for every (window, layer) of one inventory,
    computed once per window and pair of layer contents: layers holding the
    same tensors (every layer of one kind) give the same expansion, so a
    window that fires in 45 layers matches its patterns against the tensor
    paths of 2-3 layer kinds, not 45 times, and each target once per
    scope and layer contents (``target_matches``). Same results as
    ``expand_targets`` (``own``: the rank's layers, as there)."""

    def __init__(self, inventory, own: range | None = None):
        self.inventory = inventory
        self.own = own
        self.count = len(inventory.layers)
        ids: dict = {}
        # layer -> small int naming its contents (paths and lazy flags)
        self.sig = [ids.setdefault(tuple((e.path, e.lazy) for e in layer), len(ids))
                    for layer in inventory.layers]
        self.cache: dict = {}
        self.matched: dict = {}

    def target_layers(self, window: Window) -> dict[str, list[int]]:
        """Per target scope (``this``, ``next``), the layers ``window``'s
        targets name tensors of, one per distinct tensor list (``sig``)."""
        out = {}
        for scope, step in (("this", 0), ("next", 1)):
            reps: dict = {}
            for layer in window.layers:
                tl = (layer + step) % self.count
                reps.setdefault(self.sig[tl], tl)
            out[scope] = list(reps.values())
        return out

    def _matches(self, window: Window):
        """``target_matches`` of ``window`` per scope and layer contents, all
        computed in one pass over its targets (``window_matches``)."""
        wkey = (window.index, window.name)
        if wkey not in self.matched:
            got = window_matches(window, self.inventory, self.target_layers(window))
            self.matched[wkey] = {(scope, self.sig[tl]): v for (scope, tl), v in got.items()}
        mine = self.matched[wkey]

        def matches(scope: str, tl: int):
            got = mine.get((scope, self.sig[tl]))
            if got is None:  # a layer the window does not fire in or next to
                got = mine[(scope, self.sig[tl])] = target_matches(
                    window, scope, self.inventory, tl)
            return got
        return matches

    def expand(self, window: Window, layer: int) -> list[tuple[int, object]]:
        """``expand_targets(window, layer, inventory)``."""
        nxt = (layer + 1) % self.count
        mine = self.own is None or nxt in self.own
        key = (window.index, window.name, self.sig[layer], self.sig[nxt], mine)
        picks = self.cache.get(key)
        if picks is None:
            picks = self.cache[key] = [
                (tl != layer, self.inventory.tensors(tl).index(e))
                for tl, e in expand_targets(window, layer, self.inventory, self.own,
                                            self._matches(window))]
        tensors = (self.inventory.tensors(layer), self.inventory.tensors(nxt))
        return [(nxt if is_next else layer, tensors[is_next][i]) for is_next, i in picks]


def storage_entry(inventory, layer: int, entry):
    """The entry whose storage ``entry`` occupies: itself, or for a strided
    view (``view_of``, e.g. MLA ``W_UK_T``/``W_UV`` of ``kv_b_proj.weight``)
    the tensor it views. A view is fetched as its base storage, once: the
    views' spans overlap and together cover it
    (the adapter's ``TensorSpec.view_of``; docs/sources.md)."""
    if getattr(entry, "view_of", ""):
        return inventory.tensor(layer, entry.view_of)
    return entry


class _Coverage:
    """Byte intervals already fetched per storage in one decode step, with
    the window that fetched each."""

    def __init__(self):
        self.spans: dict = defaultdict(list)

    def subtract(self, key, start: int, end: int, owner: str = ""
                 ) -> tuple[list[tuple[int, int]], set[str]]:
        """Parts of ``[start, end)`` not yet covered, and the owners of the
        parts that were; marks the new parts covered by ``owner``."""
        parts = [(start, end)]
        owners: set[str] = set()
        for s, e, who in self.spans[key]:
            nxt = []
            for a, b in parts:
                if e <= a or s >= b:
                    nxt.append((a, b))
                    continue
                owners.add(who)
                if a < s:
                    nxt.append((a, s))
                if e < b:
                    nxt.append((e, b))
            parts = nxt
        self.spans[key].extend((a, b, owner) for a, b in parts)
        return parts, owners


def _take(queue: list[ByteRange], budget: int) -> tuple[list[ByteRange], list[ByteRange]]:
    """Split ``queue`` at ``budget`` bytes: (taken, remainder). The range
    that straddles the budget splits into a head of the budget still
    unspent, rounded down to ``SPLIT_GRANULARITY``, and a tail; a head of
    0 B leaves the whole range in the remainder."""
    taken: list[ByteRange] = []
    unspent = budget
    for i, p in enumerate(queue):
        if p.nbytes <= unspent:
            taken.append(p)
            unspent -= p.nbytes
            continue
        head = (unspent // SPLIT_GRANULARITY) * SPLIT_GRANULARITY
        rest = list(queue[i + 1:])
        if head > 0:
            taken.append(ByteRange(p.layer, p.tensor, p.offset, head, p.lazy))
            rest.insert(0, ByteRange(p.layer, p.tensor, p.offset + head,
                                 p.nbytes - head, p.lazy))
        else:
            rest.insert(0, p)
        return taken, rest
    return taken, []


def _queue_targets(w: Window, layer: int, expander: TargetExpander,
                   coverage: _Coverage, queue: list) -> tuple[bool, set[str]]:
    """Append to ``queue`` the byte ranges window ``w``'s targets name in
    ``layer`` that no earlier window of the step fetched (marking them
    fetched by ``w``). Returns whether the targets named any tensor and the
    windows that had fetched some of them already."""
    named = False
    taken_by: set[str] = set()
    inventory = expander.inventory
    for tl, entry in expander.expand(w, layer):
        named = True
        store = storage_entry(inventory, tl, entry)
        lazy = entry.lazy and store is entry
        parts, owners = coverage.subtract((tl, store.path), 0, store.nbytes, w.name)
        taken_by |= owners
        queue.extend(ByteRange(tl, store.path, a, b - a, lazy) for a, b in parts)
    return named, taken_by


def compile_plan(schedule: Schedule, inventory, tp_rank: int = 0,
                 hook_order: dict[str, int] | None = None,
                 layers: range | None = None) -> Plan:
    """Compile ``schedule`` for TP rank ``tp_rank`` against ``inventory``
    (``l2sched.model.inventory.Inventory``: per layer, tensors in consumption
    order with ``path``, ``nbytes``, ``lazy`` and optional ``view_of``).

    ``layers``: the decoder layers this rank runs under pipeline parallelism
    (default: all). Windows fire only in them, and a ``next`` target of the
    rank's last layer (another rank's layer, or the wrap to layer 0) names
    nothing: no fill crosses a PP rank.

    Returns a ``Plan`` whose issues are ordered as the side stream sees them
    in one decode step. Raises ``L2sCompileError`` when the inventory's layer
    count differs from the schedule's model or ``tp_rank`` is not in
    ``0..tp-1``."""
    sink = DiagnosticSink()
    for path, text in schedule.sources.items():
        sink.add_source(path, text)
    if not 0 <= tp_rank < schedule.tp:
        sink.error(f"TP rank {tp_rank} is outside 0..{schedule.tp - 1}",
                   schedule.spans.get("tp"))
    count = len(inventory.layers)
    if count != len(schedule.layer_kinds):
        sink.error(f"the inventory has {count} layers but the schedule was resolved "
                   f"for {len(schedule.layer_kinds)}", None)
    sink.raise_if_errors(L2sCompileError)
    if hook_order is None:
        hook_order = {h.name: h.order for h in get_adapter(schedule.model).HOOKS}
    progress.stage(f"compiling {plural(len(schedule.windows), 'window')} over "
                   f"{count} layers")

    issues: list[WindowIssue] = []
    left_over: list[LeftOver] = []
    empty: list[EmptyIssue] = []
    coverage = _Coverage()
    by_name = {w.name: w for w in schedule.windows}
    fires: dict[int, list] = defaultdict(list)  # layer -> windows firing there
    for w in schedule.windows:
        for i in w.layers:
            fires[i].append(w)
    layer_sets = {w.name: set(w.layers) for w in schedule.windows}
    expander = TargetExpander(inventory, layers)
    for layer in range(count) if layers is None else layers:
        active = sorted(fires.get(layer, ()),
                        key=lambda w: (hook_order[w.hook], w.index))
        carried: dict[str, list[ByteRange]] = defaultdict(list)
        for w in active:
            queue = list(carried.pop(w.name, []))
            carried_in = sum(p.nbytes for p in queue)
            named, taken_by = _queue_targets(w, layer, expander, coverage, queue)
            taken, rest = _take(queue, w.budget)
            if taken or carried_in:
                issues.append(WindowIssue(
                    window=w.name, hook=w.hook, layer=layer, budget=w.budget,
                    ranges=tuple(taken),
                    carried_in=carried_in, kernel=w.kernel or schedule.kernel or ""))
            else:
                reason = ("budget" if queue else "taken" if named else
                          "no-match" if w.targets else "nothing-carried")
                empty.append(EmptyIssue(w.name, w.hook, layer, reason,
                                        tuple(sorted(taken_by - {w.name}))))
            if not rest:
                continue
            nxt = by_name.get(w.carry) if w.carry else None
            if nxt is not None and layer in layer_sets[nxt.name]:
                carried[nxt.name].extend(rest)
            else:
                left_over.extend(LeftOver(w.name, p.layer, p.tensor, p.nbytes, layer)
                                 for p in rest)
        for name, pieces in carried.items():  # carry target never fired here
            left_over.extend(LeftOver(name, p.layer, p.tensor, p.nbytes, layer)
                             for p in pieces)
    return Plan(schedule=schedule.name, model=schedule.model, device=schedule.device,
                tp=schedule.tp, tp_rank=tp_rank, ep=schedule.ep,
                policy=schedule.policy, max_tokens=schedule.max_tokens,
                set_aside=schedule.set_aside, num_layers=count,
                issues=tuple(issues), left_over=tuple(left_over),
                empty=tuple(empty), meta=_plan_meta(schedule))


def _plan_meta(schedule: Schedule) -> dict:
    """The plan's ``meta``: ``model_config``, the config a reader of the
    plan checks it against (``plan_check``), when it is not the one
    embedded for the model: a shipped config's name, else the file's
    absolute path. Empty for the embedded one and for a config that is no
    file (the vLLM plugin's live model)."""
    ref = schedule.config_ref
    if ref is None or ref.origin == "default" or not ref.path:
        return {}
    return {"model_config": ref.shipped_name or os.path.abspath(ref.path)}


def schedule_config(schedule: Schedule) -> Mapping:
    """The model config ``schedule`` was resolved with
    (``Schedule.model_config``: its ``model_config`` line's, or a config
    given in its place), else the one embedded for its model."""
    if schedule.model_config is not None:
        return schedule.model_config
    return default_config(schedule.model)


def schedule_inventory(schedule: Schedule, model_config=None,
                       tp_rank: int = 0) -> Inventory:
    """The analytical inventory of ``model_config`` (default:
    ``schedule_config``, the config the schedule was resolved with) at
    ``schedule``'s TP/EP for ``tp_rank``, by the schedule's model adapter.
    Raises ``L2sSemanticError`` at the schedule's ``tp`` setting
    (file:line:col) when the model does not split at that degree."""
    config = model_config if model_config is not None else schedule_config(schedule)
    try:
        return analytical_inventory(config, tp=schedule.tp, ep=schedule.ep,
                                    tp_rank=tp_rank, adapter=schedule.model)
    except TPSplitError as err:
        sink = DiagnosticSink()
        for path, text in schedule.sources.items():
            sink.add_source(path, text)
        sink.error(f"the model cannot run at tp {schedule.tp}: {err.reason}",
                   schedule.spans.get("tp"))
        sink.raise_if_errors(L2sSemanticError)
        raise  # pragma: no cover - raise_if_errors raised
