"""Hook slots: where an installation's code runs in a module tree, and what
becomes of a hook when the module it is on is replaced afterwards.

A slot is ``(object, kind, attribute)``: a module forward pre-hook
(``forward_pre``) or forward hook (``forward_post``) on a module, or an
instance-level wrapper of ``object.attribute`` (``wrap_method``). An
installation (``runtime.install``) places one hook per slot, running the
slot's actions (``(match, callable, position)``) in order; ``claim``
refuses a slot that another live installation holds, so a hook is never
silently replaced.

``follow``: vLLM, or another plugin, may replace a hooked module after the
hooks were placed. vLLM's LoRA manager, for one, wraps ``qkv_proj``,
``o_proj`` and the MoE ``gate`` in ``*WithLoRA`` layers that keep the
original as ``base_layer``, after the model is loaded. Each slot's path is
resolved again from its decoder layer, and:

* the same object: nothing changes;
* a wrapper of the hooked object (``wraps``: the original is in the new
  object's ``base_layer`` chain) and a module hook: the hook moves to the
  wrapper (``moved``). The layer calls the wrapper now, and vLLM's wrappers
  run the original's computation without calling the original module
  (``base_layer.quant_method.apply``, ``base_layer.forward``), so a hook
  left there would not fire; where one does call it (``base_layer(x)``),
  moving keeps one firing. A pre-hook still fires before the projection, a
  post-hook after all of it (LoRA's delta and the all-reduce included);
* a wrapper and a method wrapper: it stays on the original (``kept``): the
  wrapper runs the original's code (its quant method, its ``forward``),
  which calls the wrapped method on the original object;
* anything else (an object that does not wrap the original, or the path is
  gone): the hook is taken out (``lost``): it cannot fire.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from l2sched.attrs import resolve_path
from l2sched.errors import L2sInstallError

#: How a slot runs code: a module forward pre-hook, a forward hook, or an
#: instance-level wrapper of a method.
KINDS = ("forward_pre", "forward_post", "wrap_method")

#: How deep ``wraps`` follows ``base_layer`` (a wrapper of a wrapper ...).
WRAP_DEPTH = 8

_lock = threading.Lock()
#: (id(obj), kind, attribute) -> the installation holding it.
_held: dict[tuple, Any] = {}
_WRAPPER_MARK = "__l2sched_wrapper__"


@dataclass(eq=False)
class Slot:
    """One hook: on ``obj`` (``kind``, ``attribute``), running ``actions``
    in order; ``layer`` is the decoder layer a ``match`` sees. ``where``:
    ``(decoder layer index, dotted path)`` the object was found at (``""``:
    the layer), for ``follow``; ``None`` when it was not found from a
    layer. ``issues``: the plan issue indices that fire here; ``join``:
    whether the runtime's join runs here. ``undo`` takes the hook out
    (``None``: not placed)."""

    obj: Any
    kind: str
    attribute: str | None = None
    layer: Any = None
    where: tuple[int, str] | None = None
    actions: list = field(default_factory=list)
    issues: list[int] = field(default_factory=list)
    join: bool = False
    undo: Callable[[], None] | None = None

    @property
    def key(self) -> tuple:
        """The registry key: ``(id(obj), kind, attribute)``."""
        return (id(self.obj), self.kind, self.attribute)

    def describe(self) -> str:
        """``Type.attribute`` or ``Type KIND hook``, for messages."""
        return (f"{type(self.obj).__name__}.{self.attribute}" if self.attribute
                else f"{type(self.obj).__name__} {self.kind} hook")


@dataclass(frozen=True)
class SlotChange:
    """A hooked object ``follow`` found replaced: the slot's decoder layer
    index ``layer`` and ``path`` from it (``""``: the layer), its ``kind``
    and ``attribute``, the type names ``old`` and ``new`` (``None``: the path
    no longer resolves), ``action`` (``moved``, ``kept`` or ``lost``: see
    the module docstring), what ran there: ``issues`` (plan issue indices)
    and ``join``, and for ``lost`` why the hook could not follow
    (``reason``)."""

    layer: int
    path: str
    kind: str
    attribute: str | None
    old: str
    new: str | None
    action: str
    issues: tuple[int, ...]
    join: bool
    reason: str = ""


def run_actions(actions, layer, args, kwargs) -> None:
    """Run the ``(match, callable, position)`` actions whose match accepts."""
    for match, act, _ in actions:
        if match is None or match(layer, args, kwargs):
            act()


def _module_hook(slot: Slot) -> Callable[[], None]:
    actions, layer = slot.actions, slot.layer

    if slot.kind == "forward_pre":
        def pre(module, args, kwargs):
            run_actions(actions, layer, args, kwargs)
        return slot.obj.register_forward_pre_hook(pre, with_kwargs=True).remove

    def post(module, args, kwargs, output):
        run_actions(actions, layer, args, kwargs)
    return slot.obj.register_forward_hook(post, with_kwargs=True).remove


def _wrap_method(slot: Slot) -> Callable[[], None]:
    obj, name, layer = slot.obj, slot.attribute, slot.layer
    d = getattr(obj, "__dict__", None)
    if d is None:
        raise L2sInstallError(f"cannot wrap {type(obj).__name__}.{name}: the "
                              "object has no instance __dict__")
    had_own = name in d
    own = d.get(name)
    original = getattr(obj, name)
    if getattr(original, _WRAPPER_MARK, None) is not None:
        raise L2sInstallError(f"{type(obj).__name__}.{name} is already wrapped "
                              "by an l2sched installation")
    before = [a for a in slot.actions if a[2] == "before"]
    after = [a for a in slot.actions if a[2] != "before"]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        run_actions(before, layer, args, kwargs)
        out = original(*args, **kwargs)
        run_actions(after, layer, args, kwargs)
        return out

    setattr(wrapper, _WRAPPER_MARK, True)
    d[name] = wrapper

    def undo():
        if had_own:
            d[name] = own
        else:
            d.pop(name, None)
    return undo


def _place(slot: Slot) -> None:
    slot.undo = _wrap_method(slot) if slot.kind == "wrap_method" else _module_hook(slot)


def _taken_by_other(key, owner) -> Any:
    held = _held.get(key)
    return held if held is not None and held is not owner and not held.removed else None


def claim(slots, owner) -> None:
    """Place every slot of ``slots`` for ``owner`` (an installation with a
    ``removed`` flag) and register them. Raises ``L2sInstallError``, having
    placed nothing, when a slot is held by another live installation or a
    hook cannot be placed."""
    with _lock:
        for s in slots:
            if _taken_by_other(s.key, owner) is not None:
                raise L2sInstallError(
                    f"slot {s.describe()} is already held by another l2sched "
                    "installation; remove() it first (one hook per slot: never "
                    "silently replaced)")
        try:
            for s in slots:
                _place(s)
                _held[s.key] = owner
        except Exception:
            _release(slots, owner)
            raise


def release(slots, owner) -> None:
    """Take every placed hook of ``slots`` out, last placed first, and drop
    ``owner``'s registrations; idempotent."""
    with _lock:
        _release(slots, owner)


def _release(slots, owner) -> None:
    for s in reversed(list(slots)):
        _unplace(s, owner)


def _unplace(s: Slot, owner) -> None:
    if s.undo is not None:
        s.undo()
        s.undo = None
    if _held.get(s.key) is owner:
        del _held[s.key]


def wraps(new, old) -> bool:
    """Whether ``new`` wraps ``old``: ``old`` is in ``new``'s ``base_layer``
    chain (vLLM's convention: LoRA's ``*WithLoRA`` layers), at most
    ``WRAP_DEPTH`` deep."""
    obj = new
    for _ in range(WRAP_DEPTH):
        obj = getattr(obj, "base_layer", None)
        if obj is None:
            return False
        if obj is old:
            return True
    return False


def follow(slots, owner, model_layers) -> list[SlotChange]:
    """Resolve each placed slot's path again from ``model_layers`` (the
    decoder layers now) and move, keep or take out its hook where the object
    there was replaced (module docstring). Returns one ``SlotChange`` per
    replaced object, in slot order; ``[]`` when nothing was replaced."""
    changes = []
    with _lock:
        for s in slots:
            if s.where is None or s.undo is None:
                continue
            index, path = s.where
            try:
                layer = model_layers[index]
                now = resolve_path(layer, path)
            except (AttributeError, IndexError):
                layer = now = None
            if now is s.obj:
                continue
            old = type(s.obj).__name__
            action, reason = "lost", "it does not keep the original as base_layer"
            if now is None:
                reason = "the path no longer resolves"
            elif wraps(now, s.obj):
                action, reason = ("kept", "") if s.kind == "wrap_method" else _move(
                    s, owner, now, layer)
            if action == "lost":
                _unplace(s, owner)
            changes.append(SlotChange(index, path, s.kind, s.attribute, old,
                                      None if now is None else type(now).__name__,
                                      action, tuple(s.issues), s.join, reason))
    return changes


def _move(s: Slot, owner, now, layer) -> tuple[str, str]:
    """Move module hook ``s`` to ``now`` (the wrapper at its path):
    ``("moved", "")``, or ``("lost", why)`` when another installation holds
    that slot."""
    if _taken_by_other((id(now), s.kind, s.attribute), owner) is not None:
        return "lost", "another l2sched installation holds its hook slot"
    _unplace(s, owner)
    s.obj, s.layer = now, layer
    _place(s)
    _held[s.key] = owner
    return "moved", ""
