"""The typed AST of a ``.l2s`` file: small frozen dataclasses.

Every node carries its ``span`` (``l2sched.errors.Span``), excluded from
equality so that ``parse(fmt(x)) == parse(x)`` compares meaning, not layout.
Nodes mirror the grammar in ``grammar/l2s.lark``; ``l2sched.lang.syntax``
builds them, ``l2sched.lang.resolve`` resolves them into a ``Schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from l2sched.errors import Span

_NOSPAN = Span("<none>", 0, 0, 0, 0)


def _span() -> Span:
    return field(default=_NOSPAN, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Name:
    """An identifier as written (window, hook, device, model name...)."""

    text: str
    span: Span = _span()


@dataclass(frozen=True)
class Size:
    """A byte size. ``number`` and ``unit`` as written (``"7.5"``, ``"MB"``);
    ``unit`` is ``""`` when the author forgot it (an error the semantic stage
    reports). ``lang.values.size_bytes`` converts it to bytes; equality
    compares ``number`` and ``unit`` as written."""

    number: str
    unit: str
    span: Span = _span()

    @property
    def text(self) -> str:
        """Canonical spelling, e.g. ``20MB``."""
        return f"{self.number}{self.unit}"


@dataclass(frozen=True)
class StringValue:
    """A double-quoted string, without its quotes."""

    text: str
    span: Span = _span()


Scalar = Union[Size, Name, StringValue]


@dataclass(frozen=True)
class Setting:
    """``KEY VALUE`` in the header: model, device, tp, ep, max_tokens,
    policy, set_aside."""

    key: Name
    value: Scalar
    span: Span = _span()


# Layer selectors ---------------------------------------------------------


@dataclass(frozen=True)
class SelName:
    """``all`` or a selector of the model adapter (``SELECTORS``, e.g.
    ``kda``; checked later)."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class SelRange:
    """``lo..hi``, both ends inclusive, as written (checked later)."""

    lo: str
    hi: str
    span: Span = _span()


@dataclass(frozen=True)
class SelIndex:
    """A single layer index, as written."""

    index: str
    span: Span = _span()


@dataclass(frozen=True)
class SelInter:
    """Layers in every operand (``a & b``)."""

    items: tuple
    span: Span = _span()


@dataclass(frozen=True)
class SelUnion:
    """Layers in any operand (``a, b``)."""

    items: tuple
    span: Span = _span()


@dataclass(frozen=True)
class Selector:
    """``include [except exclude]``: the difference of two unions."""

    include: SelUnion
    exclude: SelUnion | None
    span: Span = _span()


# Windows and targets -----------------------------------------------------


@dataclass(frozen=True)
class Target:
    """``this|next [lazy] PATTERN, ... [except PATTERN, ...]``.

    ``scope`` is ``this`` (the window's own layer) or ``next`` (the next
    decoder layer; the last layer's next is layer 0 of the next decode step).
    ``lazy`` marks tensors that exist only after the first forward. Patterns
    are shell-style globs over tensor paths relative to the decoder layer."""

    scope: str
    lazy: bool
    patterns: tuple[Name, ...]
    excludes: tuple[Name, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Window:
    """``window NAME at HOOK budget SIZE [layers SEL] [carry NAME] [kernel MODE]
    { ... }``.

    Clauses may come in any order; each is ``None`` when absent (missing or
    repeated clauses are reported by the semantic stage, repeats are kept in
    ``duplicates`` for that purpose). ``targets`` keep source order, which
    is the fill order."""

    name: Name
    hook: Name | None
    budget: Size | None
    layers: Selector | None
    carry: Name | None
    targets: tuple[Target, ...]
    has_body: bool = True
    kernel: Name | None = None
    duplicates: tuple[Name, ...] = field(default=(), compare=False)
    #: Where ``{ ... }`` is, for the formatter (``<none>`` without a body).
    body_span: Span = field(default=_NOSPAN, compare=False, repr=False)
    span: Span = _span()


@dataclass(frozen=True)
class Override:
    """``set KEY = VALUE``; ``value`` is the raw text, parsed per key by the
    semantic stage (the same code path as the CLI's ``--set KEY=VALUE``)."""

    key: Name
    value: str
    value_span: Span = field(default=_NOSPAN, compare=False, repr=False)
    span: Span = _span()


Item = Union[Setting, Window, Override]


@dataclass(frozen=True)
class Comment:
    """A ``#`` comment, kept for the formatter (not part of equality)."""

    text: str
    line: int
    column: int


@dataclass(frozen=True)
class ScheduleFile:
    """One parsed file: ``schedule NAME``, optional ``extends "PATH"``, and
    its settings, windows and overrides in source order."""

    name: Name
    extends: StringValue | None
    items: tuple[Item, ...]
    comments: tuple[Comment, ...] = field(default=(), compare=False, repr=False)
    path: str = field(default="<string>", compare=False)
    span: Span = _span()

    @property
    def settings(self) -> list[Setting]:
        """The header settings, in source order."""
        return [i for i in self.items if isinstance(i, Setting)]

    @property
    def windows(self) -> list[Window]:
        """The windows, in source order."""
        return [i for i in self.items if isinstance(i, Window)]

    @property
    def overrides(self) -> list[Override]:
        """The ``set`` lines, in source order."""
        return [i for i in self.items if isinstance(i, Override)]
