"""Putting a plan into a module tree, and taking it out again.

``install(model_layers, plan, sites, backend)`` places one hook per *slot*
for every hook point the plan names in every layer:

* ``HookSite(path, "forward_pre")`` / ``"forward_post"``: a module forward
  (pre-)hook on ``layers[i]`` + ``path`` (``""`` = the decoder layer itself);
* ``HookSite(path, "wrap_method", attribute, position)``: an instance-level
  wrapper of ``obj.attribute`` where ``obj`` is ``layers[i]`` + ``path`` (any
  object, e.g. ``self_attn.o_proj.quant_method`` with ``apply``), running the
  fills ``before`` or ``after`` the call.

A slot is ``(object, kind, attribute)`` (``runtime.slots``). Several hook
points (and the join) that map to the same slot in one installation are
composed into one hook, in plan order, join last. A slot that another live
installation holds is refused with ``L2sInstallError``; nothing is
half-installed then. ``Installation.follow(layers)`` finds hooked modules
replaced after install (vLLM's LoRA wrappers) and moves, keeps or takes out
their hooks (``runtime.slots.follow``).

Binding is lazy: a range's tensor is looked up (``layers[layer]`` + dotted
``tensor`` path; the last component may be a parameter, a buffer or a plain
tensor attribute) the first time its issue fires, so tensors created during
the first forward (MLA's absorbed decode weights) exist by then; a range whose
tensor is still missing binds to an empty row and is retried at every firing.
Every firing compares the tensor's ``data_ptr()`` and storage size with the
bound ones and rebinds on change (weight reload). Rows are clamped to the
tensor's storage span and aligned by ``clamp_range``.

``Installation.remove()`` restores every touched object exactly: hook handles
are removed, wrapped instance attributes are put back as the very objects they
were (or deleted when the method came from the class).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from l2sched.attrs import resolve_path
from l2sched.compiler.plan import Plan
from l2sched.errors import L2sInstallError
from l2sched.runtime.base import RuntimeBase
from l2sched.runtime.slots import KINDS, Slot, SlotChange, claim, follow, release
from l2sched.units import ALIGN

log = logging.getLogger("l2sched.install")


@dataclass(frozen=True)
class HookSite:
    """How to run code at one hook point of one decoder layer.

    ``path``: dotted path from the layer to the module/object (``""`` = the
    layer). ``kind``: ``forward_pre``, ``forward_post`` or ``wrap_method``.
    ``attribute``: the method name for ``wrap_method``. ``position``: for
    ``wrap_method``, fire ``before`` or ``after`` the wrapped call.
    ``match``: optional ``(layer, args, kwargs) -> bool`` discriminator for a
    module that is called more than once per layer (GLM-5.3's
    ``mhc_fused_post_pre_op``: ``kwargs["fn"] is layer.hc_attn_fn``); for
    ``forward_post`` it gets ``(layer, args, kwargs)`` of the call too.
    ``optional``: a layer where ``path`` does not resolve is skipped instead
    of refused."""

    path: str
    kind: str
    attribute: str | None = None
    position: str = "before"
    match: Callable[[Any, tuple, dict], bool] | None = None
    optional: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"HookSite.kind {self.kind!r} is not one of {KINDS}")
        if self.kind == "wrap_method" and not self.attribute:
            raise ValueError("HookSite(kind='wrap_method') needs an attribute")
        if self.position not in ("before", "after"):
            raise ValueError(f"HookSite.position {self.position!r}: before/after")


# ---------------------------------------------------------------------------
# Ranges


def storage_span_elems(shape: Sequence[int], stride: Sequence[int]) -> int:
    """Elements a strided view addresses from its first element to its last,
    inclusive: ``1 + sum((n - 1) * stride)``; 0 for an empty view. (The
    Kimi-K3 host code in vLLM 0.33.0 uses the same span.)"""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def clamp_range(base: int, span: int, offset: int, nbytes: int,
                limit: int | None = None) -> tuple[int, int]:
    """The fill row ``(address, nbytes)`` for ``nbytes`` bytes at ``offset`` of
    a tensor whose span starts at address ``base`` and is ``span`` bytes long.

    ``nbytes == -1`` means to the end of the span. The row is intersected with
    the span and, when given, with ``[base, limit)`` (the end of the
    underlying storage), then its start is rounded up to 16 bytes and its
    size down to a multiple of 16. An empty result is ``(0, 0)``. All
    values are bytes/addresses."""
    end = base + span
    if limit is not None:
        end = min(end, limit)
    start = base + max(offset, 0)
    stop = end if nbytes < 0 else min(end, base + max(offset, 0) + nbytes)
    a = (start + ALIGN - 1) // ALIGN * ALIGN
    e = stop // ALIGN * ALIGN
    if e <= a:
        return (0, 0)
    return (a, e - a)


def tensor_row(t, offset: int, nbytes: int) -> tuple[int, int]:
    """``clamp_range`` for a torch tensor ``t`` (a view, possibly strided):
    its span is ``storage_span_elems * element_size`` bytes from
    ``t.data_ptr()``, clamped to the end of ``t.untyped_storage()``."""
    item = t.element_size()
    span = storage_span_elems(t.shape, t.stride()) * item
    base = t.data_ptr()
    try:
        st = t.untyped_storage()
        limit = st.data_ptr() + st.nbytes()
    except Exception:
        limit = None
    return clamp_range(base, span, offset, nbytes, limit)


# ---------------------------------------------------------------------------
# Binding


class _Ref:
    """Lazily resolved tensor of one range, with the identity it was bound to."""

    __slots__ = ("layer_obj", "path", "owner", "name", "head", "layer")

    def __init__(self, layer_obj, path: str, layer: int | None = None):
        self.layer_obj = layer_obj
        self.path = path
        self.head, _, self.name = path.rpartition(".")
        self.owner = None
        self.layer = layer

    def rebase(self, model_layers) -> None:
        """Resolve again at the next ``get``, from ``model_layers[layer]``
        (the decoder layer now: a module on the path may have been
        replaced)."""
        if self.layer is not None and 0 <= self.layer < len(model_layers):
            self.layer_obj = model_layers[self.layer]
        self.owner = None

    def get(self):
        """The tensor now, or ``None`` when it does not exist (yet)."""
        if self.owner is not None:
            t = getattr(self.owner, self.name, None)
            if t is not None:
                return t
        try:
            self.owner = resolve_path(self.layer_obj, self.head)
        except AttributeError:
            self.owner = None
            return None
        return getattr(self.owner, self.name, None)


class _BoundIssue:
    """Rows of one issue plus the identities they were computed from."""

    __slots__ = ("index", "ranges", "refs", "keys", "rows")

    def __init__(self, index, ranges, refs):
        self.index = index
        self.ranges = ranges
        self.refs = refs
        self.keys = [None] * len(ranges)
        self.rows: list[tuple[int, int]] = [(0, 0)] * len(ranges)

    def refresh(self) -> bool:
        """Re-read every range's tensor; True when any row changed."""
        changed = False
        for j, (r, ref) in enumerate(zip(self.ranges, self.refs)):
            t = ref.get()
            if t is None or not hasattr(t, "data_ptr"):
                key = None
            else:
                try:
                    key = (t.data_ptr(), t.untyped_storage().nbytes(),
                           tuple(t.shape), tuple(t.stride()))
                except Exception:
                    key = None
            if key == self.keys[j]:
                continue
            self.keys[j] = key
            row = (0, 0) if key is None or key[0] == 0 else tensor_row(t, r.offset, r.nbytes)
            if row != self.rows[j]:
                self.rows[j] = row
                changed = True
        return changed


# ---------------------------------------------------------------------------
# Installation


class Installation:
    """The hooks of one plan in one module tree. ``remove()`` undoes them;
    ``runtime`` is the backend; ``bound`` the per-issue binding state;
    ``placed`` the hook slots (``runtime.slots.Slot``); ``slots`` their
    number. ``follow(layers)`` keeps the hooks on modules replaced after
    install. Also a context manager."""

    def __init__(self, runtime: RuntimeBase):
        self.runtime = runtime
        self.bound: list[_BoundIssue] = []
        self.placed: list[Slot] = []
        self.slots = 0
        self.removed = False

    def fire(self, index: int) -> bool:
        """Bind (or rebind) issue ``index`` and hand it to the runtime."""
        b = self.bound[index]
        if b.refresh():
            self.runtime.set_rows(index, b.rows)
        return self.runtime.issue(index)

    def fire_launch(self, indices: tuple[int, ...]) -> bool:
        """Bind (or rebind) the issues ``indices`` (one launch group of the
        runtime's ``launch_groups``) and hand them to the runtime as one
        fill (``issue_launch``)."""
        for index in indices:
            b = self.bound[index]
            if b.refresh():
                self.runtime.set_rows(index, b.rows)
        return self.runtime.issue_launch(indices)

    def bind_all(self) -> None:
        """Resolve every range now (normally done lazily at each firing)."""
        for b in self.bound:
            if b.refresh():
                self.runtime.set_rows(b.index, b.rows)

    def join(self) -> None:
        """The runtime's join (for callers placing the join themselves)."""
        self.runtime.join()

    def follow(self, model_layers: Sequence[Any]) -> list[SlotChange]:
        """Find the hooked modules that were replaced since install in
        ``model_layers`` (the decoder layers now, indexed as at install) and
        move, keep or take out their hooks (``runtime.slots.follow``: a
        module hook moves to a wrapper that keeps the original as
        ``base_layer``; a hook on an object replaced otherwise is taken out
        and its issues cannot fire). Ranges re-resolve their tensors from
        ``model_layers`` at the next firing. Returns the changes (``[]``:
        none)."""
        if self.removed:
            return []
        changes = follow(self.placed, self, model_layers)
        if changes:
            for b in self.bound:
                for ref in b.refs:
                    ref.rebase(model_layers)
        return changes

    def remove(self) -> None:
        """Restore every touched object exactly; idempotent."""
        if self.removed:
            return
        release(self.placed, self)
        self.removed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def install(model_layers: Sequence[Any], plan: Plan, sites: Mapping[Any, HookSite],
            backend: RuntimeBase, *, join_on: Any = "last_layer",
            layer_keys: Sequence[str] | None = None) -> Installation:
    """Place ``plan``'s issues into ``model_layers`` (the decoder layers,
    indexed like ``ByteRange.layer``), firing them through ``backend``
    (issue ``i`` of the plan fires ``backend.issue(i)``; the issues of one
    of the backend's ``launch_groups`` of several issues, which share their
    hook point, fire together as one ``backend.issue_launch(group)``: one
    hook action for the group).

    ``sites`` maps every hook point name the plan uses to a ``HookSite``;
    with ``layer_keys`` (one key per decoder layer, e.g. its layer kind)
    sites are keyed ``(layer key, hook name)`` instead, so layers whose hook
    sites differ (GLM's KDA and MLA attention) take one plan in one
    installation.
    ``join_on``: where ``backend.join()`` runs once per forward:
    ``"last_layer"`` (a forward post-hook on ``model_layers[-1]``), a module
    (a forward post-hook on it), or ``None`` (the caller calls
    ``Installation.join()``, e.g. before a pipeline-parallel early return).
    A list of modules joins at the end of each (per-layer joins): there the
    join runs before any issue hooked on the same post-hook, so a fill
    fired at a layer's exit is joined at the next one, not at once; on
    ``model_layers[-1]`` it runs after them (the forward ends joined).

    Raises ``L2sInstallError`` (and installs nothing) when a hook point has no
    site, a site's path does not resolve, or a slot is held by another
    installation.

    Long function: checks every site before it places any hook, so a
    failure installs nothing; the two passes share their bookkeeping."""
    inst = Installation(backend)
    slots: dict[tuple, Slot] = {}
    def site_key(wi):
        if layer_keys is None:
            return wi.hook
        return (layer_keys[wi.layer], wi.hook) if 0 <= wi.layer < len(layer_keys) else None

    missing = sorted({" at ".join(reversed(k)) if isinstance(k, tuple) else str(k)
                      for k in map(site_key, plan.issues) if k not in sites})
    if missing:
        known = sorted({k[1] if isinstance(k, tuple) else k for k in sites})
        raise L2sInstallError(f"no HookSite for hook point(s) {', '.join(missing)} "
                              f"(known: {', '.join(known)})")

    def slot_for(obj, kind, attr, layer, where) -> Slot:
        s = slots.get((id(obj), kind, attr))
        if s is None:
            s = slots[(id(obj), kind, attr)] = Slot(obj, kind, attr, layer, where)
        return s

    # merged launches: the group's first issue fires the whole group
    lead: dict[int, tuple[int, ...]] = {}
    for g in getattr(backend, "launch_groups", None) or ():
        if len(g) > 1 and len({(plan.issues[j].layer, plan.issues[j].hook) for j in g}) == 1:
            lead.update((j, ()) for j in g[1:])
            lead[g[0]] = tuple(g)
    for idx, wi in enumerate(plan.issues):
        if not 0 <= wi.layer < len(model_layers):
            raise L2sInstallError(f"plan issue {wi.window}@{wi.hook} names layer "
                                  f"{wi.layer}; the model has {len(model_layers)}")
        layer = model_layers[wi.layer]
        refs = [_Ref(model_layers[r.layer], r.tensor, r.layer)
                if 0 <= r.layer < len(model_layers) else _Ref(None, r.tensor)
                for r in wi.ranges]
        inst.bound.append(_BoundIssue(idx, wi.ranges, refs))
        site = sites[site_key(wi)]
        try:
            obj = resolve_path(layer, site.path)
        except AttributeError as e:
            if site.optional:
                continue
            raise L2sInstallError(f"hook point {wi.hook}: layer {wi.layer} has no "
                                  f"{site.path!r} ({e})") from None
        s = slot_for(obj, site.kind, site.attribute, layer, (wi.layer, site.path))
        s.layer = layer
        s.issues.append(idx)
        group = lead.get(idx)
        if group is None:
            s.actions.append((site.match, functools.partial(inst.fire, idx), site.position))
        elif group:  # the group's later issues: fired by this action
            s.actions.append((site.match, functools.partial(inst.fire_launch, group),
                              site.position))

    per_layer = isinstance(join_on, (list, tuple))
    if join_on == "last_layer":
        join_on = model_layers[-1]
    index_of = {id(m): i for i, m in enumerate(model_layers)}
    for jmod in join_on if per_layer else [join_on] if join_on is not None else []:
        where = (index_of[id(jmod)], "") if id(jmod) in index_of else None
        s = slot_for(jmod, "forward_post", None, jmod, where)
        s.join = True
        if per_layer and jmod is not model_layers[-1]:
            s.actions.insert(0, (None, backend.join, "after"))  # before this exit's issues
        else:
            s.actions.append((None, backend.join, "after"))

    inst.placed = list(slots.values())
    claim(inst.placed, inst)
    inst.slots = len(inst.placed)
    log.info("l2sched: installed %d issues of plan %r into %d hook slots",
             len(plan.issues), plan.schedule, inst.slots)
    return inst
