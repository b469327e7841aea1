"""Target rules (no simulation): a pattern that matches nothing
(L2S001), a tensor two windows fetch in one step (L2S002), a cache or
buffer the model writes right before reading it (L2S003), a tensor whose
consumer reads a data-dependent subset of it (L2S006), a window that
fetches nothing wherever it fires (L2S007)."""

from __future__ import annotations

import functools
import re
from typing import Any

from l2sched.compiler.compile import TargetExpander, layer_index
from l2sched.compiler.plan import EMPTY_REASONS
from l2sched.lint.rules.base import Finding, Rule, fires_in, target_span, window_span
from l2sched.model.adapters import get_adapter
from l2sched.model.adapters.protocol import optional_member
from l2sched.units import format_size

RULES = (
    Rule(
        "L2S001", "target-matches-nothing", "error",
        what=("a target pattern matches no tensor of any layer its window fires in."),
        why=("a typo silently prefetches nothing; the window's budget goes to carried bytes only.\n"
             "A pattern naming only lazily created tensors without `lazy` is reported here too, with a hint."),
        example=("`this self_attn.o_prj`"),
        fix=("correct the name (`l2sched inventory` lists the paths), or add `lazy`.")),
    Rule(
        "L2S002", "prefetched-twice", "error",
        what=("two windows name the same tensor (same storage) for the same layer in one step."),
        why=("the compiler fetches each byte once, so the second window's budget is silently smaller\n"
             "than written and its fill order is not what the author meant."),
        example=("window A `this self_attn.o_proj` and window A2 `this self_attn.o_proj.weight`."),
        fix=("name each tensor in one window; use `carry` to move the rest to a later window.")),
    Rule(
        "L2S003", "prefetch-of-written-buffer", "error",
        what=("a target names a cache or buffer the model writes during decode right before reading\n"
             "it: vLLM's KV cache, block tables and rotary caches (`VLLM_WRITTEN_BUFFERS` in\n"
             "`l2sched/lint/rules/targets.py`) and the model's own, which its adapter lists in\n"
             "`WRITTEN_BUFFERS` (indexer key caches, recurrent and conv states, top-k buffers)."),
        why=("the write replaces the prefetched lines; the fill is pure waste of bandwidth, and\n"
             "caches are never prefetched (docs/sources.md, runtime rules)."),
        example=("`this self_attn.indexer.k_cache`"),
        fix=("remove the target.")),
    Rule(
        "L2S006", "prefetch-of-data-dependent-reads", "error",
        what=("a target names a tensor whose consumer reads only a data-dependent subset of it:\n"
             "the routed experts (`mlp.experts.routed_experts.w13_weight`, `w2_weight`), of which a\n"
             "decode step reads the experts the router picks for its tokens. The adapter knows them:\n"
             "the tensors its `expert_stream` ops read, and every tensor with an expert range\n"
             "(`l2sched inventory` notes `experts 0-287`). Also reported through a wide pattern\n"
             "(`next mlp.*`)."),
        why=("which experts a step reads is known only once the router has run, after the hook\n"
             "points that could fire the fill, and changes every step. A fill fetches a fixed byte\n"
             "range in consumption order: the first experts, which a token picks only by chance\n"
             "(8 of 288 per token in GLM-5.3-Flash), so nearly all of its bytes are never read,\n"
             "while its traffic competes with the GEMMs and with the expert stream itself (L2S101).\n"
             "The routed experts are 1.2-2.4 GB per layer per GPU at TP4, far beyond any L2, and no\n"
             "hand-written prefetcher ever fetched them."),
        example=("`window D at moe.pre_all_reduce budget 100MB layers moe {\n"
                 "this mlp.experts.routed_experts.w2_weight }`"),
        fix=("remove the target; keep wide patterns off the experts with `except`\n"
             "(`next mlp.* except mlp.experts`).")),
    Rule(
        "L2S007", "window-fetches-nothing", "error",
        what=("a window fetches 0 B in every layer it fires in: its budget holds no whole tensor\n"
             "and no 4 KiB head of one (`budget 1B`), or it has no targets and nothing is carried\n"
             "into it (an empty body, no window carrying into it). A window whose targets match\n"
             "nothing (L2S001) or whose bytes another window fetched first (L2S002) is reported\n"
             "there; a budget of 0 (how a variant switches a window off) is not reported."),
        why=("the window was written to fetch bytes and silently fetches none: like a pattern that\n"
             "matches nothing, it is never what the author meant (a unit typo, a body left empty,\n"
             "a carry that was removed), and nothing else in the lint's output says so: the step\n"
             "is predicted as if the window were not there. An error, as L2S001 is, so CI and the\n"
             "plugin's lint gate stop on it; `l2sched compile` shows the 0 B per layer kind."),
        example=("`window A at attn.pre_all_reduce budget 1B { this self_attn.o_proj }`; "
                 "`window B at moe.pre_all_reduce budget 10MB { }` with no carry into it"),
        fix=("give the budget its unit (`1MB`), name targets, or carry into the window from an\n"
             "earlier one; to switch a window off in a variant, set its budget to 0MB."),
        example_command=("l2sched lint schedules/glm53-flash-h200-tp4.l2s "
                         "--set window.A.budget=1B --select L2S007")),
)

#: Caches and buffers vLLM writes during decode in every model, right
#: before reading them: never prefetch ("caches are never prefetched",
#: docs/sources.md#runtime-rules). Globs over paths relative to the layer.
#: A model's own (indexer key caches, recurrent states, ...) are its
#: adapter's ``WRITTEN_BUFFERS``, tried after these (``written_buffers``).
VLLM_WRITTEN_BUFFERS: dict[str, str] = {
    "*kv_cache*": "the KV cache, written by the cache-update op before the core",
    "*block_table*": "block tables, rewritten by the scheduler every step",
    "*cos_sin_cache*": "a rotary cache",
}


def written_buffers(adapter) -> dict[str, str]:
    """The globs L2S003 refuses for a model of ``adapter`` -> why:
    ``VLLM_WRITTEN_BUFFERS`` then the adapter's optional ``WRITTEN_BUFFERS``
    (none when it has none)."""
    return {**VLLM_WRITTEN_BUFFERS, **optional_member(adapter, "WRITTEN_BUFFERS")}


def check(run) -> list[Finding]:
    """L2S001 (a pattern matches nothing in any layer its window fires in),
    L2S003 (a pattern names a cache or buffer written right before use),
    L2S006 (a pattern names a tensor whose consumer reads a data-dependent
    subset) and L2S002 (a tensor named by two windows for the same decode
    step), over ``run.schedule`` and ``run.inventory``."""
    schedule, inventory = run.schedule, run.inventory
    out: list[Finding] = check_data_dependent(run) + check_fetches_nothing(run)
    n = len(inventory.layers)
    expander = TargetExpander(inventory)
    buffers = written_buffers(get_adapter(schedule.model))
    for w in schedule.windows:
        # per scope, one layer per distinct tensor list among the target
        # layers: its index and tensors (once per window, not per target)
        looked = {scope: [(layer_index(inventory, tl), inventory.tensors(tl))
                          for tl in layers]
                  for scope, layers in expander.target_layers(w).items()}
        for t in w.targets:
            for p in t.patterns:
                written = _written_buffer(buffers, p.text)
                if written:
                    out.append(Finding("L2S003", f"window '{w.name}' prefetches "
                                       f"'{p.text}': {written}; it is written "
                                       f"right before it is read", p.span))
                    continue
                lazy_flags = [tensors[i].lazy for index, tensors in looked[t.scope]
                              for i in index.matching(p.text)]
                hit = any(t.lazy or not lazy for lazy in lazy_flags)
                names_lazy = any(lazy_flags)
                if not hit:
                    lazy_hint = ""
                    if names_lazy:
                        lazy_hint = " (it names lazily created tensors: write " \
                                    f"'{t.scope} lazy ...')"
                    where = ("the layers it fires in" if t.scope == "this" else
                             "the layers after the ones it fires in")
                    out.append(Finding("L2S001", f"target '{t.scope} {p.text}' of "
                                       f"window '{w.name}' matches no tensor of "
                                       f"{where}{lazy_hint}", p.span))
    # L2S002: the same storage bytes named for the same target layer twice
    claimed: dict[tuple[int, str], tuple[str, Any, int]] = {}
    reported: set = set()
    fires: dict[int, list] = {}
    for w in schedule.windows:
        for layer in w.layers:
            fires.setdefault(layer, []).append(w)
    for layer in range(n):
        for w in fires.get(layer, ()):
            for tl, e in expander.expand(w, layer):
                key = (tl, e.view_of or e.path)
                if key in claimed and claimed[key][0] != w.name:
                    first, _, first_layer = claimed[key]
                    if (w.name, first, e.path) in reported:
                        continue
                    reported.add((w.name, first, e.path))
                    scope = "this" if tl == layer else "next"
                    span = target_span(schedule, w.name, scope, e.path)
                    kind = str(inventory.kinds[layer])
                    first_kind = str(inventory.kinds[first_layer])
                    out.append(Finding(
                        "L2S002", f"'{e.path}' (tensor of layer {tl}) is prefetched "
                        f"by window '{first}' (where it {fires_in(first_kind, [first_layer])}) "
                        f"and again by window '{w.name}' (where it "
                        f"{fires_in(kind, [layer])}) in one decode step",
                        span or window_span(w, "name"),
                        {"tensor": e.path, "layer": tl, "windows": [first, w.name],
                         "fire_layers": [first_layer, layer]}))
                else:
                    claimed.setdefault(key, (w.name, e, layer))
    return out


#: Why a window fetches nothing that L2S007 reports (``EmptyIssue.reason``);
#: ``no-match`` is L2S001's, ``taken`` L2S002's.
_EMPTY_OWN = ("budget", "nothing-carried")


def check_fetches_nothing(run) -> list[Finding]:
    """L2S007: one finding per window with a budget above 0 that fetches
    0 B in every layer it fires in (``run.plan``'s ``empty`` entries cover
    all its layers) for a reason of its own (``_EMPTY_OWN``), at its
    ``budget`` when the budget is why, else at its name."""
    empty: dict[str, dict[int, str]] = {}
    for e in run.plan.empty:
        empty.setdefault(e.window, {})[e.layer] = e
    out = []
    for w in run.schedule.windows:
        got = empty.get(w.name, {})
        if w.budget == 0 or not w.layers or set(got) != set(w.layers):
            continue
        reasons = {e.reason: e for e in got.values()}
        if not set(reasons) & set(_EMPTY_OWN):
            continue
        why = "; ".join(reasons[r].why() for r in EMPTY_REASONS if r in reasons)
        key = "budget" if "budget" in reasons else "name"
        out.append(Finding(
            "L2S007", f"window '{w.name}' (budget {format_size(w.budget)}) fetches "
            f"nothing in any of the {len(w.layers)} layers it fires in: {why}",
            window_span(w, key),
            {"window": w.name, "reasons": sorted(reasons), "layers": list(w.layers)}))
    return out


def data_dependent_tensors(inventory, adapter, layer: int) -> dict[str, str]:
    """The tensors of ``layer`` whose consumer reads a data-dependent subset
    of them, each with the op that reads it: the reads of the adapter's
    ``expert_stream`` ops (``decode_timeline``) and every tensor with an
    expert range (``TensorEntry.experts``), in consumption order."""
    kind = inventory.kinds[layer]
    readers = {path: op.name for op in adapter.decode_timeline(kind)
               if op.cls == "expert_stream" for path in op.reads}
    return {e.path: readers.get(e.path, "the expert stream")
            for e in inventory.tensors(layer)
            if e.path in readers or e.experts is not None}


def check_data_dependent(run) -> list[Finding]:
    """L2S006: one finding per target pattern that names (in some layer its
    window fires in, after the target's ``except``) a tensor whose consumer
    reads a data-dependent subset (``data_dependent_tensors``): the routed
    experts, of which a step reads the experts the router picks. Layers with
    the same tensors are checked once."""
    schedule, inventory = run.schedule, run.inventory
    adapter = get_adapter(schedule.model)
    expander = TargetExpander(inventory)
    cache: dict = {}

    def dependent(layer: int) -> dict:
        """Index in the layer's tensors -> (entry, reading op), once per
        distinct tensor list (``TargetExpander.sig``)."""
        key = expander.sig[layer]
        if key not in cache:
            dd = data_dependent_tensors(inventory, adapter, layer)
            paths = [e.path for e in inventory.tensors(layer)]
            cache[key] = {paths.index(p): (inventory.tensor(layer, p), op)
                          for p, op in dd.items()}
        return cache[key]

    out = []
    for w in schedule.windows:
        # once per window, not per target: per scope, each distinct target
        # layer's index and its data-dependent tensors by index
        looked = {scope: [(layer_index(inventory, tl), dependent(tl)) for tl in layers]
                  for scope, layers in expander.target_layers(w).items()}
        for t in w.targets:
            found: dict[str, tuple] = {}
            for index, deps in looked[t.scope]:
                if not deps:
                    continue
                # through the layer's index: a pattern that names no
                # tensor costs a lookup, not a match per dependent tensor
                excluded = index.indices(x.text for x in t.excludes)
                for p in t.patterns:
                    for i in index.matching(p.text):
                        e, op = deps.get(i, (None, None))
                        if e is not None and (t.lazy or not e.lazy) and i not in excluded:
                            found.setdefault(p.text, (p, {}))[1].setdefault(
                                e.path, (e, op))
            for text, (p, tensors) in found.items():
                names = sorted(tensors)
                ops = sorted({op for _, op in tensors.values()})
                listed = ", ".join(f"{name} ({format_size(tensors[name][0].nbytes)})"
                                   for name in names)
                verb = "reads" if len(ops) == 1 else "read"
                out.append(Finding(
                    "L2S006", f"target '{t.scope} {text}' of window '{w.name}' names "
                    f"{listed}, which {' and '.join(repr(o) for o in ops)} {verb} "
                    f"only for the experts the router picks per token: a "
                    f"data-dependent subset no fill can know in advance",
                    p.span, {"window": w.name, "tensors": names, "ops": ops}))
    return out


def _glob_re(glob: str) -> str:
    return "".join(".*" if c == "*" else re.escape(c) for c in glob)


@functools.lru_cache(maxsize=None)
def _written_rx(globs: tuple[str, ...]) -> re.Pattern:
    """``globs`` compiled into one regex, a named group per glob (``b0``,
    ``b1``, ...): one match per pattern, not one per glob."""
    return re.compile("|".join(f"(?P<b{i}>{_glob_re(glob)})"
                               for i, glob in enumerate(globs)))


def _written_buffer(buffers: dict[str, str], pattern: str) -> str:
    """What the first glob of ``buffers`` (``written_buffers``) that
    matches ``pattern`` whole says of it (``""`` for none): the alternation
    tries the globs in order, so the group that matched is the first one
    that does."""
    m = _written_rx(tuple(buffers)).fullmatch(pattern)
    return "" if m is None else list(buffers.values())[int(m.lastgroup[1:])]
