"""Tensor inventory of a model: which tensors each decoder layer holds, per GPU.

An ``Inventory`` lists, for every decoder layer index, the layer's tensors in
decode consumption order (``TensorEntry``: path relative to
``model.layers.{i}``, dtype, per-rank shape, bytes, TP replication, lazily
created or not) at a given TP size, EP on/off and TP rank. Two sources that
must agree (``tests/test_inventory_vllm.py`` checks it on vLLM's real model):

- ``analytical_inventory(config, tp, ep)``: pure Python from a Hugging Face
  text config (``load_model_config``); no torch, no vLLM;
- ``live_inventory(model, tp, ep)``: from a real ``torch.nn.Module`` tree
  (named parameters, buffers, and the adapter's documented lazy tensors).

Units: bytes; ``MB`` = 10^6 B, ``MiB`` = 2^20 B. The model facts (shapes,
order, replication) live in the adapter module (``l2sched.adapters.glm5next``).
``add_cli`` registers ``l2sched inventory``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

from .errors import Diagnostic, DiagnosticSink, L2sModelError, Span, source_lines

MiB = 1 << 20

#: Name of the embedded default config (package data of ``l2sched.data``).
DEFAULT_CONFIG = "glm53-flash-config.json"
DEFAULT_MODEL_NAME = "GLM-5.3-Flash"


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
    ``GLM-5.3-Flash``), ``source`` ``analytical`` or ``live``.
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


# --------------------------------------------------------------------------
# config.json loading and validation
# --------------------------------------------------------------------------

def _adapter_for(arch: str | None, model_type: str | None):
    from .adapters import ADAPTERS, get_adapter

    for name in ADAPTERS:
        mod = get_adapter(name)
        if arch in getattr(mod, "ARCHITECTURES", ()) or (
                arch is None and model_type in getattr(mod, "MODEL_TYPES", ())):
            return mod
    return None


def _supported_archs() -> list[str]:
    from .adapters import ADAPTERS, get_adapter

    return sorted(a for n in ADAPTERS for a in getattr(get_adapter(n),
                                                       "ARCHITECTURES", ()))


def _key_span(path: str, text: str, key: str) -> Span | None:
    """The span of ``"key":`` in ``text`` (first occurrence), or ``None``."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    if not m:
        return None
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return Span(path, line, col, line, col + len(key) + 2)


def _key_diag(path: str, text: str, key: str, message: str) -> Diagnostic:
    """A diagnostic about ``key`` of the file ``path``: located at the key
    (``path:line:col``, with the source line) when ``text`` contains it, else
    the message is prefixed with ``path``."""
    span = _key_span(path, text, key) if text else None
    if span is None:
        return Diagnostic(f"{path}: {message}")
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


#: Upper bounds of the config's integer sizes: sanity limits far above any
#: real model, so that a typo (``num_hidden_layers: 10000000``) is an error
#: naming the key instead of minutes of work (``docs/inventory.md``). Keys
#: not listed here are bounded by ``MAX_DIM``.
MAX_DIM = 1 << 20
CONFIG_MAX: dict[str, int] = {
    "num_hidden_layers": 4096, "n_routed_experts": 65536,
    "n_shared_experts": 1024, "num_experts_per_tok": 65536, "hc_mult": 64,
    "linear_conv_kernel_dim": 1024, "index_kpool": 1024,
}


def validate_config(config: Mapping[str, Any], path: str = "<config>",
                    text: str = "", adapter=None) -> None:
    """Check a text config against what the adapter's inventory reads.

    Every problem (missing key, wrong type, bad value, unsupported feature)
    becomes one diagnostic naming the key and ``path`` (with the key's line
    when ``text``, the file's contents, is given); all are raised together as
    one ``L2sModelError``."""
    if adapter is None:
        from .adapters import get_adapter
        adapter = get_adapter("glm5next")
    sink = DiagnosticSink()
    where = "text_config." if text and '"text_config"' in text else ""

    def err(key: str, msg: str) -> None:
        sink.add(_key_diag(path, text, key, f"{where}{key}: {msg}"))

    for key, types in adapter.REQUIRED_KEYS.items():
        if key not in config:
            sink.add(Diagnostic(f"{path}: missing key '{where}{key}' "
                                f"({_type_name(types)}, needed for the "
                                f"{adapter.NAME} tensor inventory)"))
        elif not _type_ok(config[key], types):
            err(key, f"expected {_type_name(types)}, got "
                     f"{type(config[key]).__name__} {config[key]!r}")
        elif isinstance(config[key], int) and not isinstance(config[key], bool) \
                and config[key] < (0 if key in ("qk_rope_head_dim",
                                                "n_shared_experts") else 1):
            err(key, f"must be positive, got {config[key]}")
        elif isinstance(config[key], int) and not isinstance(config[key], bool) \
                and config[key] > CONFIG_MAX.get(key, MAX_DIM):
            err(key, f"must be at most {CONFIG_MAX.get(key, MAX_DIM)}, got "
                     f"{config[key]}")
    for key, types in adapter.OPTIONAL_KEYS.items():
        if key in config and not _type_ok(config[key], types):
            err(key, f"expected {_type_name(types)}, got "
                     f"{type(config[key]).__name__} {config[key]!r}")
    # Read by the lint's routing model (expert-stream bytes).
    topk = config.get("num_experts_per_tok")
    if topk is not None:
        n_exp = config.get("n_routed_experts")
        high = n_exp if _type_ok(n_exp, (int,)) and n_exp >= 1 else \
            CONFIG_MAX["num_experts_per_tok"]
        if not _type_ok(topk, (int,)):
            err("num_experts_per_tok", f"expected an integer, got "
                f"{type(topk).__name__} {topk!r}")
        elif not 1 <= topk <= high:
            err("num_experts_per_tok", f"must be in 1..{high} (n_routed_experts), "
                f"got {topk}")
    if sink.has_errors:
        sink.raise_if_errors(L2sModelError)
    if config["mhc"] is not True:
        err("mhc", "false is not supported: only the mHC decoder path of "
                   "GLM-5.3 (mhc: true) is modelled")
    if config["qk_rope_head_dim"] != 0:
        err("qk_rope_head_dim", f"must be 0 (GLM-5.3 MLA is NoPE), got "
                                f"{config['qk_rope_head_dim']}")
    if config.get("quantization_config") is not None:
        err("quantization_config", "quantized checkpoints are not modelled (the "
            "dense MLP and the experts would be FP8 with block scales); use "
            "the BF16 config")
    dt = adapter.model_dtype(config)
    if dt not in ("bfloat16", "float16", "float32"):
        key = "torch_dtype" if config.get("torch_dtype") else "dtype"
        err(key, f"unsupported dtype {dt!r} (bfloat16, float16 or float32)")
    n = config["num_hidden_layers"]
    for key in ("layer_types", "mlp_layer_types"):
        v = config.get(key)
        if v is not None:
            if len(v) != n:
                err(key, f"has {len(v)} entries, num_hidden_layers is {n}")
            elif not all(isinstance(x, str) for x in v):
                err(key, "entries must be strings")
    if not sink.has_errors:
        try:
            adapter.layer_kinds(config)
        except ValueError as e:
            err(str(e).split("[")[0], str(e))
    sink.raise_if_errors(L2sModelError)


def default_config_text() -> str:
    """Text of the embedded GLM-5.3-Flash config
    (``l2sched/data/glm53-flash-config.json``; sources in the ``.md`` next to it)."""
    return resources.files("l2sched.data").joinpath(DEFAULT_CONFIG).read_text(
        encoding="utf-8")


def load_model_config(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The validated HF **text** config dict of a model.

    ``path`` is a ``config.json``, a model directory holding one, or ``None``
    for the embedded GLM-5.3-Flash default. A multimodal config
    (``Glm5NextForConditionalGeneration``) is unwrapped to its
    ``text_config`` (top-level ``torch_dtype`` carried over). Raises
    ``L2sModelError`` naming the file (and the key) when the file is missing,
    is not JSON, has an unknown architecture, or lacks or mistypes a key."""
    if path is None:
        shown, text = f"<embedded {DEFAULT_CONFIG}>", default_config_text()
    else:
        shown = os.fspath(path)
        file = os.path.join(shown, "config.json") if os.path.isdir(shown) else shown
        try:
            # A FIFO or a device would block the read (or never end).
            if not stat.S_ISREG(os.stat(file).st_mode):
                raise L2sModelError(Diagnostic(f"{file}: not a regular file"))
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            what = "has no config.json" if file != shown else "no such file"
            raise L2sModelError(Diagnostic(f"{shown}: {what}")) from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise L2sModelError(Diagnostic(f"{file}: cannot read: {e}")) from None
        shown = file
        # An editor's UTF-8 byte-order mark is not part of the text.
        text = text.removeprefix("\ufeff")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        # e.lineno counts "\n" only; the error may sit just past the last line
        # (an unterminated "{" at the end of the file).
        lines = source_lines(text)
        line = lines[e.lineno - 1] if 1 <= e.lineno <= len(lines) else None
        raise L2sModelError(Diagnostic(
            f"not valid JSON: {e.msg}", Span.point(shown, e.lineno, e.colno),
            source_line=line)) from None
    except (ValueError, RecursionError) as e:
        # int() of a literal of thousands of digits, or nesting too deep
        msg = str(e).split(";")[0] or "nested too deeply"
        raise L2sModelError(Diagnostic(f"{shown}: not valid JSON: {msg}")) from None
    if not isinstance(raw, dict):
        raise L2sModelError(Diagnostic(
            f"{shown}: expected a JSON object, got {type(raw).__name__}"))
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if archs is not None and (not isinstance(archs, list) or not archs
                              or not all(isinstance(a, str) for a in archs)):
        raise L2sModelError(_key_diag(
            shown, text, "architectures",
            f"architectures: expected a non-empty list of strings, got {archs!r}"))
    if archs is None and model_type is None:
        raise L2sModelError(Diagnostic(
            f"{shown}: missing key 'architectures' (and no 'model_type'); "
            f"supported: {', '.join(_supported_archs())}"))
    adapter = None
    for a in archs or [None]:
        adapter = _adapter_for(a, model_type)
        if adapter is not None:
            break
    if adapter is None:
        key, val = ("architectures", archs) if archs else ("model_type",
                                                           model_type)
        raise L2sModelError(_key_diag(
            shown, text, key, f"{key}: unknown architecture {val!r}; supported: "
            f"{', '.join(_supported_archs())}"))
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


# --------------------------------------------------------------------------
# analytical inventory
# --------------------------------------------------------------------------

def _check_layout(tp: int, tp_rank: int) -> None:
    if not isinstance(tp, int) or tp < 1:
        raise L2sModelError(f"--tp must be a positive integer, got {tp!r}")
    if not 0 <= tp_rank < tp:
        raise L2sModelError(f"--tp-rank must be in [0, {tp}), got {tp_rank}")


def analytical_inventory(config: Mapping[str, Any], tp: int, ep: bool,
                         tp_rank: int = 0, *, model_name: str | None = None,
                         adapter: str = "glm5next") -> Inventory:
    """The per-GPU inventory of every decoder layer, from a HF text config.

    ``config`` is a text-config dict (``load_model_config``; validated again
    here), ``tp`` the tensor-parallel size, ``ep`` True for
    ``--enable-expert-parallel`` (DP = 1: routed experts split over the ``tp``
    ranks, linear placement), ``tp_rank`` the rank whose tensors are listed
    (only the EP expert range depends on it). Pure Python: no torch, no vLLM.
    Raises ``L2sModelError`` on a bad config or a TP size a dimension does not
    divide by."""
    from .adapters import get_adapter

    ad = get_adapter(adapter)
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
                raise L2sModelError(f"--tp {tp}: {e} "
                                    f"({model_name or '<config>'})") from None
            by_path = {s.path: s for s in specs}
            order = ad.consumption_order(kind, [s.path for s in specs])
            per_kind[key] = tuple(_entry(ad, by_path[p]) for p in order)
        layers.append(per_kind[key])
    return Inventory(ad.NAME, model_name or DEFAULT_MODEL_NAME, tp, bool(ep),
                     tp_rank, tuple(kinds), tuple(layers), "analytical")


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _entry(ad, s) -> TensorEntry:
    es = ad.DTYPE_BYTES[s.dtype]
    nbytes = _numel(s.shape) * es
    rep = nbytes if s.replicated else _numel((s.replicated_rows,) + s.shape[1:]) * es \
        if s.replicated_rows else 0
    return TensorEntry(s.path, s.dtype, tuple(s.shape), nbytes, s.replicated, rep,
                       s.lazy, s.view_of, s.decode_read, s.experts)


# --------------------------------------------------------------------------
# live inventory
# --------------------------------------------------------------------------

def live_inventory(model_or_layers: Any, tp: int, ep: bool, tp_rank: int = 0, *,
                   model_name: str = "live model",
                   adapter: str = "glm5next") -> Inventory:
    """The per-GPU inventory read from a real ``torch.nn.Module`` tree.

    ``model_or_layers`` is a ``Glm5NextForCausalLM`` (or anything with
    ``.model.layers``/``.layers``) or the decoder-layer ``ModuleList``. For
    each layer: every named parameter and buffer (module aliases collapsed to
    the canonical path, ``adapter.canonical_path``), plus the adapter's
    documented lazily created tensors (``adapter.LAZY_TENSORS``): read from the
    module when they exist, otherwise their shape/dtype is derived from the
    live tensors they are built from (``adapter.derive_lazy``). Replication,
    views and decode reads come from the adapter's catalogue. Layers without
    parameters (pipeline-parallel placeholders) are skipped. ``tp``/``ep``/
    ``tp_rank`` describe the process the model was built in. Imports nothing
    heavy itself (torch is only touched through the module's own methods)."""
    from .adapters import get_adapter

    ad = get_adapter(adapter)
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
            if t is None or n.rsplit(".", 1)[-1] in ad.EXCLUDED_BUFFERS:
                continue
            names.setdefault(id(t), []).append(n)
            tensors[id(t)] = t
        if not tensors:
            continue
        kind = ad.live_layer_kind(layer)
        found: dict[str, tuple[tuple[int, ...], str]] = {}
        for tid, paths in names.items():
            t = tensors[tid]
            found[ad.canonical_path(paths)] = (tuple(t.shape),
                                               str(t.dtype).replace("torch.", ""))
        for path, (attn, _view, _src) in ad.LAZY_TENSORS.items():
            if attn != kind.attention or path in found:
                continue
            got = ad.derive_lazy(layer, path)
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
            entries.append(ad.live_entry(layer, kind, p, shape, dtype,
                                         _numel(shape) * es, tp, ep, tp_rank))
        kinds.append(kind)
        layers.append(tuple(entries))
    return Inventory(ad.NAME, model_name, tp, bool(ep), tp_rank, tuple(kinds),
                     tuple(layers), "live")


# --------------------------------------------------------------------------
# rendering and CLI
# --------------------------------------------------------------------------

def _ranges(idx: Sequence[int]) -> str:
    out, start = [], None
    for a, b in zip(idx, list(idx[1:]) + [None]):
        start = a if start is None else start
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = None
    return ",".join(out)


def _mib(n: int) -> str:
    return f"{n / MiB:,.2f} MiB"


def render_table(inv: Inventory) -> str:
    """The ``l2sched inventory`` text: per layer kind, one row per tensor
    (path, dtype, per-rank shape, bytes, replicated, lazy) and the per-layer
    totals, then the totals over all layers (per GPU; views not counted)."""
    lines = [f"{inv.model_name} ({inv.model}): {len(inv.layers)} decoder layers, "
             f"TP{inv.tp}{' + EP' if inv.ep else ''}, tensors of TP rank "
             f"{inv.tp_rank} ({inv.source}), bytes per GPU"]
    for kind, idx in inv.kind_groups():
        ts = inv.layers[idx[0]]
        lines += ["", f"{kind}: {len(idx)} layer(s): {_ranges(idx)}"]
        rows = [("tensor", "dtype", "shape", "bytes", "replicated", "lazy")]
        for t in ts:
            rep = ("yes" if t.replicated else
                   f"{t.replicated_bytes:,} B" if t.replicated_bytes else "no")
            notes = []
            if t.view_of:
                notes.append(f"view of {t.view_of}")
            if not t.decode_read:
                notes.append("not read in decode")
            if t.experts:
                notes.append(f"experts {t.experts[0]}-{t.experts[1] - 1}, "
                             f"{t.bytes_per_expert:,} B each")
            path = t.path + (f"  ({'; '.join(notes)})" if notes else "")
            rows.append((path, t.dtype, "x".join(map(str, t.shape)) or "()",
                         f"{t.nbytes:,}", rep, "yes" if t.lazy else "no"))
        w = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            lines.append("  " + "  ".join(
                r[i].rjust(w[i]) if i == 3 else r[i].ljust(w[i])
                for i in range(6)).rstrip())
        full = inv.layer_bytes(idx[0])
        lines.append(f"  per layer: {full:,} B = {_mib(full)}")
        if any(t.experts for t in ts):
            nr = inv.layer_bytes(idx[0], routed=False)
            lines.append(f"  per layer without routed experts: {nr:,} B = "
                         f"{_mib(nr)}")
    tot, tot_nr = inv.total_bytes(), inv.total_bytes(routed=False)
    lines += ["", f"total over {len(inv.layers)} layers: {tot:,} B = {_mib(tot)}",
              f"total without routed experts: {tot_nr:,} B = {_mib(tot_nr)}"]
    return "\n".join(lines) + "\n"


def hooks_md_text() -> str:
    """The text of ``docs/hooks.md``: the adapter's generator with the bytes
    each op reads per GPU at TP4 on the embedded config."""
    from .adapters import glm5next as ad

    inv = analytical_inventory(load_model_config(None), 4, False)
    first = {str(k): i for i, k in reversed(list(enumerate(inv.kinds)))}

    def op_bytes(kind, op) -> str:
        have = {t.path: t for t in inv.layers[first[str(kind)]]}
        reads = [have[p] for p in op.reads if p in have]
        if any(t.experts for t in reads):
            each = sum(t.bytes_per_expert for t in reads)
            return f"{each:,} per picked expert"
        return f"{sum(t.nbytes for t in reads):,}"

    return ad.hooks_markdown(op_bytes)


def run_inventory(args) -> int:
    """Handler of ``l2sched inventory``: print the table (or ``--json``).
    Returns 0, 1 after printing an ``L2sError``, or 2 for a ``--tp`` or
    ``--tp-rank`` out of range."""
    import sys

    from .errors import L2sError

    if args.tp < 1:
        print(f"l2sched inventory: error: --tp must be at least 1, got {args.tp}",
              file=sys.stderr)
        return 2
    if not 0 <= args.tp_rank < args.tp:
        print(f"l2sched inventory: error: --tp-rank must be in 0..{args.tp - 1}, "
              f"got {args.tp_rank}", file=sys.stderr)
        return 2
    try:
        config = load_model_config(args.model_config)
        name = args.model_config or DEFAULT_MODEL_NAME
        inv = analytical_inventory(config, args.tp, args.ep, args.tp_rank,
                                   model_name=name)
    except L2sError as e:
        print(str(e), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(inv.to_json(), indent=1))
    else:
        print(render_table(inv), end="")
    return 0


def add_cli(subparsers) -> None:
    """Register ``inventory [--model-config P] [--tp N] [--ep] [--tp-rank R]
    [--json]`` on an argparse ``subparsers``; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "inventory", help="per-GPU tensor inventory of every decoder layer",
        description="Print each layer kind's tensors (bytes per GPU, TP "
                    "replication, lazily created) and the totals, from a HF "
                    "config.json (default: the embedded GLM-5.3-Flash config).")
    p.add_argument("--model-config", metavar="PATH",
                   help="HF config.json or model directory (default: the "
                        "embedded GLM-5.3-Flash config)")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor-parallel size (default 1)")
    p.add_argument("--ep", action="store_true",
                   help="expert parallel (--enable-expert-parallel, DP 1)")
    p.add_argument("--tp-rank", type=int, default=0, metavar="R",
                   help="TP rank whose tensors are listed (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=run_inventory)
