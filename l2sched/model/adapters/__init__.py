"""Model adapters: the facts l2sched needs about one model family.

An adapter knows a model's layer kinds, its hook catalogue (the hook points a
schedule may name, in layer-timeline order), its per-layer operation timeline
and its tensor inventory. Adding a model is adding a module here and a line in
``ADAPTERS``; nothing else in l2sched changes. An adapter module provides
``NAME``, ``ARCHITECTURES``, ``MODEL_TYPES``, ``DEFAULT_CONFIG`` (a file in
``l2sched/data``), ``DEFAULT_MODEL_NAME``, ``HOOKS``/``HOOKS_BY_NAME``,
``layer_kinds``, ``decode_timeline``, ``layer_specs``, ``consumption_order``
and the live-model functions ``live_inventory`` calls (see
``l2sched.model.adapters.glm5next``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: adapter name (as written after ``model`` in a schedule) -> module path.
ADAPTERS: dict[str, str] = {
    "glm5next": "l2sched.model.adapters.glm5next",
}


def adapter_names() -> list[str]:
    """The adapter names a schedule's ``model`` line may use, sorted."""
    return sorted(ADAPTERS)


def get_adapter(name: str) -> ModuleType:
    """Import and return the adapter module called ``name``.

    Raises ``KeyError`` for an unknown name (callers turn it into an
    ``L2sSemanticError`` with a span and a suggestion)."""
    return importlib.import_module(ADAPTERS[name])


def adapter_for(architecture: str | None, model_type: str | None = None
                ) -> ModuleType | None:
    """The adapter serving a ``config.json`` whose ``architectures`` entry is
    ``architecture`` (or, without one, whose ``model_type`` is
    ``model_type``); ``None`` when no adapter does."""
    for name in ADAPTERS:
        mod = get_adapter(name)
        if architecture in mod.ARCHITECTURES or (
                architecture is None and model_type in mod.MODEL_TYPES):
            return mod
    return None


def supported_architectures() -> list[str]:
    """Every architecture name some adapter serves, sorted."""
    return sorted(a for name in ADAPTERS for a in get_adapter(name).ARCHITECTURES)
