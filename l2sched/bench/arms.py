"""The arms the decode-step benchmarks measure (``bench run`` and ``bench
tp``): ``arm_specs`` (the arm list) and ``validation_variants`` (the arms of
docs/lint.md#validation). torch-free: the options of ``bench tp`` resolve
the arms in the parent process before any rank is spawned, and the reports
read them without the step machinery.
"""

from __future__ import annotations

import os
from pathlib import Path

from l2sched.bench import shipped_path
from l2sched.bench.controls import CONTROL_PREFIX, add_controls
from l2sched.bench.validation import AA_ARM
from l2sched.errors import L2sError
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.model.devices import load_device
from l2sched.runtime.kernel import H200_LOAD_SHAPE


#: A ``--variant`` item that installs the arm's plan with a join at the end
#: of every decoder layer (``vllm.sites.install_plan(join_every_layer=True)``)
#: instead of once per forward.
JOIN_EVERY_LAYER = "join=every-layer"
#: A ``--variant`` item that installs the arm's plan on a runtime that, in
#: the capture, launches each fill at the next hook instead of right after
#: its fork (``CudaRuntime(defer_launch=True)``).
LAUNCH_DEFERRED = "launch=deferred"
#: ``--variant`` items that choose how the plan is installed or run, not a
#: schedule setting: item -> (where, keyword).
RUNTIME_ITEMS = {JOIN_EVERY_LAYER: ("install", "join_every_layer"),
                 LAUNCH_DEFERRED: ("runtime", "defer_launch")}


#: Arm names ``arm_specs`` gives itself (a ``--variant`` may not reuse one).
FIXED_ARMS = ("none", AA_ARM, "compiled", "evict_normal", "load")


def split_variant(text: str) -> tuple[str, list[str]]:
    """``NAME:ITEM,ITEM,...`` -> ``(name, [item, ...])``, items stripped."""
    name, _, ov = text.partition(":")
    return name.strip(), [o.strip() for o in ov.split(",") if o.strip()]


def check_variants(variants: list[str], schedule_path: str) -> None:
    """Check ``--variant`` values before anything runs: a name that is not
    empty, not one of ``FIXED_ARMS`` or ``bench/...`` and not given twice;
    ``join=`` only as ``join=every-layer``, ``launch=`` only as
    ``launch=deferred``; every other item a setting the
    schedule at ``schedule_path`` accepts. Raises ``ValueError`` naming the
    variant."""
    seen = set()
    for v in variants:
        name, items = split_variant(v)
        if not name:
            raise ValueError(f"--variant {v!r}: the arm needs a name (NAME:KEY=VALUE,...)")
        if name in FIXED_ARMS or name.startswith(("bench/", CONTROL_PREFIX)):
            raise ValueError(f"--variant {name}: the bench names an arm so itself "
                             f"(taken: {', '.join(FIXED_ARMS)}, bench/..., "
                             f"{CONTROL_PREFIX}...)")
        if name in seen:
            raise ValueError(f"--variant {name}: given twice")
        seen.add(name)
        for key, want in (("join", JOIN_EVERY_LAYER), ("launch", LAUNCH_DEFERRED)):
            got = [i for i in items if i.split("=", 1)[0].strip() == key]
            if any(i != want for i in got):
                raise ValueError(f"--variant {name}: {key} takes only {want!r}, "
                                 f"got {got[0]!r}")
        try:
            load_schedule(shipped_path(schedule_path),
                          [i for i in items if i not in RUNTIME_ITEMS])
        except L2sError as e:
            raise ValueError(f"--variant {name}: {e}") from None


def arm_specs(schedule_path: str, bench_dir: str, load_mode: bool,
              variants: list[str], validation: bool = False,
              perturbations: bool = False, controls: bool | str = False) -> list[dict]:
    """The arms: ``none``; ``compiled`` (the schedule as written);
    ``evict_normal`` (same windows, no cache policy: the Kimi-K3 kernel's
    behaviour); ``load`` (load-mode kernel, optional); one per ``--variant``
    override set; with ``validation`` the arms of docs/lint.md#validation
    (``validation_variants``) and the A/A arm ``none-aa`` (a second capture
    of the no-prefetch step, for the noise floor); with ``perturbations``
    the A/A arm and ``perturbation_variants``; one per
    ``schedules/bench/*.l2s``; with ``controls`` (``"head"``, ``"decoy"``;
    True = head) then the control ``ctl-NAME`` of every schedule arm
    (``controls.control_arms``; an arm without one is left out with a
    warning on stderr)."""
    arms = [{"name": "none", "path": None}]
    if validation or perturbations:
        arms.append({"name": AA_ARM, "path": None})
    arms += [{"name": "compiled", "path": schedule_path, "overrides": []},
             {"name": "evict_normal", "path": schedule_path,
              "overrides": ["policy=evict_normal"]}]
    if load_mode:
        arms.append({"name": "load", "path": schedule_path, "overrides": [],
                     "runtime": dict(H200_LOAD_SHAPE)})
    if validation:
        variants = validation_variants(schedule_path) + list(variants)
    if perturbations:
        variants = perturbation_variants(schedule_path) + list(variants)
    for v in variants:
        name, overrides = split_variant(v)
        arm = {"name": name, "path": schedule_path,
               "overrides": [o for o in overrides if o not in RUNTIME_ITEMS]}
        for item in overrides:  # installation and runtime choices, not settings
            if item in RUNTIME_ITEMS:
                where, key = RUNTIME_ITEMS[item]
                arm.setdefault(where, {})[key] = True
        arms.append(arm)
    if bench_dir and os.path.isdir(bench_dir):
        for f in sorted(os.listdir(bench_dir)):
            if f.endswith(".l2s"):
                arms.append({"name": "bench/" + f[:-4],
                             "path": os.path.join(bench_dir, f), "overrides": []})
    if not controls:
        return arms
    return add_controls(arms, "l2sched bench", "head" if controls is True else controls)


def validation_variants(schedule_path: str) -> list[str]:
    """``NAME:KEY=VALUE,...`` variants of the schedule at ``schedule_path``
    for the validation set (docs/lint.md#validation): each fill kernel
    (``kernel-bulk``, ``kernel-copy``, ``kernel-load``) and each window alone
    at its budget and at half of it (the other windows' budgets 0 B), e.g.
    ``only-B-30MB``."""
    sched = load_schedule(shipped_path(schedule_path), [])
    own = sched.kernel or load_device(sched.device).fill_default
    out = [f"kernel-{k}:kernel={k}" for k in ("bulk", "copy", "load") if k != own]
    for w in sched.windows:
        for b in (w.budget, w.budget // 2):
            mb = f"{b / 10**6:g}MB"
            out.append(window_alone_variant(f"only-{w.name}-{mb}", sched, w.name, mb))
    return out


def window_alone_variant(name: str, sched, window: str, budget: str) -> str:
    """The ``NAME:KEY=VALUE,...`` variant ``name`` of the resolved schedule
    ``sched`` that runs only ``window``, at ``budget`` (a size: ``8.5MB``,
    ``12750KB``): every other window's budget 0 B."""
    others = [f"window.{o.name}.budget=0MB" for o in sched.windows if o.name != window]
    return f"{name}:" + ",".join(others + [f"window.{window}.budget={budget}"])


def perturbation_variants(schedule_path: str) -> list[str]:
    """``NAME:KEY=VALUE,...`` perturbations of the schedule at
    ``schedule_path`` (issue 15: a fitted schedule measured beside its
    neighbours): every budget +25% (``budgets+25%``) and -25%
    (``budgets-25%``), the window with the most budget per step (budget x
    layers it fires in) removed (budget 0 B, ``without-W``), and the fill kernel the schedule does not use that
    the device profile rates best (``kernel-MODE``)."""
    sched = load_schedule(shipped_path(schedule_path), [])
    dev = load_device(sched.device)
    out = []
    for label, f in (("budgets+25%", 1.25), ("budgets-25%", 0.75)):
        out.append(f"{label}:" + ",".join(
            f"window.{w.name}.budget={round(w.budget * f / 10**3)}KB" for w in sched.windows))
    if sched.windows:
        big = max(sched.windows, key=lambda w: (w.budget * len(w.layers), w.name))
        out.append(f"without-{big.name}:window.{big.name}.budget=0MB")
    own = sched.kernel or dev.fill_default
    others = sorted((m for m in dev.fill_modes if m != own),
                    key=lambda m: (-dev.fill_modes[m].effect, m))
    if others:
        out.append(f"kernel-{others[0]}:kernel={others[0]}")
    return out


def schedule_text(path: str | None) -> str | None:
    """The text of the schedule file an arm names (None for no path), to
    record in a result beside the path (``arm_schedule``)."""
    return Path(shipped_path(path)).read_text(encoding="utf-8") if path else None


def arm_schedule(arm: dict):
    """The resolved schedule of one arm of a result: the schedule text the
    run recorded (``schedule_text``, so the report lints what was measured
    even when the file has changed or was a temporary one), else the file
    at ``path``; the arm's ``overrides`` on top. Raises what
    ``load_schedule`` raises."""
    if arm.get("schedule_text") is not None:
        return load_schedule_text(arm["schedule_text"], arm["path"], arm["overrides"])
    return load_schedule(shipped_path(arm["path"]), arm["overrides"])
