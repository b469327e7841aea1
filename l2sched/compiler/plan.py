"""The compiled plan: what to prefetch, where, in which order.

A ``Plan`` is the compiler's output and the runtime's input. It is plain data
(JSON round-trip through ``to_json``/``from_json``), so a plan compiled on a
CPU-only machine can be inspected, diffed and shipped.

Byte ranges name tensors by their path relative to the decoder layer that owns
them (``self_attn.o_proj.weight``) plus the index of that layer; ``offset`` and
``nbytes`` are bytes from the start of the tensor's storage span (the first
element the view addresses, see ``l2sched.runtime.install``). Ranges of tensors
that only exist after the first forward (``lazy``) are resolved at bind time.

A window's byte count has one name per hop: ``budget`` in the ``.l2s``
language and on ``Window``/``WindowIssue`` (what the window may fetch),
``nbytes`` on everything that holds bytes: ``ByteRange.nbytes``,
``WindowIssue.nbytes`` (what a fill fetches), ``LeftOver.nbytes``, the
runtime's rows ``(address, nbytes)`` and the kernel's table rows.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ByteRange:
    """``nbytes`` bytes of tensor ``tensor`` in decoder layer ``layer``,
    starting ``offset`` bytes into its storage span. ``lazy`` marks a tensor
    that exists only after the first forward. ``nbytes == -1`` means "the
    whole tensor", used for lazy tensors whose size is unknown until bind."""

    layer: int
    tensor: str
    offset: int
    nbytes: int
    lazy: bool = False


@dataclass(frozen=True)
class WindowIssue:
    """One fill: window ``window`` issued at hook point ``hook`` of layer
    ``layer``, fetching ``ranges`` in order. ``budget`` is the window's byte
    budget, ``carried_in`` the bytes that arrived from an earlier window,
    ``kernel`` the fill mode the schedule asks for (``units.FILL_MODES``;
    ``""`` = the device profile's default, chosen where the plan runs)."""

    window: str
    hook: str
    layer: int
    budget: int
    ranges: tuple[ByteRange, ...]
    carried_in: int = 0
    kernel: str = ""

    @property
    def nbytes(self) -> int:
        """Bytes this issue fetches (lazy whole-tensor ranges count 0)."""
        return sum(r.nbytes for r in self.ranges if r.nbytes > 0)


@dataclass(frozen=True)
class LeftOver:
    """``nbytes`` bytes of ``tensor`` (in layer ``layer``) that no window
    could take after window ``window``, reported by the compiler (never
    silently dropped). ``fired_in`` is the layer whose windows left them:
    ``layer`` for a ``this`` target, the layer before it for a ``next``
    target (-1 in plans written before it was recorded)."""

    window: str
    layer: int
    tensor: str
    nbytes: int
    fired_in: int = -1


#: Why a window that fires fetches nothing (``EmptyIssue.reason``):
#: ``taken`` every byte its targets name was fetched earlier in the step by
#: another window; ``no-match`` its targets name no tensor in that layer;
#: ``nothing-carried`` it has no targets and nothing was carried into it;
#: ``budget`` its budget holds no whole tensor and no 4 KiB head of one.
EMPTY_REASONS = ("taken", "no-match", "nothing-carried", "budget")


@dataclass(frozen=True)
class EmptyIssue:
    """Window ``window`` fires at ``hook`` of layer ``layer`` and fetches 0 B
    (it is no issue of the plan): ``reason`` in ``EMPTY_REASONS``;
    ``taken_by`` names the windows that fetched its bytes earlier in the
    step (for ``taken``)."""

    window: str
    hook: str
    layer: int
    reason: str
    taken_by: tuple[str, ...] = ()

    def why(self) -> str:
        """The reason in words, e.g. ``every byte its targets name was taken
        earlier in the step by window 'A'``."""
        if self.reason == "taken":
            who = ", ".join(f"'{w}'" for w in self.taken_by)
            return ("every byte its targets name was taken earlier in the step"
                    + (f" by window{'s' if len(self.taken_by) > 1 else ''} {who}"
                       if who else ""))
        return {"no-match": "its targets name no tensor there",
                "nothing-carried": "it has no targets and nothing was carried into it",
                "budget": "its budget holds no whole tensor and no 4 KiB head of one",
                }.get(self.reason, self.reason)


@dataclass(frozen=True)
class Plan:
    """A schedule compiled for one TP rank of one model.

    ``issues`` are ordered by (layer, hook order, declaration order): the
    order the side stream sees them in one decode step. ``policy`` is
    ``evict_last``/``evict_normal``/``evict_first``; ``set_aside`` is bytes,
    ``-1`` for the device maximum, or 0 to leave the driver limit alone;
    ``max_tokens`` is the largest decode step (tokens) that prefetches.
    ``empty`` lists the windows that fire and fetch nothing, with the
    reason (never silently dropped).
    """

    schedule: str
    model: str
    device: str
    tp: int
    tp_rank: int
    ep: bool
    policy: str
    max_tokens: int
    set_aside: int
    num_layers: int
    issues: tuple[WindowIssue, ...]
    left_over: tuple[LeftOver, ...] = ()
    empty: tuple[EmptyIssue, ...] = ()
    meta: dict = field(default_factory=dict, compare=False)

    def issues_at(self, layer: int, hook: str) -> list[WindowIssue]:
        """The issues fired at ``hook`` of ``layer``, in issue order."""
        return [i for i in self.issues if i.layer == layer and i.hook == hook]

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, fixed separators)."""
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Inverse of ``to_json``. Raises ``ValueError`` with one line naming
        what is wrong for anything else: not JSON, not an object, a missing
        or unknown key (``missing key 'issues'``), a value of the wrong type
        (``issues[3].ranges[0]: ...``), or a plan written before byte counts
        were called ``nbytes`` (recompile it)."""
        try:
            d = json.loads(text)
        except RecursionError:  # arrays or objects nested thousands deep
            raise ValueError("not valid JSON: values nested too deeply to read") from None
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object, got {type(d).__name__}")
        if '"length"' in text and any(
                isinstance(r, dict) and "length" in r
                for i in d.get("issues", ()) if isinstance(i, dict)
                for r in i.get("ranges", ())):
            raise ValueError("written by an older l2sched (ranges have 'length', "
                             "not 'nbytes'); compile the schedule again")
        d = dict(d)
        issues = tuple(
            _record(WindowIssue, i, f"issues[{k}]", ranges=lambda v, w: tuple(
                _record(ByteRange, r, f"{w}[{j}]") for j, r in _items(v, w)))
            for k, i in _items(d.pop("issues", _MISSING), "issues"))
        left = tuple(_record(LeftOver, x, f"left_over[{k}]")
                     for k, x in _items(d.pop("left_over", _MISSING), "left_over"))
        empty = tuple(_record(EmptyIssue, x, f"empty[{k}]",
                              taken_by=lambda v, w: tuple(x for _, x in _items(v, w)))
                      for k, x in _items(d.pop("empty", []), "empty"))
        return _record(cls, d, "", issues=issues, left_over=left, empty=empty)


_MISSING = object()


def _items(value, where: str):
    """``enumerate(value)`` for a JSON list at ``where``; ``ValueError``
    when it is missing or not a list."""
    if value is _MISSING:
        raise ValueError(f"missing key '{where}'")
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
    return enumerate(value)


def _record(cls, value, where: str, **given):
    """``cls(**value)`` for a JSON object at ``where`` (``given``: fields
    already converted, or ``name -> convert(value, where)``); ``ValueError``
    naming the missing or unknown key or the field of the wrong type."""
    if not isinstance(value, dict):
        raise ValueError(f"{where or 'plan'}: expected an object, got "
                         f"{type(value).__name__}")
    prefix = f"{where}." if where else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ValueError(f"unknown key '{prefix}{unknown[0]}'")
    kw = {}
    for name, f in fields.items():
        if name in given and not callable(given[name]):
            kw[name] = given[name]
            continue
        if name not in value:
            if f.default is dataclasses.MISSING and \
                    f.default_factory is dataclasses.MISSING:
                raise ValueError(f"missing key '{prefix}{name}'")
            continue
        v = value[name]
        if name in given:
            v = given[name](v, f"{prefix}{name}")
        else:
            want = {"int": int, "str": str, "bool": bool, "dict": dict}.get(
                str(f.type).split("[")[0])
            ok = want is None or (isinstance(v, want) and not (
                want is int and isinstance(v, bool)))
            if not ok:
                raise ValueError(f"{prefix}{name}: expected {f.type}, got "
                                 f"{type(v).__name__} {v!r}"[:200])
        kw[name] = v
    return cls(**kw)
