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

import json
from dataclasses import asdict, dataclass, field

from l2sched.compiler.plan_check import check_plan_text
from l2sched.units import format_layers


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
    reason (never silently dropped). ``meta`` holds ``model_config``: the
    model config the plan was compiled with when it is not the one
    embedded for ``model`` (a shipped config's name or a file's absolute
    path; ``compiler.compile``), so a reader checks the plan against it.
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

    def fire_layers(self) -> dict[str, list[int]]:
        """Window -> the layers it fires in, ascending: where it has an
        issue, or an ``empty`` entry (it fired and fetched 0 B). The one
        layer count ``check`` (the schedule's window layers), ``compile``
        and ``lint`` (their per-kind tables) print: a window that only takes
        carried bytes fires in every layer it selects, filled or not."""
        out: dict[str, set[int]] = {}
        for i in self.issues:
            out.setdefault(i.window, set()).add(i.layer)
        for e in self.empty:
            out.setdefault(e.window, set()).add(e.layer)
        return {w: sorted(layers) for w, layers in out.items()}

    def issues_at(self, layer: int, hook: str) -> list[WindowIssue]:
        """The issues fired at ``hook`` of ``layer``, in issue order."""
        return [i for i in self.issues if i.layer == layer and i.hook == hook]

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, fixed separators)."""
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, path: str = "<plan>", model_config=None) -> "Plan":
        """Inverse of ``to_json``, for a plan file ``path`` whose text is
        ``text``: checked first against ``l2sched/data/plan.schema.json``
        and against its model (hook points, layers, tensors and their
        per-rank bytes in the inventory of ``model_config``, default the
        config the plan's ``meta.model_config`` names, else the model's
        embedded config; device profile names; an issue written
        twice; bytes fetched twice; see ``compiler.plan_check``). Raises
        ``L2sInputError`` with every problem at ``path:line:col`` of its
        value."""
        d = dict(check_plan_text(text, path, model_config))
        issues = tuple(
            WindowIssue(**{**i, "ranges": tuple(ByteRange(**r) for r in i["ranges"])})
            for i in d.pop("issues"))
        left = tuple(LeftOver(**x) for x in d.pop("left_over", ()))
        empty = tuple(EmptyIssue(**{**x, "taken_by": tuple(x.get("taken_by", ()))})
                      for x in d.pop("empty", ()))
        return cls(**d, issues=issues, left_over=left, empty=empty)


def layers_by_kind(layers, layer_kinds) -> dict[str, list[int]]:
    """``layers`` grouped by their kind's name (``layer_kinds[i]``),
    ascending: how ``check``, ``compile`` and ``lint`` split a window's
    layers into their per-kind rows."""
    out: dict[str, list[int]] = {}
    for i in sorted(layers):
        out.setdefault(str(layer_kinds[i]), []).append(i)
    return out


def empty_notes(plan: Plan, layer_kinds) -> list[str]:
    """One line per window (and layer kind, reason) that fires and fetches
    nothing: ``window 'A2' fetches 0 B where it fires in kda+moe layers
    4..6: every byte its targets name was taken earlier in the step by
    window 'A'`` (``compile`` and ``lint`` print them under their tables)."""
    groups: dict = {}
    for e in plan.empty:
        groups.setdefault((e.window, str(layer_kinds[e.layer]), e.why()), []).append(e.layer)
    lines = []
    for (window, kind, why), layers in sorted(groups.items()):
        word = "layer" if len(layers) == 1 else "layers"
        lines.append(f"window '{window}' fetches 0 B where it fires in {kind} {word} "
                     f"{format_layers(layers)}: {why}")
    return lines
