"""Idle intervals where a TP model all-reduces, in vLLM 0.33.0's real module
tree served at TP1 (``shapes.rank_config``: one rank's shapes).

At TP > 1 vLLM all-reduces the output of every row-parallel ``o_proj`` and
dense ``down_proj`` (``model_executor/layers/linear.py:1818``, the end of
``RowParallelLinear.forward``), the MoE output (shared + routed) in
``MoERunner._maybe_reduce_final_output`` (``fused_moe/runner/moe_runner.py:
515``) and the embedding (``vocab_parallel_embedding.py:562``). At TP1
these calls are skipped; ``install_idle`` puts one idle interval in each
place instead: a kernel that occupies the GPU's stream for the all-reduce's
modeled time and reads no memory, as ``l2sched bench run`` does for its
step (``StepTiming.spin``).

Sites (``SITES``), relative to a decoder layer, with where the interval
goes so that l2sched's own hooks keep their order around the all-reduce
(``attn.pre_all_reduce`` before it, ``attn.post_all_reduce`` after it):

- ``self_attn.o_proj`` / ``mlp.down_proj``: a forward hook registered with
  ``prepend=True``, so it runs before every other forward hook of the module
  (l2sched's ``*.post_all_reduce`` hooks are forward hooks of the same
  module); the GEMM and l2sched's ``*.pre_all_reduce`` wrapper of
  ``quant_method.apply`` run before it.
- ``mlp.experts._maybe_reduce_final_output``: wrapped, the interval after the
  original returns (l2sched's ``moe.pre_all_reduce`` wraps the same
  attribute *before* the call).

torch is imported by the callers' spin functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from l2sched.attrs import resolve_path


@dataclass(frozen=True)
class IdleSite:
    """One all-reduce site: ``path`` relative to a decoder layer (``""``: the
    model's embedding, ``model.embed_tokens``), ``how`` (``forward_hook``
    or ``wrap_after``), ``where`` (vLLM 0.33.0 file:line of the all-reduce
    it stands for)."""

    name: str
    path: str
    how: str
    where: str


SITES = (
    IdleSite("attn.all_reduce", "self_attn.o_proj", "forward_hook",
             "model_executor/layers/linear.py:1818"),
    IdleSite("mlp.all_reduce", "mlp.down_proj", "forward_hook",
             "model_executor/layers/linear.py:1818"),
    IdleSite("moe.all_reduce", "mlp.experts._maybe_reduce_final_output", "wrap_after",
             "model_executor/layers/fused_moe/runner/moe_runner.py:515"),
)
#: The embedding's all-reduce (once per step, before the first layer).
EMBED_SITE = IdleSite("embed.all_reduce", "model.embed_tokens", "forward_hook",
                      "model_executor/layers/vocab_parallel_embedding.py:562")


def _nbytes(t) -> int:
    return int(t.numel()) * int(t.element_size())


class IdleIntervals:
    """The installed idle intervals of one model: ``count`` per site name,
    ``remove()`` takes every one out. ``idle(name, nbytes)`` is called for
    each interval (the caller's spin: modeled all-reduce time of an
    ``nbytes``-byte message)."""

    def __init__(self):
        self.count: dict[str, int] = {}
        self._undo: list[Callable[[], None]] = []

    def remove(self) -> None:
        """Undo every installation (hooks out, wrapped attributes restored)."""
        while self._undo:
            self._undo.pop()()

    def _add(self, name: str) -> None:
        self.count[name] = self.count.get(name, 0) + 1


def install_idle(model, idle: Callable[[str, int], None], *,
                 embedding: bool = True) -> IdleIntervals:
    """Install an idle interval at every TP all-reduce site of ``model`` (a
    vLLM ``Glm5NextForCausalLM`` or ``Qwen3MoeForCausalLM``: decoder layers
    at ``model.model.layers``). ``idle(site_name, nbytes)`` runs where the
    all-reduce of the ``nbytes``-byte output would (inside a CUDA graph
    capture too). ``embedding``: also after the embedding. Returns the
    ``IdleIntervals``. Raises ``AttributeError`` when a layer has none of
    the sites (vLLM moved them)."""
    out = IdleIntervals()
    layers = model.model.layers
    for i, layer in enumerate(layers):
        found = 0
        for site in SITES:
            try:
                target = resolve_path(layer, site.path)
            except AttributeError:
                continue
            found += 1
            _install(out, site, layer, target, idle)
        if not found:
            raise AttributeError(f"decoder layer {i} ({type(layer).__name__}) has none "
                                 f"of {', '.join(s.path for s in SITES)}")
    if embedding:
        _install(out, EMBED_SITE, model, resolve_path(model, EMBED_SITE.path), idle)
    return out


def _install(out: IdleIntervals, site: IdleSite, owner, target, idle) -> None:
    name = site.name
    if site.how == "forward_hook":
        def hook(module, args, output, _n=name):
            idle(_n, _nbytes(output[0] if isinstance(output, tuple) else output))

        handle = target.register_forward_hook(hook, prepend=True)
        out._undo.append(handle.remove)
    else:
        parent_path, _, attr = site.path.rpartition(".")
        parent = resolve_path(owner, parent_path)
        had_own = attr in vars(parent)
        original = getattr(parent, attr)

        def wrapped(*args, _orig=original, _n=name, **kwargs):
            result = _orig(*args, **kwargs)
            idle(_n, _nbytes(result))
            return result

        object.__setattr__(parent, attr, wrapped)

        def undo(_p=parent, _a=attr, _o=original, _own=had_own):
            if _own:
                object.__setattr__(_p, _a, _o)
            else:
                object.__delattr__(_p, _a)
        out._undo.append(undo)
    out._add(name)


def cuda_spin(cycles_per_us: float) -> Callable[[float], None]:
    """A function ``spin(us)`` that enqueues ``torch.cuda._sleep`` for
    ``us`` microseconds on the current stream (``cycles_per_us``: the spin
    kernel's measured rate, ``l2sched.bench.step.spin_cycles_per_us``)."""
    import torch

    def spin(us: float) -> None:
        if us > 0:
            torch.cuda._sleep(max(1, int(us * cycles_per_us)))
    return spin
