"""Record types and helpers every model adapter shares: the analytical
``TensorSpec`` of one tensor, the ``Op`` of a decode timeline, the
``Install`` of a hook point with one install per layer, and the helpers
built on them (consumption order, a live model's decoder layers, TP
division). Each is the concrete form of a ``protocol`` record
(``TensorSpecLike``, ``OpLike``, ``InstallLike``); an adapter imports them
instead of defining its own copy."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable, Mapping, Sequence

from l2sched.attrs import resolve_path


@dataclass(frozen=True)
class TensorSpec:
    """Analytical facts of one tensor of one layer on one TP rank, before
    byte counting (``l2sched.model.inventory`` turns it into a
    ``TensorEntry``): ``path`` relative to the layer, ``dtype`` name,
    per-rank ``shape``, ``replicated`` (same full tensor on every TP rank),
    ``replicated_rows`` (leading-dim rows identical on every rank, for partly
    replicated tensors), ``lazy``, ``view_of``, ``decode_read`` and
    ``experts`` as in ``TensorEntry``."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    replicated: bool
    replicated_rows: int = 0
    lazy: bool = False
    view_of: str = ""
    decode_read: bool = True
    experts: tuple[int, int] | None = None


@dataclass(frozen=True)
class Op:
    """One operation of a layer's decode step (``protocol.OpLike``).

    ``name`` is unique within a layer kind; ``cls`` one of the op classes
    (``gemm``, ``small``, ``attention_core``, ``collective``,
    ``expert_stream``, ``shared_expert``); ``reads`` the tensors it reads
    (inventory paths relative to the layer; one absent from a given config is
    ignored); ``hooks_before``/``hooks_after`` the hook points that fire right
    before / after it; ``stream`` ``main`` or ``aux``; ``eager_break`` True
    inside an ``eager_break_during_capture`` region; ``condition`` one of the
    adapter's ``CONDITIONS`` (``""`` = always); ``source`` the vLLM
    file:line."""

    name: str
    cls: str
    description: str
    source: str
    reads: tuple[str, ...] = ()
    hooks_before: tuple[str, ...] = ()
    hooks_after: tuple[str, ...] = ()
    stream: str = "main"
    eager_break: bool = False
    condition: str = ""


@dataclass(frozen=True)
class Install:
    """How a hook point is installed (``protocol.InstallLike``) where one
    install serves every kind of layer: ``mechanism`` (``forward_pre_hook``,
    ``forward_hook``, ``wrap_before``, ``wrap_after``) on ``target``
    (attribute path from ``model.layers.{i}``; ``""`` = the layer), relying
    on the vLLM ``source`` file:line; ``note`` is shown in the hooks
    document."""

    mechanism: str
    target: str
    source: str
    note: str = ""


def consumption_order(timeline: Iterable[Op], paths: Sequence[str]) -> list[str]:
    """``paths`` (tensors of one layer) in decode consumption order: each
    tensor at the first op of ``timeline`` (the layer's decode timeline)
    that reads it; tensors no op reads follow, in the given order."""
    present = set(paths)
    out: list[str] = []
    for op in timeline:
        out += [p for p in op.reads if p in present and p not in out]
    return out + [p for p in paths if p not in out]


def decode_reads(timeline: Iterable[Op]) -> set[str]:
    """Every tensor path some op of ``timeline`` reads."""
    return {p for op in timeline for p in op.reads}


def decoder_layers(model: Any, paths: Sequence[str]) -> Any:
    """The decoder-layer list of a live model: the first of ``paths``
    (attribute paths, e.g. ``model.layers``) that resolves, else ``model``
    itself (already the list)."""
    for path in paths:
        try:
            return resolve_path(model, path)
        except AttributeError:
            continue
    return model


def divide(a: int, b: int, what: str) -> int:
    """``a / b`` for a dimension ``what`` split over TP size ``b``; raises
    ``ValueError`` naming it when ``b`` does not divide ``a``."""
    if a % b:
        raise ValueError(f"{what} = {a} is not divisible by the TP size {b}")
    return a // b


def canonical_path(paths: Sequence[str]) -> str:
    """The one name of a tensor reachable under several module aliases: the
    path with the fewest components, then the lexicographically smallest
    (``mlp.gate.weight`` over ``mlp.experts.gate.weight``: a MoE runner holds
    its block's gate)."""
    return min(paths, key=lambda p: (p.count("."), p))


def check_experts_per_token(config: Mapping[str, Any], err: Callable[[str, str], None],
                            experts_key: str) -> None:
    """Report ``err("num_experts_per_tok", ...)`` unless the config's
    ``num_experts_per_tok`` (read by the lint's routing model for the
    expert-stream bytes; absent or null: nothing to check) is an integer in
    ``1..config[experts_key]`` (the routed-expert count, an integer the
    caller's ``REQUIRED_KEYS`` has checked). Raises nothing."""
    topk = config.get("num_experts_per_tok")
    if topk is None:
        return
    high = config[experts_key]
    if not isinstance(topk, int) or isinstance(topk, bool):
        err("num_experts_per_tok", f"expected an integer, got "
            f"{type(topk).__name__} {topk!r}")
    elif not 1 <= topk <= high:
        err("num_experts_per_tok", f"must be in 1..{high} ({experts_key}), got {topk}")


#: The dtypes an adapter's inventory counts unquantized weights in.
FLOAT_DTYPES = ("bfloat16", "float16", "float32")


def check_float_dtype(config: Mapping[str, Any], err: Callable[[str, str], None],
                      dtype: str) -> None:
    """Report ``err(KEY, ...)`` (``torch_dtype`` when the config sets it,
    else ``dtype``) unless ``dtype``, the adapter's reading of the config's
    dtype, is one of ``FLOAT_DTYPES``. Raises nothing."""
    if dtype not in FLOAT_DTYPES:
        key = "torch_dtype" if config.get("torch_dtype") else "dtype"
        err(key, f"unsupported dtype {dtype!r} (bfloat16, float16 or float32)")


def data_config_text(file_name: str) -> str:
    """The text of the config ``file_name`` shipped as package data of
    ``l2sched.data`` (an adapter's ``DEFAULT_CONFIG``). Raises
    ``FileNotFoundError`` when there is none."""
    return resources.files("l2sched.data").joinpath(file_name).read_text(
        encoding="utf-8")
