"""The bench module tree: a GLM-5.3-Flash-shaped decode step per TP rank.

``build_tree(inventory, ...)`` returns a ``BenchModel`` whose ``layers[i]``
holds, at the inventory's exact paths (relative to ``model.layers.{i}``), a
tensor of the inventory's per-rank shape and dtype for every entry of
``l2sched.inventory.analytical_inventory(config, tp, ep, tp_rank)``: weights
are random (``normal * 0.02``, never zeros); MLA ``W_UK_T``/``W_UV`` are the
strided views of ``kv_b_proj.weight`` vLLM 0.33.0 makes
(``mla_attention.py:1347-1349``); lazily created tensors exist from the start.

Routed experts: the real model holds 288 x 12.6 MB per MoE layer per GPU
(3.6 GB, 152 GB over 42 layers: more than the H200 has), so the tree
allocates ``expert_pools`` full ``(288, ...)`` pools and MoE layer ``i`` uses
pool ``i % expert_pools`` (the same Parameter object, so the path and shape
are the inventory's). Bytes streamed per step still equal the real model's:
each layer reads the expected number of distinct experts a step of ``M``
tokens picks (``distinct_experts``), a different random contiguous range per
layer, so consecutive layers never share L2 lines.

The modules carry the hook targets the adapter's ``HOOKS`` install on
(the default adapter's ``Install.target``): first projections and ``o_proj``/``down_proj``
are ``nn.Module`` with a per-module ``quant_method`` object whose ``apply``
runs the GEMM (``o_proj``'s forward then runs the all-reduce stand-in),
``self_attn._forward`` (KDA core), ``self_attn.mla_attn.mla_attn`` (MLA core
module), ``mlp.gate``, ``mlp.experts.routed_experts.forward_modular`` and
``mlp.experts._maybe_reduce_final_output``. ``l2sched.bench.step`` gives them
behaviour. torch is imported inside functions only.
"""

from __future__ import annotations

from typing import Any, Sequence

from l2sched.attrs import resolve_path


#: Distinct experts a decode step of ``tokens`` tokens reads (expected value,
#: top-k of n uniform): ``n * (1 - (1 - k/n)^tokens)``, rounded, at least k.
def distinct_experts(tokens: int, top_k: int = 8, n_experts: int = 288) -> int:
    """Expected distinct routed experts touched by ``tokens`` tokens that each
    pick ``top_k`` of ``n_experts`` (the lint's ``expert_bytes`` formula,
    ``l2sched.lint.graph``), rounded to an int in ``[min(top_k*tokens, n)...]``
    bounds: at least ``top_k``, at most ``n_experts``."""
    d = n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)
    return max(min(top_k, n_experts), min(n_experts, int(round(d))))


_TORCH_DTYPES = ("bfloat16", "float16", "float32", "int32", "int64")


class QuantMethod:
    """Per-module stand-in of vLLM's ``UnquantizedLinearMethod``: ``apply``
    runs ``x @ weight.T`` (one cuBLAS GEMM). An instance per module, so an
    instance-level wrapper (``attn.pre_all_reduce``) is per layer, as in
    vLLM 0.33.0 (``linear.py:1815``)."""

    def apply(self, layer, x):
        """``x``: ``[M, in]`` -> ``[M, out]`` (``layer.weight`` is ``[out, in]``)."""
        import torch.nn.functional as F
        return F.linear(x, layer.weight)


def _module_classes():
    """The torch module classes (defined lazily: torch stays out of import)."""
    import torch.nn as nn

    class Node(nn.Module):
        """A plain container at one dotted path of the tree."""

        def __init__(self):
            super().__init__()
            self.quant_method = QuantMethod()
            self.step = None      # the StepRunner, set by build_tree
            self.layer_idx = -1
            self.path = ""        # dotted path from the decoder layer

        def forward(self, *args, **kwargs):
            return self.step.module_forward(self, *args, **kwargs)

        # Hook targets the adapter wraps (the adapter's HOOKS): instance-wrappable
        # methods that run their op group through the StepRunner.
        def _forward(self, *args, **kwargs):
            return self.step.method_forward(self, "_forward")

        def forward_modular(self, *args, **kwargs):
            return self.step.method_forward(self, "forward_modular")

        def _maybe_reduce_final_output(self, *args, **kwargs):
            return self.step.method_forward(self, "_maybe_reduce_final_output")

    class Layer(nn.Module):
        """One decoder layer; forward runs the adapter's op order."""

        def __init__(self, idx: int, kind):
            super().__init__()
            self.layer_idx = idx
            self.kind = kind
            self.step = None

        def forward(self, x):
            return self.step.layer_forward(self, x)

    return Node, Layer


def _ensure(root, path: str, Node):
    obj = root
    here = []
    for part in path.split(".") if path else ():
        here.append(part)
        child = obj._modules.get(part) if hasattr(obj, "_modules") else None
        if child is None:
            child = Node()
            child.path = ".".join(here)
            child.layer_idx = root.layer_idx
            obj.add_module(part, child)
        obj = child
    return obj


def build_tree(inventory, *, device: str = "meta", expert_pools: int = 3,
               seed: int = 0, expert_pool_experts: int | None = None):
    """Build the bench tree for ``inventory`` (``Inventory`` of one TP rank).

    ``device``: ``"meta"`` (shapes only, for CPU tests), ``"cpu"`` or
    ``"cuda"``; ``expert_pools``: distinct routed-expert pools shared by the
    MoE layers; ``expert_pool_experts``: experts per pool on non-meta devices
    (default: the inventory's full dim 0; a smaller number only for CPU dry
    runs, and then the pool is not the inventory's shape). Returns a
    ``torch.nn.Module`` with ``.layers`` (``nn.ModuleList``) and
    ``.inventory``. Random weights: ``randn * 0.02`` (floats),
    ``randint(0, 4)`` (ints); never zeros."""
    import torch
    import torch.nn as nn

    Node, Layer = _module_classes()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pools: dict[tuple[str, int], Any] = {}

    def make(entry, layer_idx):
        dt = getattr(torch, entry.dtype)
        shape = tuple(entry.shape)
        if entry.experts is not None and expert_pool_experts and device != "meta":
            shape = (min(expert_pool_experts, shape[0]),) + shape[1:]
        if device == "meta":
            return torch.empty(shape, dtype=dt, device="meta")
        if dt.is_floating_point:
            if device == "cuda":
                return torch.randn(shape, dtype=dt, device="cuda").mul_(0.02)
            return (torch.randn(shape, generator=gen) * 0.02).to(dt)
        return torch.randint(0, 4, shape, dtype=dt, generator=gen).to(device)

    model = nn.Module()
    layers = []
    moe_seen = 0
    for i, kind in enumerate(inventory.kinds):
        lay = Layer(i, kind)
        entries = inventory.tensors(i)
        for e in entries:
            if e.view_of:
                continue
            head, _, name = e.path.rpartition(".")
            owner = _ensure(lay, head, Node)
            if e.experts is not None:
                key = (e.path, moe_seen % max(1, expert_pools))
                if key not in pools:
                    pools[key] = nn.Parameter(make(e, i), requires_grad=False)
                t = pools[key]
            else:
                t = make(e, i)
            if e.lazy:
                setattr(owner, name, t)   # plain attribute, as vLLM creates it
            elif t.dtype.is_floating_point:
                if isinstance(t, nn.Parameter):
                    owner.register_parameter(name, t)
                else:
                    owner.register_parameter(name, nn.Parameter(t, requires_grad=False))
            else:
                owner.register_buffer(name, t)
        if kind.mlp == "moe":
            moe_seen += 1
        for e in entries:  # MLA absorbed decode weights: views of kv_b_proj
            if not e.view_of:
                continue
            base = resolve_path(lay, e.view_of)
            head, _, name = e.path.rpartition(".")
            owner = _ensure(lay, head, Node)
            setattr(owner, name, mla_view(base, name, e.shape))
        layers.append(lay)
    model.layers = nn.ModuleList(layers)
    model.inventory = inventory
    return model


def mla_view(kv_b_weight, name: str, shape: Sequence[int]):
    """The strided view vLLM 0.33.0 makes of ``kv_b_proj.weight``
    (``[heads * (nope + v), kv_lora]``): ``W_UK_T`` = ``[heads, nope, kv_lora]``
    and ``W_UV`` = ``[heads, kv_lora, v]`` (``mla_attention.py:1347-1349``:
    ``weight.T.view(kv_lora, heads, nope + v)``, split, permuted). ``shape`` is
    the inventory's; both share the weight's storage."""
    heads = shape[0]
    kv_lora = kv_b_weight.shape[1]
    per = kv_b_weight.shape[0] // heads
    w = kv_b_weight.T.view(kv_lora, heads, per)
    if name == "W_UK_T":
        nope = shape[1]
        return w[:, :, :nope].permute(1, 2, 0)
    v = shape[2]
    return w[:, :, per - v:].transpose(0, 1)



def tree_entries(model) -> list[tuple[int, str, tuple[int, ...], str]]:
    """``(layer, path, shape, dtype name)`` of every parameter and buffer of
    the tree (deduplicated per layer), plus the plain-attribute tensors at
    the inventory's lazy paths, for comparing with the inventory."""
    out = []
    inv = model.inventory
    for i, lay in enumerate(model.layers):
        seen = set()
        for name, t in list(lay.named_parameters(remove_duplicate=False)) + \
                list(lay.named_buffers(remove_duplicate=False)):
            if name in seen:
                continue
            seen.add(name)
            out.append((i, name, tuple(t.shape), str(t.dtype).replace("torch.", "")))
        for e in inv.tensors(i):
            if e.path in seen:
                continue
            try:
                t = resolve_path(lay, e.path)
            except AttributeError:
                continue
            out.append((i, e.path, tuple(t.shape), str(t.dtype).replace("torch.", "")))
    return out
