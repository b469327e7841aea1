"""The decode-step graph the lint simulates.

``build_step_graph`` turns a compiled ``Plan`` plus the adapter's per-kind
decode timeline into the graph of a whole decode step, a ``StepGraph``:

- one node per adapter operation on its stream: ``main`` (the model's
  stream) or ``aux`` (the shared expert, forked from the op before it and
  joined before the MLP's all-reduce); an attention core carries
  ``state_bytes``, the state it streams through the L2 at this M (the
  adapter's ``core_state_bytes``, 0 without one);
- one fill node per ``WindowIssue`` on the ``side`` stream, in issue order
  (side-stream edges chain them), with a fork edge from the op whose hook
  fires the window;
- a single ``join`` node at the end of the forward that waits for the side
  stream;
- an extension: layer 0 of the *next* decode step (position ``N``), so that
  the last layer's ``next`` targets have consumers (wrap-around).

Edges carry ``delay`` (us): the device's kernel gap between consecutive
main-stream kernels, 0 for forks and joins. Node ids are ``"p:op"`` and
``"p:fill:WINDOW"`` where ``p`` is the position in the step (layer index,
``N`` for the extension). ``layer_graph`` cuts the per-layer DiGraph out of
it, extended across the boundary to the next layer's consumers of bytes this
layer's windows fetched. Pure Python; no torch, no vLLM.

The graph is kept as two tables, ``StepGraph.nodes`` (id -> attributes, in
insertion order) and ``StepGraph.adj`` (id -> successor id -> edge
attributes), the same layout as networkx's own; ``StepGraph.graph`` builds
the ``networkx.DiGraph`` from them on first use (``layer_graph``,
``timeline_order``, ``l2sched timeline``, the Python API). The rules and the
simulation read the tables directly, so ``l2sched lint`` does not import
networkx: that import alone takes 0.18-0.21 s on the 2-core CI machine, most
of issue 4's 0.3 s whole-process budget (benchmarks/lint_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

#: Op classes whose reads are weights streamed by a GEMM-like kernel.
GEMM_CLASSES = ("gemm", "shared_expert")
#: Op classes a fill must never overlap: the routed-expert stream.
EXPERT_CLASSES = ("expert_stream",)


@dataclass(frozen=True)
class Read:
    """Bytes ``[lo, hi)`` of storage ``storage`` (a tensor path, the base of
    a view) of the tensor ``tensor`` in model layer ``layer``."""

    layer: int
    tensor: str
    storage: str
    lo: int
    hi: int


@dataclass(frozen=True)
class FillChunk:
    """Bytes ``[lo, lo + nbytes)`` of ``storage`` (layer ``layer``) fetched
    ``offset`` bytes into fill ``fill``'s byte stream; ``pos`` is the step
    position of the layer whose ops consume them."""

    fill: str
    offset: int
    pos: int
    layer: int
    tensor: str
    storage: str
    lo: int
    nbytes: int


@dataclass
class StepGraph:
    """The step graph and its indexes: ``nodes`` (node id -> attribute dict,
    insertion order), ``adj`` (node id -> successor id -> edge attributes
    ``delay`` in us and ``kind``), the main-stream order ``main`` (node ids),
    ``fills`` (fill node ids in issue order), ``chunks`` keyed by ``(pos,
    storage)``, ``num_layers`` (the model's; positions run to ``num_layers``
    inclusive), ``layer_end`` (pos -> id of the layer's last main-stream
    node), ``model`` (the adapter's name: the device profile's op tables
    the simulation reads, ``DeviceProfile.op_times``). ``graph`` is the same graph as a ``networkx.DiGraph``."""

    nodes: dict[str, dict]
    adj: dict[str, dict[str, dict]]
    main: list[str]
    fills: list[str]
    chunks: dict[tuple[int, str], list[FillChunk]] = field(default_factory=dict)
    num_layers: int = 0
    layer_end: dict[int, str] = field(default_factory=dict)
    model: str = ""
    _nx: Any = field(default=None, repr=False, compare=False)

    def add_node(self, nid: str, attrs: dict) -> None:
        """Add node ``nid`` (attributes merged into an existing one, as
        networkx does)."""
        self.nodes.setdefault(nid, {}).update(attrs)
        self.adj.setdefault(nid, {})
        self._nx = None

    def add_edge(self, u: str, v: str, attrs: dict) -> None:
        """Add edge ``u -> v`` (a repeated edge updates its attributes, as
        networkx does). Both nodes must exist."""
        self.adj[u].setdefault(v, {}).update(attrs)
        self._nx = None

    @property
    def graph(self):
        """The step graph as a ``networkx.DiGraph`` (node and edge attributes
        as in ``nodes`` / ``adj``), built on first use and cached until the
        tables change through ``add_node`` / ``add_edge``."""
        if self._nx is None:
            import networkx as nx  # on demand: the lint's simulation never needs it
            g = nx.DiGraph()
            g.add_nodes_from(self.nodes.items())
            g.add_edges_from((u, v, d) for u, out in self.adj.items()
                             for v, d in out.items())
            self._nx = g
        return self._nx


def _storage(entry) -> tuple[str, int]:
    base = getattr(entry, "view_of", "") or entry.path
    return base, int(getattr(entry, "view_offset", 0) or 0)


def expert_bytes(entry, tokens: int, top_k: int, n_experts: int) -> int:
    """Expected bytes of routed-expert tensor ``entry`` a decode step of
    ``tokens`` tokens reads on this rank: ``bytes_per_expert`` x the expected
    number of distinct experts picked (``E * (1 - (1 - k/E)^tokens)``) that
    this rank holds (all under TP; its share under EP)."""
    if not entry.experts or not n_experts:
        return entry.nbytes
    picked = n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)
    lo, hi = entry.experts
    local = picked * (hi - lo) / n_experts
    return int(entry.bytes_per_expert * local)


@dataclass
class _Skeleton:
    """The fill-independent part of a step graph, built once and shared by
    the prefetch graph and the no-prefetch baseline: ``nodes`` (id, attrs)
    and ``edges`` (u, v, attrs) in insertion order, the main-stream order,
    ``layer_end`` and the hook maps (``(pos, hook)`` -> node id)."""

    nodes: list
    edges: list
    main: list
    layer_end: dict
    hook_after: dict
    hook_before: dict
    num_layers: int
    model: str = ""


def _skeleton(inventory, adapter, tokens: int, top_k: int,
              n_experts: int) -> _Skeleton:
    n = len(inventory.layers)
    nodes: list = []
    edges: list = []
    main: list[str] = []
    layer_end: dict[int, str] = {}
    hook_after: dict[tuple[int, str], str] = {}
    hook_before: dict[tuple[int, str], str | None] = {}
    reads_of: dict[tuple[int, str], list] = {}  # (layer, op) -> reads
    prev_main: str | None = None
    stream = {"delay": 0.0, "kind": "stream"}
    # attention-core state bytes through the L2 (the adapter's, if it has them)
    core_state = getattr(adapter, "core_state_bytes", None)
    state = core_state(tokens, inventory.tp) if core_state else 0
    for pos in range(n + 1):
        layer = pos % n
        kind = inventory.kinds[layer]
        skind = str(kind)
        ops = adapter.decode_timeline(kind)
        aux_prev: str | None = None
        aux_last: str | None = None
        for op in ops:
            nid = f"{pos}:{op.name}"
            active = adapter.condition_holds(op.condition, layer, n, inventory.tp,
                                             inventory.ep)
            reads = reads_of.get((layer, op.name))
            if reads is None:  # position N is layer 0 again: same reads
                reads = reads_of[(layer, op.name)] = _reads(
                    inventory, layer, op.reads, tokens, top_k, n_experts)
            nodes.append((nid, {"pos": pos, "layer": layer, "kind": skind,
                                "op": op.name, "cls": op.cls, "stream": op.stream,
                                "active": active, "reads": reads,
                                "state_bytes": state if op.cls == "attention_core" else 0,
                                "eager_break": op.eager_break, "fill": None}))
            if op.stream == "aux":
                if aux_prev is None:
                    if prev_main is not None:
                        edges.append((prev_main, nid, {"delay": 0.0, "kind": "fork"}))
                else:
                    edges.append((aux_prev, nid, stream))
                aux_prev = aux_last = nid
                continue
            if prev_main is not None:
                edges.append((prev_main, nid, stream))
            if aux_last is not None and op.cls == "collective":
                # the main stream waits for the aux stream before the reduce;
                # the wait edge goes to the op before the collective
                edges.append((aux_last, prev_main, {"delay": 0.0, "kind": "join"}))
                aux_last = None
            for h in op.hooks_before:
                hook_before[(pos, h)] = prev_main
            for h in op.hooks_after:
                hook_after[(pos, h)] = nid
            main.append(nid)
            prev_main = nid
        if aux_last is not None and prev_main is not None:
            edges.append((aux_last, prev_main, {"delay": 0.0, "kind": "join"}))
        layer_end[pos] = prev_main
    nodes.append(("join", {"pos": n, "layer": 0, "kind": "", "op": "join",
                           "cls": "join", "stream": "side", "active": True,
                           "reads": [], "eager_break": False, "fill": None}))
    edges.append((layer_end[n - 1], "join", stream))
    return _Skeleton(nodes, edges, main, layer_end, hook_after, hook_before, n,
                     getattr(adapter, "NAME", ""))


def _reads(inventory, layer: int, paths, tokens: int, top_k: int,
           n_experts: int) -> list[Read]:
    reads = []
    for path in paths:
        try:
            entry = inventory.tensor(layer, path)
        except KeyError:
            continue
        if entry.experts is not None:
            nbytes = expert_bytes(entry, tokens, top_k, n_experts)
        else:
            nbytes = entry.nbytes
        storage, off = _storage(entry)
        reads.append(Read(layer, path, storage, off, off + nbytes))
    return reads


def _assemble(sk: _Skeleton, plan, inventory, with_fills: bool) -> StepGraph:
    sg = StepGraph({}, {}, list(sk.main), [], {}, sk.num_layers, dict(sk.layer_end),
                   model=sk.model)
    for v, attrs in sk.nodes:
        sg.add_node(v, dict(attrs))
    for u, v, attrs in sk.edges:
        sg.add_edge(u, v, attrs)
    if not with_fills:
        return sg
    prev_fill: str | None = None
    entries: dict[tuple[int, str], Any] = {}
    hook_after, hook_before = sk.hook_after, sk.hook_before
    for issue in plan.issues:
        pos = issue.layer
        nid = f"{pos}:fill:{issue.window}"
        sg.add_node(nid, {"pos": pos, "layer": issue.layer,
                          "kind": str(inventory.kinds[issue.layer]),
                          "op": f"fill {issue.window}", "cls": "fill",
                          "stream": "side", "active": True, "reads": [],
                          "eager_break": False, "fill": issue})
        src = hook_after.get((pos, issue.hook), hook_before.get((pos, issue.hook)))
        if src is not None:
            sg.add_edge(src, nid, {"delay": 0.0, "kind": "fork"})
        if prev_fill is not None:
            sg.add_edge(prev_fill, nid, {"delay": 0.0, "kind": "side"})
        prev_fill = nid
        sg.fills.append(nid)
        offset = 0
        for r in issue.ranges:
            if r.nbytes <= 0:
                continue
            key = (r.layer, r.tensor)
            if key not in entries:
                try:
                    entries[key] = inventory.tensor(r.layer, r.tensor)
                except KeyError:
                    entries[key] = None
            entry = entries[key]
            storage = _storage(entry)[0] if entry is not None else r.tensor
            tpos = pos if r.layer == issue.layer else pos + 1
            sg.chunks.setdefault((tpos, storage), []).append(FillChunk(
                nid, offset, tpos, r.layer, r.tensor, storage, r.offset, r.nbytes))
            offset += r.nbytes
    if prev_fill is not None:
        sg.add_edge(prev_fill, "join", {"delay": 0.0, "kind": "join"})
    return sg


def build_step_graph(plan, inventory, adapter, *, tokens: int = 1,
                     top_k: int = 8, n_experts: int = 0,
                     with_fills: bool = True) -> StepGraph:
    """Build the whole-step graph of ``plan`` (see the module docstring).

    ``inventory``: ``l2sched.inventory.Inventory`` (same TP layout as the
    plan); ``adapter``: the model adapter module (``decode_timeline``,
    ``HOOKS_BY_NAME``); ``tokens``: decode tokens per step; ``top_k`` /
    ``n_experts``: routing (for the expert-stream bytes); ``with_fills``
    False builds the no-prefetch baseline."""
    sk = _skeleton(inventory, adapter, tokens, top_k, n_experts)
    return _assemble(sk, plan, inventory, with_fills)


def build_step_graphs(plan, inventory, adapter, *, tokens: int = 1,
                      top_k: int = 8, n_experts: int = 0
                      ) -> tuple[StepGraph, StepGraph]:
    """``(with fills, no-prefetch baseline)``: the same two graphs as two
    ``build_step_graph`` calls, with the ops, their reads and the stream
    edges computed once and shared (the baseline is the prefetch graph
    without its fill nodes and their edges)."""
    sk = _skeleton(inventory, adapter, tokens, top_k, n_experts)
    return (_assemble(sk, plan, inventory, True),
            _assemble(sk, plan, inventory, False))


def layer_graph(sg: StepGraph, layer: int):
    """The DiGraph of decoder layer ``layer``: its ops and fills, extended
    across the boundary with the next layer's ops up to the last one that
    reads bytes this layer's fills fetched: a new ``networkx.DiGraph``
    (nodes in step-graph order, attribute dicts copied from ``sg.graph``)."""
    g = sg.graph
    nodes = [v for v, d in g.nodes(data=True) if d["pos"] == layer and v != "join"]
    last_needed = -1
    own_fills = {v for v in nodes if g.nodes[v]["cls"] == "fill"}
    for (pos, _storage), chunks in sg.chunks.items():
        if pos != layer + 1 or not any(c.fill in own_fills for c in chunks):
            continue
        for i, v in enumerate(sg.main):
            d = g.nodes[v]
            if d["pos"] == pos and any(r.storage == _storage for r in d["reads"]):
                last_needed = max(last_needed, i)
    if last_needed >= 0:
        for v in sg.main[: last_needed + 1]:
            if g.nodes[v]["pos"] == layer + 1:
                nodes.append(v)
                nodes.extend(u for u in g.predecessors(v)
                             if g.nodes[u]["stream"] == "aux")
    keep = set(nodes)
    # a subgraph view would iterate in set (hash) order; copy in graph order
    sub = g.__class__()
    sub.add_nodes_from((v, g.nodes[v]) for v in g if v in keep)
    sub.add_edges_from((u, v, d) for u, v, d in g.edges(data=True)
                       if u in keep and v in keep)
    return sub


def timeline_order(sg: StepGraph) -> Sequence[str]:
    """Node ids in a topological order (ties by insertion order)."""
    import networkx as nx  # on demand: the lint's simulation never needs it
    return list(nx.topological_sort(sg.graph))
