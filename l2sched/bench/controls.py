"""Controls: a schedule arm's fills without their hits, measured.

Why: in a captured decode step, where a schedule's fills sit changes how
CUDA dispatches the graph's branches onto its hardware queues, and that
costs or saves step time that no fill's bytes explain (docs/lint.md:
window C alone loses as much at 0.5 MB as at 5 MB; with one hardware queue
the loss is gone). The lint cannot see that mapping, so it is measured. The
control ``ctl-NAME`` of arm ``NAME`` has the same fills, at the same hook
points of the same layers, with the same kernel, policy and install choice,
in one of two kinds (``CONTROL_KINDS``):

- ``head``: each fill fetches only the compiler's smallest unit, a 4 KiB
  head of its first target (``compiler.plan.EMPTY_REASONS``: "no 4 KiB
  head"). Measured on the H200 (docs/lint.md, "Dispatch controls"): right
  for a window alone, an over-correction for schedules with several
  windows, whose loss depends on the fills' size too.
- ``decoy``: each fill reads as many bytes as the arm's, with the same
  kernel, from a scratch buffer instead of the weights (``DecoyRows``): the
  fills' whole cost (dispatch, device-memory traffic, the kernels beside
  them, what their lines evict) without a single hit. Its prediction is the
  lint's with fills that land nothing (``without_hits``).

A controls run (``bench run --controls [head|decoy]`` / ``bench tp
--controls``, head only) measures the controls; a report of ANOTHER run
takes, per (arm, M), the control's residual (measured - predicted gain of
``ctl-NAME`` in the controls run, us) and adds it to the lint's predicted
gain of ``NAME`` (``with_controls``). The validation figures never include
the control arms themselves (``is_control``). Units: us; bytes.
"""

from __future__ import annotations

import dataclasses
import sys

from l2sched.bench import shipped_path
from l2sched.compiler.compile import compile_plan
from l2sched.errors import L2sError
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory
from l2sched.units import ALIGN
from l2sched.device import DeviceProfile

#: Name prefix of a control arm: ``ctl-compiled`` is the control of ``compiled``.
CONTROL_PREFIX = "ctl-"
#: What every fill of a head control fetches: the compiler's smallest unit,
#: a 4 KiB head of the window's first target (a budget below it fetches nothing).
CONTROL_BUDGET = "4KiB"
#: The kinds of control (module docstring).
CONTROL_KINDS = ("head", "decoy")


def is_control(name: str) -> bool:
    """True for a control arm's name (``CONTROL_PREFIX``)."""
    return name.startswith(CONTROL_PREFIX)


def control_of(name: str) -> str:
    """The arm a control stands for: ``ctl-compiled`` -> ``compiled``."""
    return name[len(CONTROL_PREFIX):] if is_control(name) else name


def _issue_keys(plan) -> list[tuple]:
    # an issue without ranges has no table span: the runtime forks nothing for it
    return [(i.window, i.hook, i.layer, i.kernel) for i in plan.issues if i.ranges]


def control_arm(arm: dict, inventory, kind: str = "head") -> dict | str:
    """The control of ``arm`` (an ``arms.arm_specs`` schedule arm:
    ``{name, path, overrides, ...}``) of ``kind`` (``CONTROL_KINDS``). head:
    the same arm with each window that issues fills at ``CONTROL_BUDGET``
    and every other window at 0 B, or a string saying why there is none
    (its compiled plan would not have the arm's fills at the same hook
    points and layers: e.g. a carry that the arm's budgets left empty).
    decoy: the same arm marked ``decoy`` (the bench reads its fills' bytes
    from a scratch buffer). ``inventory``: the plan's model inventory (what
    the bench compiles with). Raises ``L2sError`` for a schedule that does
    not load, ``ValueError`` for an unknown kind."""
    if kind not in CONTROL_KINDS:
        raise ValueError(f"unknown control kind {kind!r} (known: {', '.join(CONTROL_KINDS)})")
    if kind == "decoy":
        out = {k: v for k, v in arm.items() if k != "name"}
        out.update(name=CONTROL_PREFIX + arm["name"], control_of=arm["name"], decoy=True)
        return out
    path = shipped_path(arm["path"])
    sched = load_schedule(path, arm["overrides"])
    plan = compile_plan(sched, inventory, 0)
    firing = {k[0] for k in _issue_keys(plan)}
    ov = list(arm["overrides"]) + [
        f"window.{w.name}.budget={CONTROL_BUDGET if w.name in firing else '0MB'}"
        for w in sched.windows]
    ctl = compile_plan(load_schedule(path, ov), inventory, 0)
    if _issue_keys(ctl) != _issue_keys(plan):
        return (f"{arm['name']}: with {CONTROL_BUDGET} budgets the plan has "
                f"{len(_issue_keys(ctl))} fills where the arm has {len(_issue_keys(plan))}")
    out = {k: v for k, v in arm.items() if k not in ("name", "overrides")}
    out.update(name=CONTROL_PREFIX + arm["name"], overrides=ov, control_of=arm["name"])
    return out


def control_arms(arms: list[dict], kind: str = "head") -> tuple[list[dict], list[str]]:
    """``(controls, notes)``: a control of ``kind`` (``control_arm``) for
    every arm of ``arms`` that has a schedule and no runtime kernel option
    (the arms the validation scores), in order; ``notes`` says which arms
    have none and why. The inventory is the bench's: GLM-5.3-Flash at TP 4,
    rank 0."""
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    controls, notes = [], []
    for a in arms:
        if not a.get("path") or is_control(a["name"]):
            continue
        if a.get("runtime"):
            notes.append(f"{a['name']}: an arm with a runtime option (the load-mode kernel, "
                         "launch=CHOICE) is not scored by the validation")
            continue
        got = control_arm(a, inv, kind)
        if isinstance(got, str):
            notes.append(got)
        else:
            controls.append(got)
    return controls, notes


def add_controls(arms: list[dict], who: str, kind: str = "head") -> list[dict]:
    """``arms`` followed by their controls of ``kind`` (``control_arms``);
    each arm without one is named in a line on stderr, prefixed ``who``."""
    got, notes = control_arms(arms, kind)
    for note in notes:
        print(f"{who}: no control for {note}", file=sys.stderr)
    return arms + got


class DecoyRows:
    """Where a decoy control's fills read: every ``(address, nbytes)`` row
    a runtime binds moves to a span of the same size in a scratch buffer of
    ``size`` bytes at device address ``base``, spans laid end to end in the
    order rows are first bound, the same span for the same (issue, row) at
    every later binding (as a weight's address stays), wrapping at the end.
    A buffer at least one step's fill bytes long (``bench run`` sizes it to
    the largest decoy plan) makes every span of a step distinct, so no
    decoy fill finds another's lines in L2. Rows of 0 bytes stay ``(0, 0)``.
    Addresses are 16-byte aligned when ``base`` is (``units.ALIGN``)."""

    def __init__(self, base: int, size: int):
        if size < ALIGN:
            raise ValueError(f"decoy buffer of {size} bytes; at least {ALIGN} needed")
        self.base, self.size = base, size // ALIGN * ALIGN
        self.next = 0
        self.spans: dict[tuple[int, int], tuple[int, int]] = {}

    def rows(self, index: int, rows) -> list[tuple[int, int]]:
        """``rows`` of issue ``index`` moved into the buffer."""
        out = []
        for j, (_, n) in enumerate(rows):
            n = min(int(n), self.size)
            if n <= 0:
                out.append((0, 0))
                continue
            got = self.spans.get((index, j))
            if got is None or got[1] != n:
                if self.next + n > self.size:
                    self.next = 0
                got = self.spans[(index, j)] = (self.base + self.next, n)
                self.next += (n + ALIGN - 1) // ALIGN * ALIGN
            out.append(got)
        return out

    def attach(self, runtime) -> None:
        """Make ``runtime`` (a ``RuntimeBase``) bind every row here."""
        bind = runtime.set_rows
        runtime.set_rows = lambda index, rows: bind(index, self.rows(index, rows))


def without_hits(device_profile: DeviceProfile):
    """``device_profile`` (a ``DeviceProfile``) whose fills land nothing: every fill
    kernel's landed fraction 0 (and the profile's default ``fill_effect``),
    everything else as is: the lint's picture of a decoy control."""
    modes = {m: dataclasses.replace(fm, effect=0.0, landed=())
             for m, fm in device_profile.fill_modes.items()}
    return dataclasses.replace(device_profile, fill_modes=modes, fill_effect=0.0)
