"""Tensor inventory of a model: which tensors each decoder layer holds, per GPU.

An ``Inventory`` lists, for every decoder layer index, the layer's tensors in
decode consumption order (``TensorEntry``: path relative to
``model.layers.{i}``, dtype, per-rank shape, bytes, TP replication, lazily
created or not) at a given TP size, EP on/off and TP rank. Two sources that
must agree (``tests/test_inventory_vllm.py`` checks it on vLLM's real model):

- ``analytical_inventory(config, tp, ep)``: pure Python from a Hugging Face
  text config (``model.config.load_model_config``); no torch, no vLLM;
- ``live_inventory(model, tp, ep)``: from a real ``torch.nn.Module`` tree
  (named parameters, buffers, and the adapter's documented lazy tensors).

Both turn the adapter's ``TensorSpec``s (shapes, replication, order) into
``TensorEntry``s here. Units: bytes; ``MB`` = 10^6 B, ``MiB`` = 2^20 B.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from l2sched.errors import L2sModelError
from l2sched.model.adapters import (
    DEFAULT_ADAPTER,
    ModelAdapter,
    adapter_of_config,
    get_adapter,
)
from l2sched.model.adapters.protocol import LiveModel, optional_member, require
from l2sched.model.config import validate_config


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of one decoder layer, as held by one TP rank.

    - ``path``: attribute path relative to ``model.layers.{i}``, canonical
      (``self_attn.*``/``mlp.*``, never a module alias such as
      ``self_attn.mla_attn.kv_b_proj``).
    - ``dtype``: torch dtype name without ``torch.`` (``bfloat16``, ``float32``,
      ``int32``).
    - ``shape``: per-rank shape; ``nbytes`` = product(shape) x element size.
    - ``replicated``: True when every TP rank holds the same full tensor.
    - ``replicated_bytes``: bytes of this rank's tensor identical on every TP
      rank (``nbytes`` when replicated; e.g. 2 MiB of KDA ``in_proj_qkvbfg_a``
      whose last ``2 * linear_head_dim`` rows are replicated; else 0).
    - ``lazy``: True when the tensor exists only after the first forward (or
      after ``process_weights_after_loading``).
    - ``view_of``: path of the tensor whose storage this one is a strided view
      of (no memory of its own, e.g. MLA ``W_UK_T``/``W_UV`` of
      ``kv_b_proj.weight``); ``""`` otherwise.
    - ``decode_read``: True when a decode step reads the tensor itself (False
      for e.g. the three KDA conv params, read only to build
      ``_merged_conv_weight``, and ``kv_b_proj.weight``, read through its views).
    - ``experts``: for routed-expert tensors, the global expert ids
      ``(start, stop)`` along dim 0; ``None`` otherwise.
    """

    path: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    replicated: bool
    replicated_bytes: int = 0
    lazy: bool = False
    view_of: str = ""
    decode_read: bool = True
    experts: tuple[int, int] | None = None

    @property
    def owns_memory(self) -> bool:
        """False for views of another tensor's storage (not counted in totals)."""
        return not self.view_of

    @property
    def bytes_per_expert(self) -> int:
        """``nbytes`` per expert along dim 0 (0 for non-expert tensors)."""
        if self.experts is None:
            return 0
        return self.nbytes // max(self.shape[0], 1)

    def key(self) -> tuple[str, tuple[int, ...], str, int]:
        """``(path, shape, dtype, nbytes)``: what two sources must agree on."""
        return (self.path, self.shape, self.dtype, self.nbytes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; ``nbytes`` is written as ``bytes``."""
        d = asdict(self)
        d["bytes"] = d.pop("nbytes")
        d["shape"] = list(self.shape)
        d["experts"] = list(self.experts) if self.experts else None
        return d


@dataclass(frozen=True)
class Inventory:
    """Per-rank tensors of every decoder layer.

    ``layers[i]`` is layer ``i``'s tensors in decode consumption order;
    ``kinds[i]`` its ``LayerKind``; ``tp``/``ep``/``tp_rank`` the parallel
    layout (EP = ``--enable-expert-parallel`` with DP = 1, so EP size = ``tp``);
    ``model`` the adapter name, ``model_name`` a human name (config path or
    the adapter's ``DEFAULT_MODEL_NAME``), ``source`` ``analytical`` or ``live``.
    """

    model: str
    model_name: str
    tp: int
    ep: bool
    tp_rank: int
    kinds: tuple[Any, ...]
    layers: tuple[tuple[TensorEntry, ...], ...]
    source: str = "analytical"
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    def tensors(self, layer: int) -> tuple[TensorEntry, ...]:
        """Layer ``layer``'s tensors in consumption order."""
        return self.layers[layer]

    def tensor(self, layer: int, path: str) -> TensorEntry:
        """The tensor ``path`` of layer ``layer``. Raises ``KeyError``."""
        if not self._index:
            for i, ts in enumerate(self.layers):
                for t in ts:
                    self._index[(i, t.path)] = t
        return self._index[(layer, path)]

    def layer_bytes(self, layer: int, *, routed: bool = True,
                    lazy: bool = True) -> int:
        """Bytes layer ``layer`` holds per GPU (views not counted); without
        the routed experts when ``routed`` is False, without the lazily
        created tensors when ``lazy`` is False (= parameters and buffers only,
        what a freshly constructed model holds)."""
        return sum(t.nbytes for t in self.layers[layer]
                   if t.owns_memory and (routed or t.experts is None)
                   and (lazy or not t.lazy))

    def total_bytes(self, *, routed: bool = True, lazy: bool = True) -> int:
        """Bytes of all decoder layers per GPU (views not counted)."""
        return sum(self.layer_bytes(i, routed=routed, lazy=lazy)
                   for i in range(len(self.layers)))

    def kind_groups(self) -> list[tuple[Any, list[int]]]:
        """``(kind, layer indices)`` per distinct kind, in first-layer order."""
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, k in enumerate(self.kinds):
            groups.setdefault(str(k), (k, []))[1].append(i)
        return list(groups.values())

    def diff(self, other: "Inventory") -> list[str]:
        """Human-readable differences in (path, shape, dtype, bytes) and in the
        layer kinds; empty when the two inventories agree tensor for tensor."""
        out = []
        if [str(k) for k in self.kinds] != [str(k) for k in other.kinds]:
            out.append("layer kinds differ")
        for i in range(max(len(self.layers), len(other.layers))):
            a = {t.path: t.key() for t in (self.layers[i] if i < len(self.layers)
                                           else ())}
            b = {t.path: t.key() for t in (other.layers[i] if i < len(other.layers)
                                           else ())}
            for p in sorted(set(a) | set(b)):
                if a.get(p) != b.get(p):
                    out.append(f"layer {i} {p}: {self.source} {a.get(p)} != "
                               f"{other.source} {b.get(p)}")
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: layout, per-kind tensor lists, per-layer kinds and
        byte totals (per GPU)."""
        kinds = []
        for kind, idx in self.kind_groups():
            kinds.append({
                "kind": str(kind), "layers": idx,
                "tensors": [t.to_json() for t in self.layers[idx[0]]],
                "layer_bytes": self.layer_bytes(idx[0]),
                "layer_bytes_without_routed_experts":
                    self.layer_bytes(idx[0], routed=False),
            })
        return {
            "model": self.model, "model_name": self.model_name,
            "source": self.source, "tp": self.tp, "ep": self.ep,
            "tp_rank": self.tp_rank,
            "layer_kinds": [str(k) for k in self.kinds],
            "kinds": kinds,
            "total_bytes": self.total_bytes(),
            "total_bytes_without_routed_experts": self.total_bytes(routed=False),
        }


class TPSplitError(L2sModelError):
    """The model does not split at TP degree ``tp``: ``reason`` says which
    dimension (``linear_head_dim*linear_num_heads = 8192 is not divisible by
    the TP size 3``). Rendered for the ``inventory`` command's ``--tp``
    option, with the model's name when known; ``schedule_inventory`` words
    it for a schedule's ``tp`` line from ``reason``."""

    def __init__(self, tp: int, reason: str, model_name: str | None = None):
        super().__init__(f"--tp {tp}: {reason}" + (f" ({model_name})" if model_name
                                                   else ""))
        self.tp = tp
        self.reason = reason


def _check_layout(tp: int, tp_rank: int) -> None:
    if not isinstance(tp, int) or tp < 1:
        raise L2sModelError(f"--tp must be a positive integer, got {tp!r}")
    if not 0 <= tp_rank < tp:
        raise L2sModelError(f"--tp-rank must be in [0, {tp}), got {tp_rank}")


def analytical_inventory(config: Mapping[str, Any], tp: int, ep: bool,
                         tp_rank: int = 0, *, model_name: str | None = None,
                         adapter: str | None = None) -> Inventory:
    """The per-GPU inventory of every decoder layer, from a HF text config.

    ``config`` is a text-config dict (``load_model_config``; validated again
    here), ``tp`` the tensor-parallel size, ``ep`` True for
    ``--enable-expert-parallel`` (DP = 1: routed experts split over the ``tp``
    ranks, linear placement), ``tp_rank`` the rank whose tensors are listed
    (only the EP expert range depends on it), ``adapter`` the adapter's name
    (default: the one serving the config's ``architectures``, else
    ``DEFAULT_ADAPTER``). Pure Python: no torch, no vLLM.
    Raises ``L2sModelError`` on a bad config or a TP size a dimension does not
    divide by, ``KeyError`` for an unknown adapter name."""
    ad = adapter_of_config(config) if adapter is None else get_adapter(adapter)
    validate_config(config, "<config>", "", ad)
    _check_layout(tp, tp_rank)
    kinds = ad.layer_kinds(config)
    per_kind: dict[str, tuple[TensorEntry, ...]] = {}
    layers = []
    for kind in kinds:
        key = str(kind)
        if key not in per_kind:
            try:
                specs = ad.layer_specs(config, kind, tp, ep, tp_rank)
            except ValueError as e:
                raise TPSplitError(tp, str(e), model_name) from None
            by_path = {s.path: s for s in specs}
            order = ad.consumption_order(kind, [s.path for s in specs])
            per_kind[key] = tuple(_entry(ad, by_path[p]) for p in order)
        layers.append(per_kind[key])
    return Inventory(ad.NAME, model_name or ad.DEFAULT_MODEL_NAME, tp, bool(ep),
                     tp_rank, tuple(kinds), tuple(layers), "analytical")


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _entry(ad: ModelAdapter, s) -> TensorEntry:
    es = ad.DTYPE_BYTES[s.dtype]
    nbytes = _numel(s.shape) * es
    rep = nbytes if s.replicated else _numel((s.replicated_rows,) + s.shape[1:]) * es \
        if s.replicated_rows else 0
    return TensorEntry(s.path, s.dtype, tuple(s.shape), nbytes, s.replicated, rep,
                       s.lazy, s.view_of, s.decode_read, s.experts)


#: The attribute a module wrapper keeps the wrapped module in (vLLM's LoRA
#: layers, ``*WithLoRA``): a tensor's path leaves it out (``unwrapped``).
WRAPPED = "base_layer"


def unwrapped(path: str) -> str:
    """``path`` without its ``base_layer`` components
    (``self_attn.qkv_proj.base_layer.weight`` ->
    ``self_attn.qkv_proj.weight``): a LoRA-wrapped tensor keeps the name
    the adapter and the schedule know it by, and vLLM's wrappers hand the
    wrapped module's attributes out under it."""
    return ".".join(c for c in path.split(".") if c != WRAPPED)


def live_inventory(model_or_layers: Any, tp: int, ep: bool, tp_rank: int = 0, *,
                   model_name: str = "live model",
                   adapter: str = DEFAULT_ADAPTER) -> Inventory:
    """The per-GPU inventory read from a real ``torch.nn.Module`` tree.

    ``model_or_layers`` is a model of adapter ``adapter`` (anything its
    ``decoder_layers`` finds the layers of) or the decoder-layer
    ``ModuleList``. For
    each layer: every named parameter and buffer (module aliases collapsed to
    the canonical path, ``adapter.canonical_path``; a wrapper's
    ``base_layer`` left out, ``unwrapped``), plus the adapter's
    documented lazily created tensors (``adapter.lazy_paths(kind)``): read from the
    module when they exist, otherwise their shape/dtype is derived from the
    live tensors they are built from (``adapter.derive_lazy``). Replication,
    views and decode reads come from the adapter's catalogue. Layers without
    parameters (pipeline-parallel placeholders) are skipped. ``tp``/``ep``/
    ``tp_rank`` describe the process the model was built in. Imports nothing
    heavy itself (torch is only touched through the module's own methods).
    Raises ``AdapterCapabilityError`` when the adapter has no ``LiveModel``
    capability."""
    ad = require(get_adapter(adapter), LiveModel, "the live inventory")
    excluded = optional_member(ad, "EXCLUDED_BUFFERS")
    canonical_path = optional_member(ad, "canonical_path")
    lazy_paths = optional_member(ad, "lazy_paths")
    derive_lazy = optional_member(ad, "derive_lazy")
    _check_layout(tp, tp_rank)
    layers_mod = ad.decoder_layers(model_or_layers)
    kinds, layers = [], []
    for layer in layers_mod:
        names: dict[int, list[str]] = {}
        tensors: dict[int, Any] = {}
        for n, t in layer.named_parameters(remove_duplicate=False):
            names.setdefault(id(t), []).append(n)
            tensors[id(t)] = t
        for n, t in layer.named_buffers(remove_duplicate=False):
            if t is None or n.rsplit(".", 1)[-1] in excluded:
                continue
            names.setdefault(id(t), []).append(n)
            tensors[id(t)] = t
        if not tensors:
            continue
        kind = ad.live_layer_kind(layer)
        found: dict[str, tuple[tuple[int, ...], str]] = {}
        for tid, paths in names.items():
            t = tensors[tid]
            found[canonical_path([unwrapped(p) for p in paths])] = (
                tuple(t.shape), str(t.dtype).replace("torch.", ""))
        for path in lazy_paths(kind):
            if path in found:
                continue
            got = derive_lazy(layer, path)
            if got is not None:
                found[path] = got
        order = ad.consumption_order(kind, list(found))
        entries = []
        for p in order:
            shape, dtype = found[p]
            es = ad.DTYPE_BYTES.get(dtype)
            if es is None:
                raise L2sModelError(f"layer {len(layers)} {p}: dtype {dtype} "
                                    f"has no known element size")
            entries.append(_entry(ad, ad.live_spec(layer, kind, p, shape, dtype,
                                                   tp, ep, tp_rank)))
        kinds.append(kind)
        layers.append(tuple(entries))
    return Inventory(ad.NAME, model_name, tp, bool(ep), tp_rank, tuple(kinds),
                     tuple(layers), "live")


