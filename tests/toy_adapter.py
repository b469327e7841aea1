"""A toy model family for the adapter-protocol test: two decoder layers, a
``dense`` one (mixer + two-matrix FFN) and a ``sparse`` one (mixer +
router + routed experts), three hook points, a decode timeline, tensor
specs, a tiny config, and a torch module tree (``ToyForCausalLM``) the
installer can hook. Nothing here imports the GLM adapter: whatever a stage
needs from a model must come through ``ModelAdapter``.

``ToyAdapter()`` is an instance (not a module) on purpose: the registry
and the stages must take any object that honours the protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

NAME = "toy"
HIDDEN = 64
EXPERTS = 4

#: The embedded config (``default_config_text``).
CONFIG = {
    "architectures": ["ToyForCausalLM"], "model_type": "toy",
    "hidden_size": HIDDEN, "num_hidden_layers": 2, "n_routed_experts": EXPERTS,
    "num_experts_per_tok": 2, "toy_layer_types": ["dense", "sparse"],
    "torch_dtype": "float32",
}


@dataclass(frozen=True)
class ToyKind:
    """A toy layer kind: ``dense`` or ``sparse``; ``str()`` is the name."""

    name: str

    def __str__(self) -> str:
        return self.name


DENSE, SPARSE = ToyKind("dense"), ToyKind("sparse")


@dataclass(frozen=True)
class ToyInstall:
    mechanism: str
    target: str


@dataclass(frozen=True)
class ToyHook:
    name: str
    order: int
    kinds: tuple[str, ...]
    install: ToyInstall
    graph_modes: tuple[str, ...] = ("eager", "piecewise", "full")

    def exists_in(self, kind: ToyKind) -> bool:
        return kind.name in self.kinds

    def install_for(self, kind: ToyKind) -> ToyInstall:
        if not self.exists_in(kind):
            raise KeyError(f"hook {self.name} does not exist in {kind} layers")
        return self.install


@dataclass(frozen=True)
class ToyOp:
    name: str
    cls: str
    reads: tuple[str, ...] = ()
    hooks_before: tuple[str, ...] = ()
    hooks_after: tuple[str, ...] = ()
    stream: str = "main"
    eager_break: bool = False
    condition: str = ""


@dataclass(frozen=True)
class ToySpec:
    path: str
    dtype: str
    shape: tuple[int, ...]
    replicated: bool
    replicated_rows: int = 0
    lazy: bool = False
    view_of: str = ""
    decode_read: bool = True
    experts: tuple[int, int] | None = None


HOOKS = (
    ToyHook("toy.entry", 0, ("dense", "sparse"), ToyInstall("forward_pre_hook", "")),
    ToyHook("toy.after_mix", 10, ("dense", "sparse"), ToyInstall("forward_hook", "mix")),
    ToyHook("toy.before_experts", 20, ("sparse",),
            ToyInstall("wrap_before", "ffn.run_experts")),
)

_HEAD = (
    ToyOp("toy.norm", "small", ("norm.weight",), hooks_before=("toy.entry",)),
    ToyOp("toy.mix", "gemm", ("mix.weight",), hooks_after=("toy.after_mix",)),
    ToyOp("toy.all_reduce", "collective", condition="tp>1"),
)
TIMELINE = {
    "dense": _HEAD + (ToyOp("toy.ffn_in", "gemm", ("ffn.w_in",)),
                      ToyOp("toy.ffn_out", "gemm", ("ffn.w_out",))),
    "sparse": _HEAD + (ToyOp("toy.route", "small", ("ffn.router",),
                             hooks_after=("toy.before_experts",)),
                       ToyOp("toy.experts", "expert_stream", ("ffn.experts",))),
}


class ToyAdapter:
    """The toy model family as a ``ModelAdapter`` instance."""

    NAME = NAME
    ARCHITECTURES = ("ToyForCausalLM",)
    MODEL_TYPES = ("toy",)
    DEFAULT_CONFIG = "toy-config.json"
    DEFAULT_MODEL_NAME = "Toy-2L"
    REQUIRED_KEYS = {"hidden_size": (int,), "num_hidden_layers": (int,),
                     "n_routed_experts": (int,)}
    OPTIONAL_KEYS = {"toy_layer_types": (list, None), "torch_dtype": (str, None)}
    CONFIG_BOUNDS = {"num_hidden_layers": (1, 8)}
    DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
    SELECTORS = {"first": lambda k: k.name == "dense",
                 "experts": lambda k: k.name == "sparse"}
    HOOKS = HOOKS
    HOOKS_BY_NAME = {h.name: h for h in HOOKS}
    DECODER_LAYER_PATHS = ("layers",)
    # EXCLUDED_BUFFERS, WRITTEN_BUFFERS, COMPILED_MODULES, canonical_path,
    # lazy_paths, derive_lazy: left out, the protocol's defaults serve
    # (ToyForCausalLM runs as Python and has no lazy tensor)
    PIPELINE_PARALLEL_REFUSAL = "the toy model has no pipeline-parallel layout"

    def default_config_text(self) -> str:
        return json.dumps(CONFIG)

    def validate_config(self, config: Mapping[str, Any], err) -> None:
        if config["hidden_size"] % 16:
            err("hidden_size", f"must be a multiple of 16, got {config['hidden_size']}")

    def layer_kinds(self, config: Mapping[str, Any]) -> list[ToyKind]:
        n = config["num_hidden_layers"]
        names = config.get("toy_layer_types") or ["dense"] + ["sparse"] * (n - 1)
        for i, x in enumerate(names):
            if x not in ("dense", "sparse"):
                raise ValueError(f"toy_layer_types[{i}] = {x!r} is not dense or sparse")
        return [ToyKind(x) for x in names]

    def kind_selector(self, kind: ToyKind) -> tuple[str, ...]:
        return ("first",) if kind.name == "dense" else ("experts",)

    def subset_config(self, config, kinds, keep) -> dict:
        out = dict(config)
        out["num_hidden_layers"] = len(keep)
        out["toy_layer_types"] = [kinds[i].name for i in keep]
        return out

    def layer_specs(self, cfg, kind: ToyKind, tp: int, ep: bool, tp_rank: int) -> list:
        h, e = cfg["hidden_size"], cfg["n_routed_experts"]
        if h % tp:
            raise ValueError(f"hidden_size = {h} is not divisible by the TP size {tp}")
        dt = cfg.get("torch_dtype") or "float32"
        specs = [ToySpec("norm.weight", dt, (h,), True),
                 ToySpec("mix.weight", dt, (h // tp, h), False)]
        if kind.name == "dense":
            specs += [ToySpec("ffn.w_in", dt, (2 * h // tp, h), False),
                      ToySpec("ffn.w_out", dt, (h, 2 * h // tp), False)]
        else:
            specs += [ToySpec("ffn.experts", dt, (e, h, h // tp), False, experts=(0, e)),
                      ToySpec("ffn.router", dt, (e, h), True)]
        return specs

    def consumption_order(self, kind, paths: Sequence[str]) -> list[str]:
        order = [p for op in TIMELINE[kind.name] for p in op.reads if p in paths]
        return order + [p for p in paths if p not in order]

    def decode_timeline(self, kind: ToyKind):
        return TIMELINE[kind.name]

    def condition_holds(self, condition: str, layer: int, n_layers: int, tp: int,
                        ep: bool) -> bool:
        return {"": True, "tp>1": tp > 1}[condition]

    def core_state_bytes(self, tokens: int, tp: int) -> int:
        return 0

    def routing(self, config: Mapping[str, Any]) -> tuple[int, int]:
        return config["num_experts_per_tok"], config["n_routed_experts"]

    def decoder_layers(self, model):
        return getattr(model, "layers", model)

    def live_layer_kind(self, layer) -> ToyKind:
        return SPARSE if hasattr(layer.ffn, "router") else DENSE

    def live_spec(self, layer, kind, path, shape, dtype, tp, ep, tp_rank) -> ToySpec:
        experts = (0, shape[0]) if path == "ffn.experts" else None
        return ToySpec(path, dtype, tuple(shape), path in ("norm.weight", "ffn.router"),
                       experts=experts)

    def hooks_markdown(self, op_bytes=None) -> str:
        rows = [f"| `{h.name}` | {h.order} | {', '.join(h.kinds)} |" for h in HOOKS]
        return "# toy hooks\n\n| hook | order | kinds |\n|---|---|---|\n" + \
            "\n".join(rows) + "\n"


def toy_model(torch):
    """The toy model as torch modules (float32, TP 1): ``ToyForCausalLM``
    with ``.layers`` = [dense layer, sparse layer]; ``forward(x)`` runs the
    layers (the sparse FFN routes each token to its top-1 expert)."""
    nn = torch.nn

    class DenseFFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_in = nn.Parameter(torch.randn(2 * HIDDEN, HIDDEN) * 0.05)
            self.w_out = nn.Parameter(torch.randn(HIDDEN, 2 * HIDDEN) * 0.05)

        def forward(self, x):
            return torch.relu(x @ self.w_in.t()) @ self.w_out.t()

    class SparseFFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Parameter(torch.randn(EXPERTS, HIDDEN) * 0.05)
            self.experts = nn.Parameter(torch.randn(EXPERTS, HIDDEN, HIDDEN) * 0.05)

        def run_experts(self, x, pick):
            return torch.einsum("th,thk->tk", x, self.experts[pick])

        def forward(self, x):
            pick = (x @ self.router.t()).argmax(-1)
            return self.run_experts(x, pick)

    class Layer(nn.Module):
        def __init__(self, sparse: bool):
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN, elementwise_affine=True, bias=False)
            self.mix = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.ffn = SparseFFN() if sparse else DenseFFN()

        def forward(self, x):
            x = x + self.mix(self.norm(x))
            return x + self.ffn(x)

    class ToyForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer(False), Layer(True)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    return ToyForCausalLM()
