"""What every lint rule family shares: the ``Rule`` record (code, name,
severity, documentation), the ``Finding`` a check returns, selection and
``# l2s: ignore`` suppression, and the helpers that locate a finding in the
schedule's source."""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from l2sched.compiler.compile import pattern_matches
from l2sched.errors import Diagnostic, Span, source_lines
from l2sched.units import format_layers

#: Rule severities, most severe first.
SEVERITIES = ("error", "warning", "info")

#: code -> ``Rule``, filled as the family modules define their rules
#: (``lint.rules`` imports every family and exposes it sorted as ``RULES``).
REGISTRY: dict[str, "Rule"] = {}


@dataclass(frozen=True)
class Rule:
    """One lint rule: stable ``code`` (``L2S101``), kebab-case ``name``,
    fixed ``severity`` (``SEVERITIES``), and its documentation as
    ``docs/lint.md`` prints it: ``what`` it reports, ``why`` it matters, an
    ``example`` (may be empty) and the ``fix``."""

    code: str
    name: str
    severity: str
    what: str
    why: str
    example: str
    fix: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.code}: severity {self.severity!r}")
        if REGISTRY.setdefault(self.code, self) is not self:
            raise ValueError(f"rule code {self.code} defined twice")

    def markdown(self) -> str:
        """The rule's section of ``docs/lint.md``."""
        lines = [f"## {self.code} {self.name} ({self.severity})"]
        for label, text in (("What", self.what), ("Why", self.why),
                            ("Example", self.example), ("Fix", self.fix)):
            if text:
                lines.append(f"- {label}: " + text.replace("\n", "\n  "))
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Finding:
    """A rule violation before rendering: ``code``, one-line ``message``,
    ``span`` (or None), ``data`` (machine-readable extras for JSON)."""

    code: str
    message: str
    span: Span | None
    data: dict = field(default_factory=dict, compare=False)

    @property
    def severity(self) -> str:
        """The rule's severity (fixed per code)."""
        return REGISTRY[self.code].severity

    def diagnostic(self, sources: dict) -> Diagnostic:
        """The renderable ``Diagnostic`` (source line from ``sources``:
        path -> text)."""
        line = _source_line(self.span, sources)
        return Diagnostic(self.message, self.span, self.severity, self.code, line)


def _source_line(span: Span | None, sources: dict) -> str | None:
    """The text of ``span``'s line in ``sources`` (path -> text), split with
    the one line splitter (``errors.source_lines``)."""
    if span is None or span.path not in sources:
        return None
    lines = _lines(sources[span.path])
    return lines[span.line - 1] if 1 <= span.line <= len(lines) else None


@functools.lru_cache(maxsize=16)
def _lines(text: str) -> tuple[str, ...]:
    """``source_lines(text)``, split once per text: every finding and every
    suppression check looks up one line of the same few files (splitting
    per lookup made the lint quadratic in the schedule's size)."""
    return tuple(source_lines(text))


def code_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """ruff-style selection: a code is kept when some ``select`` entry is a
    prefix of it (empty = all) and no ``ignore`` entry is."""
    if select and not any(code.startswith(s) for s in select):
        return False
    return not any(code.startswith(s) for s in ignore)


_SUPPRESS = re.compile(r"#\s*l2s:\s*ignore(?:\[([A-Za-z0-9_, ]*)\])?")


def suppressed(f: Finding, sources: dict) -> bool:
    """True when the source line of ``f.span`` carries ``# l2s: ignore`` or
    ``# l2s: ignore[CODE, ...]`` naming ``f.code`` (or a prefix of it)."""
    line = _source_line(f.span, sources)
    m = _SUPPRESS.search(line) if line is not None else None
    if not m:
        return False
    if m.group(1) is None:
        return True
    codes = [c.strip() for c in m.group(1).split(",") if c.strip()]
    return any(f.code.startswith(c) for c in codes)


def window_span(w, key: str = "at") -> Span:
    """Where window ``w``'s clause ``key`` (``at``, ``budget``, ``carry``,
    ``name``) was written, falling back to its name and the window."""
    return w.spans.get(key) or w.spans.get("name") or w.span


def fires_in(kind: str, layers: Iterable[int]) -> str:
    """``fires in kda+moe layers 3..5, 9``: the layers (of layer kind
    ``kind``) where a window fires, selector style. Findings name layers
    only through this and ``layers_of``, so a reader always knows whether
    layers are where the window fires or where its tensors or ops live."""
    layers = sorted(set(layers))
    word = "layer" if len(layers) == 1 else "layers"
    return f"fires in {kind} {word} {format_layers(layers)}"


def layers_of(what: str, layers: Iterable[int], fired: Iterable[int] = (),
              num_layers: int = 0) -> str:
    """``tensors of layers 4..6`` / ``runs in layers 5..7``: layers of the
    tensors or ops a finding is about (``what``: ``tensors of``, ``runs
    in``), when they differ from where the window fires. With ``fired``
    (where the window fires) and ``num_layers``: layer 0 reached from the
    last layer is written last, as ``0 (next step)``."""
    layers = sorted(set(layers))
    fired = set(fired)
    word = "layer" if len(layers) == 1 else "layers"
    if num_layers and 0 in layers and num_layers - 1 in fired and 0 not in fired:
        rest = [i for i in layers if i != 0]
        text = (format_layers(rest) + ", " if rest else "") + "0 (next step)"
        return f"{what} {word} {text}"
    return f"{what} {word} {format_layers(layers)}"


def next_layers(layers: Iterable[int], num_layers: int) -> list[int]:
    """The layer after each of ``layers`` (the last layer's next is layer 0
    of the next decode step)."""
    return sorted({(i + 1) % num_layers for i in layers})


def target_span(schedule, window_name: str, layer_rel: str, tensor: str) -> Span | None:
    """Span of the target (in ``window_name``, else any window) that names
    ``tensor`` with scope ``layer_rel`` (``this``/``next``)."""
    try:  # the window's own target first; any window's only when it has none
        first = [schedule.window(window_name)]
    except KeyError:
        first = []
    for w in itertools.chain(first, (w for w in schedule.windows
                                     if w.name != window_name)):
        for t in w.targets:
            if t.scope == layer_rel and any(pattern_matches(p.text, tensor)
                                            for p in t.patterns):
                return t.span
    return None
