"""The semantic model of a schedule: a resolved ``Schedule`` and its
``Window``s, plus the language's settings and their defaults.

``lang.resolve`` builds a ``Schedule`` from parsed files; every later stage
(compiler, lint, runtime via the plan, the vLLM plugin) reads it. Units:
bytes for budgets and the set-aside, tokens for ``max_tokens``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

from l2sched.errors import Span
from l2sched.lang import nodes as n
from l2sched.model.config import ModelConfigRef
from l2sched.units import CACHE_POLICIES

#: L2 cache policies a schedule's ``policy`` may name.
POLICIES = CACHE_POLICIES

#: ``set_aside max``: reserve the device's maximum persisting-L2 set-aside.
SET_ASIDE_MAX = -1

#: Default of ``max_tokens``: decode steps with more tokens are not
#: prefetched ("prefetch only in decode with <= 256 tokens",
#: docs/sources.md#runtime-rules).
DEFAULT_MAX_TOKENS = 256

#: Largest ``max_tokens`` accepted: 2^31 - 1, the largest int32, since the
#: runtime's gate and vLLM count a step's tokens in int32 (the plan schema,
#: ``l2sched/data/plan.schema.json``, has the same bound).
MAX_TOKENS_LIMIT = 2**31 - 1

#: Largest ``tp`` accepted: the largest TP degree a device profile's
#: ``[allreduce.tpN]`` table may name (``device.parse.MAX_TP_DEGREE``).
MAX_TP = 1024

#: Largest budget or set-aside accepted: 1 TB (10^12 B), above the memory
#: of any device a schedule can target.
MAX_SIZE_BYTES = 10**12

#: Header settings a schedule (or ``set``/``--set``) may give.
SETTING_KEYS = ("model", "model_config", "device", "tp", "ep", "max_tokens", "policy",
                "set_aside", "kernel")
#: Window fields a ``set window.NAME.KEY`` override may change.
WINDOW_KEYS = ("budget", "at", "layers", "carry", "kernel")
#: The layer selector name every model has (every layer); the others are
#: the model adapter's ``SELECTORS``.
SELECTOR_ALL = "all"


@dataclass(frozen=True)
class Window:
    """A resolved window.

    ``budget`` in bytes; ``layers`` the sorted decoder-layer indices it fires
    in; ``carry`` the name of the later window that takes the bytes this
    budget could not; ``kernel`` the fill mode (``units.FILL_MODES``) of its
    fills, ``None`` for the schedule's; ``targets`` in fill order; ``index`` its declaration
    order in the merged schedule (base file first). ``spans`` maps ``name``,
    ``at``, ``budget``, ``layers``, ``carry`` to where each value was set
    (an override's value span when a ``set`` changed it)."""

    name: str
    hook: str
    budget: int
    layers: tuple[int, ...]
    carry: str | None
    targets: tuple[n.Target, ...]
    index: int
    span: Span
    spans: Mapping[str, Span] = field(default_factory=dict, compare=False)
    kernel: str | None = None


@dataclass(frozen=True)
class Schedule:
    """A schedule after ``extends``, overrides and name resolution.

    ``tp`` is the tensor-parallel degree, ``ep`` expert parallelism on/off,
    ``max_tokens`` the largest decode step (tokens) that prefetches,
    ``policy`` one of ``POLICIES``, ``set_aside`` bytes of persisting L2 to
    reserve (0 = leave the driver limit alone, ``SET_ASIDE_MAX`` = device
    maximum), ``kernel`` the fill mode (``units.FILL_MODES``) of every window
    that names none, ``None`` for the device profile's default. ``layer_kinds``
    lists the model's decoder layers; ``files`` the extends chain, base first.
    ``spans`` maps each setting key to where its value was given; ``sources``
    maps each file to its text (for carets). ``measured`` holds the results
    the schedule file's ``# measured:`` header lines carry
    (``lang.measured.MeasuredResult``), ``overrides`` the ``--set``
    arguments applied (a measured result describes the file as written).
    ``model_config`` is the model's HF text config the schedule was
    resolved with (its ``model_config`` line's, a config given in its
    place, or the one embedded for ``model``; None for a hand-built
    ``Schedule``: the embedded one), ``config_ref`` which one that is
    (``model.config.ModelConfigRef``)."""

    name: str
    path: str
    model: str
    device: str
    tp: int
    ep: bool
    max_tokens: int
    policy: str
    set_aside: int
    windows: tuple[Window, ...]
    layer_kinds: tuple
    files: tuple[str, ...]
    kernel: str | None = None
    spans: Mapping[str, Span] = field(default_factory=dict, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False,
                                       repr=False)
    measured: tuple = field(default=(), compare=False)
    overrides: tuple[str, ...] = field(default=(), compare=False)
    model_config: Mapping | None = field(default=None, compare=False, repr=False)
    config_ref: ModelConfigRef | None = field(default=None, compare=False)

    def window(self, name: str) -> Window:
        """The window called ``name``. Raises ``KeyError``. O(1): the lint
        looks windows up per fill and per finding."""
        return self.windows_by_name[name]

    @functools.cached_property
    def windows_by_name(self) -> Mapping[str, Window]:
        """Window name -> ``Window`` (built on first use)."""
        return {w.name: w for w in self.windows}


