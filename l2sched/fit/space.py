"""The search space of ``l2sched fit``: what a candidate schedule is, and
how it becomes ``.l2s`` text.

Per layer kind (``kda+moe``, ``mla+moe``, ``kda+dense`` for GLM-5.3-Flash)
and hook point, the *stream* (``Stream``) is the weight bytes the layer and
the next decoder layer read after the hook fires, in consumption order,
grouped by the op that reads them (``Group``). Only groups the model can
gain from are kept: ops that stream weights (``gemm``, ``shared_expert``)
and ops the device profile measured with a cold - hot gap of at least
``MIN_GAP_US`` at a fitted M. Routed experts are never targets (the router
picks them per token).

A candidate (``Candidate``) is the schedule-wide settings (cache policy,
set-aside, fill kernel) and a set of *chains* (``Chain``) per layer kind: a
chain starts at a group of the stream of its first hook and takes the bytes
from there on, in order, through one or more windows (``Link``: hook and
budget) joined by ``carry``, so a tensor that straddles a budget is split
into a head and a tail exactly as the compiler does. The first window names
the chain's tensors (``this`` ones, then the next layer's, both in
consumption order); the later ones take only carried bytes.

``render_body`` prints a candidate as a ``ScheduleFile`` through the
language's formatter (``l2sched.lang.formatter``). Units: bytes; budgets are
multiples of ``BUDGET_STEP`` (0.5 MB = 500,000 B) and written in MB
(10^6 B).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from l2sched.lang import nodes as n
from l2sched.lang.formatter import format_file
from l2sched.model.config import shipped_config_names

#: Budget granularity (B): budgets are written as whole or half MB.
BUDGET_STEP = 500_000
#: A measured op (profile ``[ops]``) whose cold - hot gap is below this
#: (us) at every fitted M gains nothing from L2 hits; its bytes are not
#: targets (the profile's ``python -m lab bench kernel`` recovered-share cut-off).
MIN_GAP_US = 0.5
#: Op classes whose reads the simulator times by where the bytes are
#: (``l2sched.lint.graph.GEMM_CLASSES``).
STREAMING_CLASSES = ("gemm", "shared_expert")


@dataclass(frozen=True)
class Group:
    """The tensors one op reads: ``op`` name, ``index`` of the op in its
    layer's timeline, ``paths`` (inventory paths), ``lazy`` (some path
    exists only after the first forward), ``nbytes`` new storage bytes (a
    view's storage counts once)."""

    op: str
    index: int
    paths: tuple[str, ...]
    lazy: bool
    nbytes: int


@dataclass(frozen=True)
class Stream:
    """What a window at ``hook`` of a ``kind`` layer could fetch: ``this``
    groups (ops after the hook, this layer), and ``nexts``: per next-layer
    kind (sorted), its groups from its first op; ``position`` is where the
    hook fires (op index - 0.5 before an op, + 0.5 after it)."""

    kind: str
    hook: str
    position: float
    this: tuple[Group, ...]
    nexts: tuple[tuple[str, tuple[Group, ...]], ...]

    @property
    def this_bytes(self) -> int:
        """Bytes of the ``this`` groups."""
        return sum(g.nbytes for g in self.this)

    def starts(self) -> range:
        """Valid chain starts: a ``this`` group index, or ``len(this)`` for
        the next layer's first group."""
        return range(len(self.this) + (1 if self.nexts else 0))

    def bytes_from(self, start: int) -> int:
        """Bytes a chain starting at ``start`` can take at most (the smallest
        next-layer kind counted)."""
        nxt = min((sum(g.nbytes for g in gs) for _, gs in self.nexts), default=0)
        return sum(g.nbytes for g in self.this[start:]) + nxt

    def group_at(self, start: int, offset: int) -> Group | None:
        """The ``this`` group holding byte ``offset`` of a chain starting at
        ``start``; None when the offset is in the next layer."""
        for g in self.this[start:]:
            if offset < g.nbytes:
                return g
            offset -= g.nbytes
        return None


@dataclass(frozen=True)
class Link:
    """One window of a chain: its ``hook`` and ``budget`` (B)."""

    hook: str
    budget: int


@dataclass(frozen=True)
class Chain:
    """Windows of one layer ``kind`` that take the stream of the first
    link's hook from group ``start`` on, joined by ``carry``."""

    kind: str
    start: int
    links: tuple[Link, ...]

    @property
    def total(self) -> int:
        """Bytes the chain's budgets take at most."""
        return sum(link.budget for link in self.links)


@dataclass(frozen=True)
class Candidate:
    """A schedule the fit can evaluate: ``policy`` (``evict_last`` /
    ``evict_normal``), ``set_aside`` (``"0"`` or ``"max"``), the fill
    ``kernel`` of every window, and its ``chains``."""

    policy: str
    set_aside: str
    kernel: str
    chains: tuple[Chain, ...] = ()

    def with_chains(self, chains) -> "Candidate":
        """The same settings with ``chains`` (sorted: kind, first hook,
        start, so equal schedules compare equal)."""
        return Candidate(self.policy, self.set_aside, self.kernel,
                         tuple(sorted(chains, key=chain_key)))


def chain_key(chain: Chain) -> tuple:
    """Sort key of a chain: kind, first hook, start, links."""
    return (chain.kind, chain.links[0].hook, chain.start,
            tuple((lk.hook, lk.budget) for lk in chain.links))


def build_streams(adapter, inventory, kind_layers: dict, wanted) -> dict:
    """``(kind, hook) -> Stream`` for every hook of every layer kind of
    ``inventory``. ``kind_layers`` maps a kind name to its layer indices in
    the full model; ``wanted(kind, op)`` says whether an op's bytes are
    worth fetching (see the module docstring)."""
    n_layers = len(inventory.layers)
    kinds = {str(k): k for k in inventory.kinds}
    groups = {name: _groups(adapter, inventory, kind_layers[name][0], kinds[name],
                            wanted) for name in kind_layers}
    out = {}
    for name, layers in kind_layers.items():
        kind = kinds[name]
        nexts = sorted({str(inventory.kinds[(i + 1) % n_layers]) for i in layers})
        for hook, pos in hook_positions(adapter, kind):
            this = tuple(g for g in groups[name] if g.index > pos)
            out[(name, hook)] = Stream(name, hook, pos, this,
                                       tuple((k, groups[k]) for k in nexts))
    return out


def hook_positions(adapter, kind) -> list[tuple[str, float]]:
    """``(hook, position)`` of every hook point of a ``kind`` layer, in hook
    order: position ``i - 0.5`` for a hook before op ``i``, ``i + 0.5``
    after it."""
    pos: dict[str, float] = {}
    for i, op in enumerate(adapter.decode_timeline(kind)):
        for h in op.hooks_before:
            pos.setdefault(h, i - 0.5)
        for h in op.hooks_after:
            pos.setdefault(h, i + 0.5)
    return [(h.name, pos[h.name]) for h in adapter.HOOKS
            if h.exists_in(kind) and h.name in pos]


def _groups(adapter, inventory, layer: int, kind, wanted) -> tuple[Group, ...]:
    """The op groups of one layer (``layer`` is any layer of ``kind``)."""
    seen: set[str] = set()
    out = []
    for i, op in enumerate(adapter.decode_timeline(kind)):
        paths, nbytes, lazy = [], 0, False
        for path in op.reads:
            try:
                entry = inventory.tensor(layer, path)
            except KeyError:
                continue
            if entry.experts is not None:
                continue
            storage = entry.view_of or entry.path
            if storage not in seen:
                seen.add(storage)
                base = inventory.tensor(layer, storage) if entry.view_of else entry
                nbytes += base.nbytes
            paths.append(path)
            lazy = lazy or entry.lazy
        if paths and nbytes and wanted(str(kind), op):
            out.append(Group(op.name, i, tuple(paths), lazy, nbytes))
    return tuple(out)


def chain_valid(chain: Chain, streams: dict) -> bool:
    """True when every later window of ``chain`` fires before the consumer
    of the first byte carried into it, and the chain's hooks are in time
    order."""
    first = streams[(chain.kind, chain.links[0].hook)]
    offset = 0
    for prev, link in zip(chain.links, chain.links[1:]):
        s = streams.get((chain.kind, link.hook))
        if s is None or s.position <= streams[(chain.kind, prev.hook)].position:
            return False
        offset += prev.budget
        g = first.group_at(chain.start, offset)
        if g is not None and g.index < s.position:
            return False
    return True


def chain_targets(chain: Chain, streams: dict) -> list[n.Target]:
    """The ``this`` and ``next`` targets of a chain's first window: the
    groups from ``start`` on until every next-layer kind holds the chain's
    total budget."""
    s = streams[(chain.kind, chain.links[0].hook)]
    need = chain.total
    this_groups, have = [], 0
    for g in s.this[chain.start:]:
        if have >= need:
            break
        this_groups.append(g)
        have += g.nbytes
    next_paths: list[str] = []
    next_lazy = False
    for _kind, groups in s.nexts:
        got = have
        for g in groups:
            if got >= need:
                break
            got += g.nbytes
            next_lazy = next_lazy or g.lazy
            next_paths += [p for p in g.paths if p not in next_paths]
    out = []
    if this_groups:
        out.append(_target("this", any(g.lazy for g in this_groups),
                           [p for g in this_groups for p in g.paths]))
    if next_paths:
        out.append(_target("next", next_lazy, next_paths))
    return out


def _target(scope: str, lazy: bool, paths: list[str]) -> n.Target:
    return n.Target(scope, lazy, tuple(n.Name(p) for p in paths), ())


def kind_selector(kind: str, selectors: dict | None = None) -> n.Selector:
    """The selector of the layers of kind ``kind`` (a kind name): the
    intersection of ``selectors[kind]`` (the adapter's ``kind_selector``
    names, e.g. ``kda & moe``); without ``selectors``, the ``+``-separated
    parts of the name (``kda+moe`` -> ``kda & moe``)."""
    names = selectors[kind] if selectors is not None else tuple(kind.split("+"))
    return n.Selector(n.SelUnion((n.SelInter(tuple(n.SelName(x) for x in names)),)),
                      None)


def size_node(nbytes: int) -> n.Size:
    """``nbytes`` (a multiple of ``BUDGET_STEP``) as a size in MB."""
    return n.Size(f"{nbytes / 1e6:g}", "MB")


def window_names(candidate: Candidate) -> list[list[str]]:
    """Window names per chain and link: ``KIND_N`` (``kda_moe_1``),
    numbered per kind in chain order."""
    count: dict[str, int] = {}
    out = []
    for chain in candidate.chains:
        names = []
        for _ in chain.links:
            count[chain.kind] = count.get(chain.kind, 0) + 1
            names.append(f"{chain.kind.replace('+', '_')}_{count[chain.kind]}")
        out.append(names)
    return out


def candidate_tree(candidate: Candidate, streams: dict, *, name: str, model: str,
                   device: str, tp: int, max_tokens: int,
                   selectors: dict | None = None) -> n.ScheduleFile:
    """The candidate as a parsed schedule file (no comments): the settings,
    then each chain's windows, the first with the chain's targets;
    ``selectors``: kind name -> selector names (``kind_selector``)."""
    def setting(key: str, value) -> n.Setting:
        return n.Setting(n.Name(key), value)

    items: list = [
        setting("model", n.Name(model)),
        # a profile file is a quoted path (relative to the schedule file)
        setting("device", n.StringValue(device) if device.endswith(".toml")
                else n.Name(device)),
        setting("tp", n.Size(str(tp), "")), setting("ep", n.Name("off")),
        setting("max_tokens", n.Size(str(max_tokens), "")),
        setting("policy", n.Name(candidate.policy)),
        setting("set_aside", n.Name("max") if candidate.set_aside == "max"
                else n.Size("0", "")),
        setting("kernel", n.Name(candidate.kernel)),
    ]
    for chain, names in zip(candidate.chains, window_names(candidate)):
        for j, link in enumerate(chain.links):
            carry = n.Name(names[j + 1]) if j + 1 < len(names) else None
            targets = tuple(chain_targets(chain, streams)) if j == 0 else ()
            items.append(n.Window(n.Name(names[j]), n.Name(link.hook),
                                  size_node(link.budget),
                                  kind_selector(chain.kind, selectors),
                                  carry, targets, has_body=bool(targets)))
    return n.ScheduleFile(n.Name(name), None, tuple(items))


def with_model_config(tree: n.ScheduleFile, model_config: str) -> n.ScheduleFile:
    """``tree`` with a ``model_config`` line after its ``model`` line: a
    shipped config's name, else a path relative to the schedule file,
    quoted (as ``device``'s)."""
    value = n.Name(model_config) if model_config in shipped_config_names() \
        else n.StringValue(model_config)
    items = list(tree.items)
    at = 1 + next(i for i, it in enumerate(items)
                  if isinstance(it, n.Setting) and it.key.text == "model")
    items.insert(at, n.Setting(n.Name("model_config"), value))
    return dataclasses.replace(tree, items=tuple(items))


def render_body(candidate: Candidate, streams: dict, **kw) -> str:
    """The candidate as canonical ``.l2s`` text without comments
    (``candidate_tree`` through the formatter)."""
    return format_file(candidate_tree(candidate, streams, **kw))
