"""Model adapters: the facts l2sched needs about one model family.

An adapter knows a model's layer kinds, its hook catalogue (the hook points a
schedule may name, in layer-timeline order), its per-layer operation timeline
and its tensor inventory. Adding a model is adding a module here and a line in
``ADAPTERS``; nothing else in l2sched changes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: adapter name (as written after ``model`` in a schedule) -> module path.
ADAPTERS: dict[str, str] = {
    "glm5next": "l2sched.adapters.glm5next",
}


def adapter_names() -> list[str]:
    """The adapter names a schedule's ``model`` line may use, sorted."""
    return sorted(ADAPTERS)


def get_adapter(name: str) -> ModuleType:
    """Import and return the adapter module called ``name``.

    Raises ``KeyError`` for an unknown name (callers turn it into an
    ``L2sSemanticError`` with a span and a suggestion)."""
    return importlib.import_module(ADAPTERS[name])
