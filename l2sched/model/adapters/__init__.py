"""Model adapters: the facts l2sched needs about one model family, and the
registry that finds them.

An adapter knows a model's layer kinds and layer selectors, its hook
catalogue (the hook points a schedule may name, in layer-timeline order),
its per-layer operation timeline, its tensor inventory and its config
checks; ``protocol.ModelAdapter`` lists every member a stage reads.
Adding a model family is a new adapter package here and one line in
``ARCHITECTURE_TABLE``; nothing else in l2sched changes. Product code that
needs a model without being told one uses ``DEFAULT_ADAPTER``. A test adds a model
at run time with ``register_adapter`` (and takes it out with
``unregister_adapter``).
"""

from __future__ import annotations

import importlib
from typing import Mapping

from l2sched.model.adapters.protocol import ModelAdapter, missing_members

#: The architecture table: adapter name (as written after ``model`` in a
#: schedule; its module is ``l2sched.model.adapters.NAME``) -> the
#: ``config.json`` ``architectures`` and ``model_type`` values it serves, so
#: that a lookup imports only the adapter it finds (as vLLM's
#: ``model_executor/models/registry.py`` maps an architecture to its module).
#: ``test_deepseek_v4`` checks each entry against the adapter's
#: ``ARCHITECTURES`` and ``MODEL_TYPES``.
ARCHITECTURE_TABLE: dict[str, tuple[str, ...]] = {
    "deepseek_v4": ("DeepseekV4ForCausalLM", "deepseek_v4"),
    "glm5next": ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration",
                 "glm5_next_text", "glm5_next"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
}

#: adapter name -> module path.
ADAPTERS: dict[str, str] = {name: f"{__name__}.{name}" for name in ARCHITECTURE_TABLE}

#: The adapter product code uses when none is named (the embedded config of
#: ``l2sched inventory``/``fit``/``docs``, a ``model_config`` of ``None``).
DEFAULT_ADAPTER = "glm5next"

#: Adapters registered at run time (``register_adapter``): name -> adapter.
_RUNTIME: dict[str, ModelAdapter] = {}


def adapter_names() -> list[str]:
    """The adapter names a schedule's ``model`` line may use, sorted."""
    return sorted(set(ADAPTERS) | set(_RUNTIME))


def get_adapter(name: str) -> ModelAdapter:
    """The adapter called ``name`` (a run-time registered one first, else
    the module of ``ADAPTERS``, imported on first use).

    Raises ``KeyError`` for an unknown name (callers turn it into an
    ``L2sSemanticError`` with a span and a suggestion)."""
    if name in _RUNTIME:
        return _RUNTIME[name]
    return importlib.import_module(ADAPTERS[name])  # type: ignore[return-value]


def register_adapter(name: str, adapter: ModelAdapter) -> None:
    """Make ``adapter`` available as ``name`` (``model NAME`` in a schedule,
    ``get_adapter``, ``adapter_for``) for the rest of the process, or until
    ``unregister_adapter(name)``. Raises ``TypeError`` naming the
    ``ModelAdapter`` members it lacks, ``ValueError`` when ``name`` is a
    shipped adapter's or differs from ``adapter.NAME``."""
    missing = missing_members(adapter)
    if missing:
        raise TypeError(f"adapter {name!r} does not honour ModelAdapter: missing "
                        f"{', '.join(missing)}")
    if name in ADAPTERS:
        raise ValueError(f"adapter {name!r} is a shipped adapter")
    if adapter.NAME != name:
        raise ValueError(f"adapter registered as {name!r} has NAME {adapter.NAME!r}")
    _RUNTIME[name] = adapter


def unregister_adapter(name: str) -> None:
    """Forget the run-time adapter ``name`` (no-op when it is not one)."""
    _RUNTIME.pop(name, None)


def _all() -> Mapping[str, ModelAdapter]:
    return {name: get_adapter(name) for name in adapter_names()}


def adapter_for(architecture: str | None, model_type: str | None = None
                ) -> ModelAdapter | None:
    """The adapter serving a ``config.json`` whose ``architectures`` entry is
    ``architecture`` (or, without one, whose ``model_type`` is
    ``model_type``); also the adapter of a live vLLM model whose class name
    is ``architecture``. ``None`` when no adapter does. Imports only the
    shipped adapter ``ARCHITECTURE_TABLE`` names for it (none when it names
    none), then looks among the run-time registered ones."""
    key = architecture if architecture is not None else model_type
    shipped = [name for name, served in ARCHITECTURE_TABLE.items() if key in served]
    for ad in [get_adapter(n) for n in shipped] + list(_RUNTIME.values()):
        if architecture in ad.ARCHITECTURES or (
                architecture is None and model_type in ad.MODEL_TYPES):
            return ad
    return None


def adapter_of_config(config: Mapping) -> ModelAdapter:
    """The adapter of a validated text config: the one serving its
    ``architectures`` (``load_model_config`` records them), else the one
    serving its ``model_type`` (a config.json that names no
    architectures), else ``DEFAULT_ADAPTER`` (a hand-built config without
    either)."""
    for arch in config.get("architectures") or ():
        ad = adapter_for(arch)
        if ad is not None:
            return ad
    ad = adapter_for(None, config.get("model_type"))
    if ad is not None:
        return ad
    return get_adapter(DEFAULT_ADAPTER)


def supported_architectures() -> list[str]:
    """Every architecture name some adapter serves, sorted."""
    return sorted(a for ad in _all().values() for a in ad.ARCHITECTURES)


__all__ = [
    "ADAPTERS", "ARCHITECTURE_TABLE", "DEFAULT_ADAPTER", "ModelAdapter",
    "adapter_for", "adapter_names", "adapter_of_config", "get_adapter",
    "register_adapter", "supported_architectures", "unregister_adapter",
]
