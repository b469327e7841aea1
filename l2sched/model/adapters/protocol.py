"""The model-adapter interface: every name a pipeline stage reads from an
adapter, as ``typing.Protocol`` classes (the way vLLM's
``model_executor/models/interfaces.py`` describes what a model class
offers).

An adapter is any object with these members; the shipped ones are modules
(the packages under ``l2sched.model.adapters``), a test's may be a class
instance.
``l2sched.model.adapters.get_adapter(name)`` returns one typed as
``ModelAdapter``; ``register_adapter`` checks a run-time one with
``missing_members``. The records an adapter hands out (layer kinds, hook
points and their installs, decode ops, tensor specs) are described by the
``LayerKindLike``/``HookPointLike``/``InstallLike``/``OpLike``/
``TensorSpecLike`` protocols: an adapter defines its own dataclasses.

Conventions: tensor and module paths are attribute paths relative to the
decoder layer ``model.layers.{i}``; sizes are bytes; ``tp`` is the
tensor-parallel size, ``ep`` True for expert parallelism with DP = 1 (EP
size = ``tp``), ``tp_rank`` the rank in ``[0, tp)``; a *config* is the
validated Hugging Face **text** config dict (``model.config``).
"""

from __future__ import annotations

from typing import (
    Any,
    Callable,
    Mapping,
    Protocol,
    Sequence,
    runtime_checkable,
)

from l2sched.errors import L2sModelError
from l2sched.model.adapters import records


@runtime_checkable
class LayerKindLike(Protocol):
    """The kind of one decoder layer (GLM: ``LayerKind(attention, mlp)``).

    Hashable and compared by value; ``str(kind)`` is its name as the
    reports, the inventory's JSON, the device profiles' ``[ops]`` keys and
    the fit's window names show it (GLM: ``kda+moe``). Two layers have the
    same kind exactly when they have the same tensors and decode timeline.
    """

    def __hash__(self) -> int: ...

    def __eq__(self, other: object) -> bool: ...

    def __str__(self) -> str: ...


@runtime_checkable
class InstallLike(Protocol):
    """How a hook point is installed on one kind of layer.

    ``mechanism``: ``forward_pre_hook`` / ``forward_hook`` (a
    ``register_forward_pre_hook`` / ``register_forward_hook`` on the module
    at ``target``) or ``wrap_before`` / ``wrap_after`` (``target``'s last
    component is a bound method replaced, on the instance, by a wrapper that
    runs the hook before / after it). ``target``: attribute path from the
    decoder layer (``""`` = the layer itself)."""

    mechanism: str
    target: str


@runtime_checkable
class HookPointLike(Protocol):
    """One hook point a schedule may name (``window ... at NAME``).

    ``name``: unique; ``order``: position in the layer's decode timeline,
    smaller fires earlier (the compiler orders a layer's windows by it and
    ``carry`` may only flow to a later one); ``graph_modes``: the graph
    modes (``l2sched.units.GRAPH_MODES``) whose Python runs the hook (lint
    rule ``L2S004``)."""

    name: str
    order: int
    graph_modes: Sequence[str]

    def exists_in(self, kind: Any) -> bool:
        """True when the hook fires in a layer of ``kind``."""
        ...

    def install_for(self, kind: Any) -> InstallLike:
        """The install to use in a layer of ``kind``; ``KeyError`` when the
        hook does not exist there."""
        ...


@runtime_checkable
class OpLike(Protocol):
    """One operation of a layer's decode step (``decode_timeline``).

    ``name``: unique within a kind (device profiles key measured times by
    ``(str(kind), name)``); ``cls``: ``gemm`` (memory-bound weight stream),
    ``small``, ``attention_core``, ``collective`` (TP all-reduce of the
    hidden state), ``expert_stream`` (routed experts: only the picked
    experts' bytes), ``shared_expert``; ``reads``: tensor paths it reads
    (absent ones ignored); ``hooks_before``/``hooks_after``: hook names that
    fire right before/after it; ``stream``: ``main`` or ``aux``;
    ``eager_break``: inside an eager-break (non-captured) region;
    ``condition``: a condition ``condition_holds`` understands (``""`` =
    always)."""

    name: str
    cls: str
    reads: Sequence[str]
    hooks_before: Sequence[str]
    hooks_after: Sequence[str]
    stream: str
    eager_break: bool
    condition: str


@runtime_checkable
class TensorSpecLike(Protocol):
    """One tensor of one layer on one TP rank, before byte counting
    (``model.inventory`` turns it into a ``TensorEntry``): ``path``,
    ``dtype`` (a key of ``DTYPE_BYTES``), per-rank ``shape``,
    ``replicated`` (same full tensor on every rank), ``replicated_rows``
    (leading rows identical on every rank), ``lazy`` (created at the first
    forward or after weight loading), ``view_of`` (path whose storage it
    views, ``""`` if none), ``decode_read`` (a decode step reads it) and
    ``experts`` (global expert ids ``[start, stop)`` along dim 0 for
    routed-expert tensors, else ``None``)."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    replicated: bool
    replicated_rows: int
    lazy: bool
    view_of: str
    decode_read: bool
    experts: tuple[int, int] | None


@runtime_checkable
class ModelAdapter(Protocol):
    """The facts every stage needs about one model family, by stage.

    Identity and configs (``model.config``, CLI): ``NAME``,
    ``ARCHITECTURES``, ``MODEL_TYPES``, ``DEFAULT_CONFIG``,
    ``DEFAULT_MODEL_NAME``, ``default_config_text``, ``REQUIRED_KEYS``,
    ``OPTIONAL_KEYS``, ``CONFIG_BOUNDS``, ``validate_config``.
    Layers (language, inventory, fit): ``layer_kinds``, ``SELECTORS``,
    ``kind_selector``, ``subset_config``. Hooks (language, compiler, lint,
    vLLM install): ``HOOKS``, ``HOOKS_BY_NAME``. Timeline (lint, fit):
    ``decode_timeline``, ``condition_holds``, ``core_state_bytes``,
    ``consumption_order``, ``routing``. Tensors (inventory): ``DTYPE_BYTES``,
    ``layer_specs``.

    What only some commands need is a capability of its own, opt-in:
    ``LiveModel`` (a live module tree: ``live_inventory``, the vLLM plugin)
    and ``HooksDocument`` (``l2sched docs hooks``); ``require`` names the
    adapter and what it lacks. Members with a default most adapters share
    (``OptionalMembers``: lazily created tensors, buffers, compiled modules,
    pipeline parallelism) may be left out; ``optional_member`` reads them.
    """

    #: The adapter's name, as written after ``model`` in a schedule and
    #: stored as ``Inventory.model`` / ``Schedule.model``.
    NAME: str
    #: ``config.json`` ``architectures`` entries (and the vLLM model class
    #: names the plugin installs into) this adapter serves.
    ARCHITECTURES: Sequence[str]
    #: ``model_type`` values served when a config has no ``architectures``.
    MODEL_TYPES: Sequence[str]
    #: The embedded config's file name, shown as ``<embedded NAME>`` in
    #: messages about it.
    DEFAULT_CONFIG: str
    #: Human name of the embedded config's model (``GLM-5.3-Flash``).
    DEFAULT_MODEL_NAME: str
    #: Config keys the analytical inventory reads -> allowed JSON types
    #: (``int`` excludes ``bool``; ``None`` = may be null). Missing or
    #: mistyped ones are errors naming the key.
    REQUIRED_KEYS: Mapping[str, tuple[type | None, ...]]
    #: Keys read when present -> allowed JSON types.
    OPTIONAL_KEYS: Mapping[str, tuple[type | None, ...]]
    #: Integer config keys -> ``(lowest, highest)`` accepted value (sanity
    #: bounds); unlisted integer keys take ``(1, model.config.MAX_DIM)``.
    CONFIG_BOUNDS: Mapping[str, tuple[int, int]]
    #: Element size in bytes per dtype name (``bfloat16`` -> 2).
    DTYPE_BYTES: Mapping[str, int]
    #: Layer selector names a schedule's ``layers`` may use besides ``all``,
    #: indices and ranges, in the order error messages list them -> the
    #: predicate on a layer kind (GLM: ``kda``, ``mla``, ``dense``, ``moe``).
    SELECTORS: Mapping[str, Callable[[Any], bool]]
    #: The hook catalogue, in timeline order.
    HOOKS: Sequence[HookPointLike]
    #: ``HOOKS`` by name, same order.
    HOOKS_BY_NAME: Mapping[str, HookPointLike]
    def default_config_text(self) -> str:
        """The text (JSON) of the config embedded for this adapter."""
        ...

    def validate_config(self, config: Mapping[str, Any],
                        err: Callable[[str, str], None]) -> None:
        """The model's own checks of a config whose ``REQUIRED_KEYS`` and
        ``OPTIONAL_KEYS`` are present and typed: report each problem as
        ``err(key, message)`` (unsupported features, dtypes, per-layer list
        lengths). Raises nothing. ``layer_kinds`` is tried afterwards by
        ``model.config.validate_config``."""
        ...

    def layer_kinds(self, config: Mapping[str, Any]) -> list:
        """The kind (``LayerKindLike``) of every decoder layer, in order.
        Raises ``ValueError`` (``KEY[i] = ...``) on a value it does not
        know."""
        ...

    def kind_selector(self, kind: Any) -> tuple[str, ...]:
        """Names of ``SELECTORS`` whose intersection selects exactly the
        layers of ``kind`` (GLM ``kda+moe`` -> ``("kda", "moe")``); the fit
        writes its windows' ``layers`` with them."""
        ...

    def subset_config(self, config: Mapping[str, Any], kinds: Sequence[Any],
                      keep: Sequence[int]) -> dict:
        """The config of a model made of layers ``keep`` (indices into the
        full model, whose layer kinds are ``kinds``) of ``config``, in that
        order: the fit's surrogate model."""
        ...

    def layer_specs(self, cfg: Mapping[str, Any], kind: Any, tp: int, ep: bool,
                    tp_rank: int) -> list:
        """Analytical per-rank ``TensorSpecLike`` of one layer of ``kind``.
        Raises ``ValueError`` naming the dimension when one does not divide
        by ``tp`` (the inventory turns it into a ``TPSplitError``)."""
        ...

    def consumption_order(self, kind: Any, paths: Sequence[str]) -> list[str]:
        """``paths`` (tensors of one layer of ``kind``) in decode consumption
        order; tensors no op reads follow in the given order."""
        ...

    def decode_timeline(self, kind: Any) -> Sequence[OpLike]:
        """The ordered ops of one decode step of a layer of ``kind``."""
        ...

    def condition_holds(self, condition: str, layer: int, n_layers: int,
                        tp: int, ep: bool) -> bool:
        """Whether an op's ``condition`` holds in layer ``layer`` of
        ``n_layers`` at TP ``tp``. Raises ``KeyError`` for an unknown one."""
        ...

    def routing(self, config: Mapping[str, Any]) -> tuple[int, int]:
        """``(experts per token, routed experts)`` of a validated config (the
        lint's expected expert-stream bytes; GLM ``num_experts_per_tok`` and
        ``n_routed_experts``, Qwen3-MoE ``num_experts``); ``(k, 0)`` for a
        model without routed experts."""
        ...

    def core_state_bytes(self, tokens: int, tp: int) -> int:
        """Bytes (per rank) one ``attention_core`` op of a decode step of
        ``tokens`` tokens streams through the L2 (0 when none)."""
        ...

@runtime_checkable
class LiveModel(Protocol):
    """Capability: reading a live vLLM module tree of the model
    (``model.inventory.live_inventory``, the vLLM plugin's install)."""

    #: Attribute paths where a live model keeps its decoder-layer list
    #: (tried in order by ``decoder_layers``; named in the plugin's error).
    DECODER_LAYER_PATHS: Sequence[str]

    def decoder_layers(self, model: Any) -> Any:
        """The decoder-layer list of a live model (``model`` itself when no
        ``DECODER_LAYER_PATHS`` entry resolves)."""
        ...

    def live_layer_kind(self, layer: Any) -> Any:
        """The kind of a live decoder layer."""
        ...

    def live_spec(self, layer: Any, kind: Any, path: str, shape: tuple[int, ...],
                  dtype: str, tp: int, ep: bool, tp_rank: int) -> TensorSpecLike:
        """The ``TensorSpecLike`` of a tensor read off a live layer."""
        ...


@runtime_checkable
class HooksDocument(Protocol):
    """Capability: generating the hook catalogue document (``l2sched docs
    hooks``)."""

    def hooks_markdown(self, op_bytes: Callable[[Any, OpLike], str] | None = None
                       ) -> str:
        """The text of the hook catalogue document (``docs/hooks.md`` for the
        default adapter); ``op_bytes(kind, op)`` gives the bytes-read column
        (omitted without it)."""
        ...


class OptionalMembers(Protocol):
    """Members an adapter may leave out; ``optional_member`` gives the
    default (``OPTIONAL_MEMBERS``) in place of a missing one."""

    #: Buffer names (last path component) the live inventory leaves out.
    #: Default: vLLM's rotary ``cos_sin_cache`` (a cache ``get_rope`` shares
    #: between layers, not a weight).
    EXCLUDED_BUFFERS: Sequence[str]
    #: The model's own caches and buffers it writes during decode right
    #: before reading them: glob over paths relative to the layer -> why
    #: (lint rule ``L2S003`` refuses them besides vLLM's KV cache, block
    #: tables and rotary caches). Default: none.
    WRITTEN_BUFFERS: Mapping[str, str]
    #: Attribute paths, from the top-level vLLM model object, of the modules
    #: vLLM compiles with ``torch.compile`` (its ``@support_torch_compile``
    #: classes, e.g. Qwen3-MoE's ``model``: ``Qwen3MoeModel``). Under a
    #: compiling ``compilation_config.mode`` Dynamo traces the hooks of such
    #: a module instead of running them, so the vLLM plugin refuses to
    #: install. Default: none (the decoder layers run as Python).
    COMPILED_MODULES: Sequence[str]
    #: Why the vLLM plugin refuses pipeline parallelism (PP > 1) for this
    #: model, with its source (GLM-5.3: vLLM 0.33.0 gates PP off). Default
    #: ``""``: each PP rank may plan and install its own layers.
    PIPELINE_PARALLEL_REFUSAL: str
    #: The decode ops (``OpLike.name``) vLLM launches with programmatic
    #: dependent launch and when (``records.PdlLaunch``: arch, M, layer,
    #: config), each with its vLLM source; lint rule ``L2S113``. Default:
    #: none known (the lint then says nothing).
    PDL_LAUNCHES: Sequence[records.PdlLaunch]

    def canonical_path(self, paths: Sequence[str]) -> str:
        """The one name of a tensor reachable under several module aliases.
        Default: ``records.canonical_path`` (fewest components first)."""
        ...

    def lazy_paths(self, kind: Any) -> Sequence[str]:
        """Paths of the lazily created tensors a layer of ``kind`` has (read
        from a live layer when present, else ``derive_lazy``). Default:
        none."""
        ...

    def derive_lazy(self, layer: Any, path: str) -> tuple[tuple[int, ...], str] | None:
        """``(shape, dtype)`` the lazy tensor ``path`` will have in the live
        ``layer``; ``None`` when the layer lacks what it is built from.
        Default: always ``None``."""
        ...


def _no_lazy_paths(kind: Any) -> tuple[str, ...]:
    return ()


def _no_lazy_tensor(layer: Any, path: str) -> None:
    return None


#: ``OptionalMembers`` name -> the value used where an adapter has none.
OPTIONAL_MEMBERS: dict[str, Any] = {
    "EXCLUDED_BUFFERS": ("cos_sin_cache",),
    "WRITTEN_BUFFERS": {},
    "COMPILED_MODULES": (),
    "PIPELINE_PARALLEL_REFUSAL": "",
    "PDL_LAUNCHES": (),
    "canonical_path": records.canonical_path,
    "lazy_paths": _no_lazy_paths,
    "derive_lazy": _no_lazy_tensor,
}


def optional_member(adapter: object, name: str) -> Any:
    """``adapter``'s member ``name`` (one of ``OPTIONAL_MEMBERS``), or its
    default there when the adapter has none. Raises ``KeyError`` for a name
    ``OPTIONAL_MEMBERS`` does not list."""
    default = OPTIONAL_MEMBERS[name]
    return getattr(adapter, name, default)


class AdapterCapabilityError(L2sModelError):
    """A command needs a capability (``LiveModel``, ``HooksDocument``) the
    model's adapter does not offer; the message names both."""


def _members(protocol: type) -> tuple[str, ...]:
    """The member names ``protocol`` declares, in declaration order."""
    return tuple(
        list(getattr(protocol, "__annotations__", {}))
        + [k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")])


def require(adapter: Any, capability: type, needed_by: str) -> Any:
    """``adapter`` when it has every member of ``capability`` (a protocol
    of this module); raises ``AdapterCapabilityError`` naming the adapter,
    what it lacks and ``needed_by`` (the command or stage) otherwise."""
    missing = [m for m in _members(capability) if not hasattr(adapter, m)]
    if missing:
        raise AdapterCapabilityError(
            f"adapter {getattr(adapter, 'NAME', adapter)!r} has no "
            f"{capability.__name__} capability ({', '.join(missing)} missing), "
            f"which {needed_by} needs")
    return adapter


#: Every member ``ModelAdapter`` lists, in declaration order.
MEMBERS: tuple[str, ...] = _members(ModelAdapter)


def missing_members(adapter: object) -> list[str]:
    """The ``ModelAdapter`` members ``adapter`` lacks (empty: it honours the
    protocol, as far as names go; the capabilities and ``OptionalMembers``
    are not asked for)."""
    return [m for m in MEMBERS if not hasattr(adapter, m)]
