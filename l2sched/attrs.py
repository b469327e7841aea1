"""Finding objects in a module tree by dotted path, the one resolver every
stage uses (install targets, hook sites, tensors of a plan, the decoder
layers of a model)."""

from __future__ import annotations

from typing import Any


def resolve_path(root: Any, path: str) -> Any:
    """``root`` followed along the dotted ``path`` by ``getattr``: module
    children, parameters, buffers and plain attributes; a numeric component
    indexes a ``ModuleList`` child (``layers.3``). ``""`` is ``root`` itself.
    Raises ``AttributeError`` naming the first step that is missing."""
    obj = root
    if path:
        for part in path.split("."):
            obj = getattr(obj, part)
    return obj
