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


#: Compute capabilities vLLM 0.33.0 launches PDL kernels on when it asks
#: ``current_platform.is_arch_support_pdl()`` (``platforms/cuda.py``,
#: ``CudaPlatformBase.is_arch_support_pdl``: major >= 9), as inclusive
#: ``(lowest, highest)`` ranges.
PDL_ARCH_SM90_UP = (((9, 0), (99, 99)),)
#: ``GateLinear``'s specialized tiers (``model_executor/layers/fused_moe/router/
#: gate_linear.py``, ``GateLinear.__init__``: ``is_device_capability((9, 0))``
#: or ``is_device_capability_family(100)``): SM90 and the SM100 family only,
#: not SM120/SM121.
PDL_ARCH_SM90_SM100F = (((9, 0), (9, 0)), ((10, 0), (10, 99)))


#: The layer conditions a ``PdlLaunch`` may have (``PdlLaunch.layer_holds``).
PDL_LAYER_CONDITIONS = ("", "layer>0", "layer==last")


@dataclass(frozen=True)
class PdlLaunch:
    """A fact about vLLM: the first kernel of decode op ``op`` (an ``Op.name``
    of the adapter's timeline) is launched with programmatic stream
    serialization (programmatic dependent launch), so a fill forked at a
    hook right before it starts when it starts (lint rule ``L2S113``;
    docs/runtime.md, "Programmatic-launch chains").

    It holds on a GPU whose compute capability ``(major, minor)`` lies in
    one of ``archs`` (inclusive ranges, e.g. ``PDL_ARCH_SM90_UP``) at a
    decode step of at most ``max_tokens`` tokens (0 = any), in layers where
    ``condition`` holds (``PDL_LAYER_CONDITIONS``: ``""`` = all, ``layer>0``,
    ``layer==last``; ``layer_holds``), in layers whose kind
    has an ``mlp`` in ``mlp`` (empty = all), and when the model config has
    each ``config`` key with one of its values (``(key, (values...))``; a
    missing key fails). ``kernel``: the kernel's name; ``source``: the vLLM
    0.33.0 file and function that decide it (paths relative to ``vllm/``);
    ``arch_text``: the arch condition in words; ``requires``: the package
    that must be installed for vLLM to take that path (the lint assumes it
    is; ``""`` = none)."""

    op: str
    kernel: str
    source: str
    archs: tuple[tuple[tuple[int, int], tuple[int, int]], ...]
    arch_text: str
    max_tokens: int = 0
    condition: str = ""
    mlp: tuple[str, ...] = ()
    config: tuple[tuple[str, tuple], ...] = ()
    requires: str = ""

    def layer_holds(self, layer: int, n_layers: int) -> bool:
        """Whether ``condition`` holds in layer ``layer`` of ``n_layers``.
        Raises ``KeyError`` for a condition not in ``PDL_LAYER_CONDITIONS``."""
        return {"": True, "layer>0": layer > 0,
                "layer==last": layer == n_layers - 1}[self.condition]

    def arch_holds(self, cc: tuple[int, int]) -> bool:
        """Whether compute capability ``cc`` ``(major, minor)`` is in ``archs``."""
        cc = (int(cc[0]), int(cc[1]))
        return any(lo <= cc <= hi for lo, hi in self.archs)

    def holds(self, cc: tuple[int, int], tokens: int, kind: Any,
              config: Mapping[str, Any] | None) -> bool:
        """Whether the launch is programmatic on compute capability ``cc`` at
        ``tokens`` decode tokens in a layer of ``kind`` with model config
        ``config`` (``None``: the ``config`` conditions fail). ``condition``
        is the caller's to test (``layer_holds``: it needs the layer)."""
        if not self.arch_holds(cc):
            return False
        if self.max_tokens and tokens > self.max_tokens:
            return False
        if self.mlp and getattr(kind, "mlp", None) not in self.mlp:
            return False
        for key, values in self.config:
            if config is None or config.get(key) not in values:
                return False
        return True


#: The source of the TileLang mHC kernels' PDL launch in vLLM 0.33.0:
#: ``model_executor/kernels/mhc/tilelang_kernels.py`` sets ``ENABLE_PDL =
#: is_arch_support_pdl() and is_cuda()`` and, under it, ``mhc_fused_tilelang``
#: (the fused post + pre, M <= 32: ``_FUSED_POST_PRE_MAX_TOKENS``),
#: ``mhc_post_tilelang`` and the pre kernels call ``T.pdl_sync()``; TileLang
#: launches a kernel that calls it with programmatic stream serialization
#: (its CUDA wrapper's ``has_cuda_pdl_sync``).
MHC_PDL_SOURCE = ("model_executor/kernels/mhc/tilelang.py mhc_fused_post_pre_tilelang "
                  "(first kernel mhc_fused_tilelang at M <= 32, mhc_post_tilelang above); "
                  "model_executor/kernels/mhc/tilelang_kernels.py ENABLE_PDL -> "
                  "T.pdl_sync()")


def mhc_tilelang_pdl(op: str, condition: str = "", via: str = "") -> PdlLaunch:
    """The ``PdlLaunch`` of decode op ``op`` whose first kernel is vLLM
    0.33.0's TileLang mHC post + pre (``MHC_PDL_SOURCE``): on sm_90 and
    newer at every M, in layers where ``condition`` holds; ``via``: the
    model file that calls it (prefixed to the source)."""
    return PdlLaunch(op, "mhc_fused_tilelang / mhc_post_tilelang",
                     (f"{via} -> " if via else "") + MHC_PDL_SOURCE, PDL_ARCH_SM90_UP,
                     "sm_90 and newer (is_arch_support_pdl)", condition=condition,
                     requires="TileLang")


def gate_ll_bf16_pdl(op: str, via: str = "", **when) -> PdlLaunch:
    """The ``PdlLaunch`` of router-gate op ``op`` run by vLLM 0.33.0's
    ``GateLinear`` tier 1, the CuTe DSL ``ll_bf16_gemm``
    (``model_executor/layers/fused_moe/router/gate_linear.py``
    ``GateLinear.forward``: bf16 weight, fp32 output, M <=
    ``LL_BF16_MAX_TOKENS`` = 16; ``model_executor/kernels/linear/cute_dsl/
    ll_bf16.py`` ``LLBf16Gemm`` compiles it with ``use_pdl=use_pdl()``, i.e.
    ``is_arch_support_pdl``), on sm_90 or the sm_100 family
    (``PDL_ARCH_SM90_SM100F``); ``via``: the model file that builds the gate;
    ``when``: more ``PdlLaunch`` conditions (``mlp``, ``config``)."""
    return PdlLaunch(op, "ll_bf16_gemm (CuTe DSL dot-product / split-K)",
                     (f"{via} -> " if via else "")
                     + "model_executor/layers/fused_moe/router/gate_linear.py "
                     "GateLinear.forward tier 1 (LL_BF16_MAX_TOKENS = 16); "
                     "model_executor/kernels/linear/cute_dsl/ll_bf16.py LLBf16Gemm "
                     "use_pdl=use_pdl()",
                     PDL_ARCH_SM90_SM100F, "sm_90 or the sm_100 family (not sm_120/sm_121)",
                     max_tokens=16, requires="nvidia-cutlass-dsl (CuTe DSL)", **when)


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
