"""The arms the decode-step measurements time (``bench run``, ``bench tp``
and the profile's ``step_fill`` probe): ``arm_specs`` (the arm list), the
window-alone variant, and the single-GPU lint picture of idle-interval
all-reduces (``spin_collectives``). torch-free: the options of ``bench tp`` resolve
the arms in the parent process before any rank is spawned, and the reports
read them without the step machinery.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from l2sched.bench import shipped_path
from l2sched.bench.controls import CONTROL_PREFIX, add_controls
from l2sched.errors import L2sError
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.device import DeviceProfile, load_device
from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES
from l2sched.runtime.kernel import H200_LOAD_SHAPE

#: The A/A arm's name: a second capture of the no-prefetch step.
AA_ARM = "none-aa"


#: A ``--variant`` item that installs the arm's plan with a join at the end
#: of every decoder layer (``runtime.sites.install_plan(join_every_layer=True)``)
#: instead of once per forward.
JOIN_EVERY_LAYER = "join=every-layer"
#: ``--variant`` items ``launch=CHOICE`` that install the arm's plan on a
#: runtime that enters each fill into the capture that way
#: (``CudaRuntime(capture_launch=CHOICE)``, ``runtime.capture_nodes``);
#: ``launch=fork`` is the default.
LAUNCH_ITEMS = {f"launch={c}": c for c in CAPTURE_LAUNCHES}
#: ``--variant`` items ``merge=on|off``: the issues of one hook point with one
#: fill kernel as one fill launch (``on``, the runtime's default) or one
#: launch per issue (``CudaRuntime(merge_fills=False)``; docs/runtime.md,
#: "Merged launches"): the before/after of merging in one process.
MERGE_ITEMS = {"merge=on": True, "merge=off": False}
#: ``--variant`` items that choose how the plan is installed or run, not a
#: schedule setting: item -> (where, keyword, value).
RUNTIME_ITEMS = {JOIN_EVERY_LAYER: ("install", "join_every_layer", True),
                 **{item: ("runtime", "capture_launch", c) for item, c in LAUNCH_ITEMS.items()},
                 **{item: ("runtime", "merge_fills", v) for item, v in MERGE_ITEMS.items()}}
#: ``--variant`` item ``grid=N``: every fill kernel of the arm launched with N
#: CTAs instead of its profile's grid (``CudaRuntime(grid=N)``): how many SMs a
#: fill touches, the knob of the dispatch-tax bisection (issue 48).
GRID_KEY = "grid"
#: The largest ``grid=N`` (CUDA's grid x-dimension limit is 2**31 - 1; a fill
#: never needs more CTAs than 64 per SM of the largest GPU).
MAX_GRID = 65535


def runtime_item(item: str):
    """``(where, keyword, value)`` of a ``--variant`` item that chooses how the
    plan is installed or run (``RUNTIME_ITEMS``, ``grid=N``), else ``None``
    (a schedule setting). Raises ``ValueError`` for a ``grid`` item that is
    not ``grid=N`` with N ASCII digits in 1..``MAX_GRID``."""
    if item in RUNTIME_ITEMS:
        return RUNTIME_ITEMS[item]
    if item.split("=", 1)[0].strip() != GRID_KEY:
        return None
    value = item[len(GRID_KEY) + 1:] if item.startswith(GRID_KEY + "=") else ""
    n = int(value) if value.isascii() and value.isdigit() else 0
    if not 1 <= n <= MAX_GRID:
        raise ValueError(f"grid takes grid=N, a CTA count in 1..{MAX_GRID}, got {item!r}")
    return ("runtime", "grid", n)


#: Arm names ``arm_specs`` gives itself (a ``--variant`` may not reuse one).
FIXED_ARMS = ("none", AA_ARM, "compiled", "evict_normal", "load")


def split_variant(text: str) -> tuple[str, list[str]]:
    """``NAME:ITEM,ITEM,...`` -> ``(name, [item, ...])``, items stripped."""
    name, _, ov = text.partition(":")
    return name.strip(), [o.strip() for o in ov.split(",") if o.strip()]


def check_variants(variants: list[str], schedule_path: str) -> None:
    """Check ``--variant`` values before anything runs: a name that is not
    empty, not one of ``FIXED_ARMS`` or ``bench/...`` and not given twice;
    ``join=`` only as ``join=every-layer``, ``launch=`` only with one of
    ``CAPTURE_LAUNCHES``, ``merge=`` only ``on`` or ``off``, ``grid=`` only a CTA
    count (``runtime_item``); every other item a setting the
    schedule at ``schedule_path`` accepts. Raises ``ValueError`` naming the
    variant."""
    seen = set()
    for v in variants:
        name, items = split_variant(v)
        if not name or "=" in name:
            raise ValueError(f"--variant {v!r}: the arm needs a name (NAME:KEY=VALUE,...)")
        if name in FIXED_ARMS or name.startswith(("bench/", CONTROL_PREFIX)):
            raise ValueError(f"--variant {name}: the bench names an arm so itself "
                             f"(taken: {', '.join(FIXED_ARMS)}, bench/..., "
                             f"{CONTROL_PREFIX}...)")
        if name in seen:
            raise ValueError(f"--variant {name}: given twice")
        seen.add(name)
        for key, allowed in (("join", [JOIN_EVERY_LAYER]), ("launch", list(LAUNCH_ITEMS)),
                             ("merge", list(MERGE_ITEMS)), (GRID_KEY, None)):
            got = [i for i in items if i.split("=", 1)[0].strip() == key]
            bad = [i for i in got if allowed is not None and i not in allowed]
            if bad:
                raise ValueError(f"--variant {name}: {key} takes only "
                                 f"{' or '.join(map(repr, allowed))}, got {bad[0]!r}")
            if len(got) > 1:
                raise ValueError(f"--variant {name}: {key} given twice")
            for i in got:
                try:
                    runtime_item(i)
                except ValueError as e:
                    raise ValueError(f"--variant {name}: {e}") from None
        try:
            load_schedule(shipped_path(schedule_path),
                          [i for i in items if runtime_item(i) is None])
        except L2sError as e:
            raise ValueError(f"--variant {name}: {e}") from None


def arm_specs(schedule_path: str, bench_dir: str, load_mode: bool,
              variants: list[str], aa: bool = False,
              controls: bool | str = False) -> list[dict]:
    """The arms: ``none``; with ``aa`` the A/A arm ``none-aa`` (a second
    capture of the no-prefetch step, for the noise floor); ``compiled`` (the
    schedule as written); ``evict_normal`` (same windows, no cache policy:
    the Kimi-K3 kernel's behaviour); ``load`` (load-mode kernel, optional);
    one per ``variants`` entry (``NAME:KEY=VALUE,...`` override sets); one
    per ``*.l2s`` of ``bench_dir`` (none for ``""``); with ``controls``
    (``"head"``, ``"decoy"``; True = head) then the control ``ctl-NAME`` of
    every schedule arm (``controls.control_arms``; an arm without one is
    left out with a warning on stderr). Raises what ``load_schedule``
    raises for a variant that does not resolve."""
    arms = [{"name": "none", "path": None}]
    if aa:
        arms.append({"name": AA_ARM, "path": None})
    arms += [{"name": "compiled", "path": schedule_path, "overrides": []},
             {"name": "evict_normal", "path": schedule_path,
              "overrides": ["policy=evict_normal"]}]
    if load_mode:
        arms.append({"name": "load", "path": schedule_path, "overrides": [],
                     "runtime": dict(H200_LOAD_SHAPE)})
    for v in variants:
        name, overrides = split_variant(v)
        arm = {"name": name, "path": schedule_path,
               "overrides": [o for o in overrides if runtime_item(o) is None]}
        for item in overrides:  # installation and runtime choices, not settings
            choice = runtime_item(item)
            if choice is not None:
                where, key, value = choice
                arm.setdefault(where, {})[key] = value
        arms.append(arm)
    if bench_dir and os.path.isdir(bench_dir):
        for f in sorted(os.listdir(bench_dir)):
            if f.endswith(".l2s"):
                arms.append({"name": "bench/" + f[:-4],
                             "path": os.path.join(bench_dir, f), "overrides": []})
    if not controls:
        return arms
    return add_controls(arms, "l2sched bench", "head" if controls is True else controls)


def window_alone_variant(name: str, sched, window: str, budget: str) -> str:
    """The ``NAME:KEY=VALUE,...`` variant ``name`` of the resolved schedule
    ``sched`` that runs only ``window``, at ``budget`` (a size: ``8.5MB``,
    ``12750KB``): every other window's budget 0 B."""
    others = [f"window.{o.name}.budget=0MB" for o in sched.windows if o.name != window]
    return f"{name}:" + ",".join(others + [f"window.{window}.budget={budget}"])


def schedule_text(path: str | None) -> str | None:
    """The text of the schedule file an arm names (None for no path), to
    record in a result beside the path (``arm_schedule``)."""
    return Path(shipped_path(path)).read_text(encoding="utf-8") if path else None


def arm_schedule(arm: dict, model_config: dict | None = None):
    """The resolved schedule of one arm of a result: the schedule text the
    run recorded (``schedule_text``, so the report lints what was measured
    even when the file has changed or was a temporary one), else the file
    at ``path``; the arm's ``overrides`` on top; resolved for
    ``model_config`` (the result's ``model_config``: its layer count) when
    given, else for the schedule's own. Raises what ``load_schedule``
    raises."""
    if arm.get("schedule_text") is not None:
        return load_schedule_text(arm["schedule_text"], arm["path"], arm["overrides"],
                                  model_config=model_config)
    return load_schedule(shipped_path(arm["path"]), arm["overrides"], model_config=model_config)


def spin_collectives(device_profile: DeviceProfile):
    """``device_profile`` (a ``DeviceProfile``) with every fill kernel's
    ``allreduce_slowdown`` at 0: the lint's picture of a single-GPU ``bench
    run``, whose all-reduces are spin kernels of the collective model's
    length (idle intervals), which a fill does not slow as it slows NCCL's
    all-reduce (the ``/spin`` arms of ``bench tp``:
    benchmarks/results/h200x2-2026-12-01-T1-shipped-profile.md gains +13..+55
    us where the same schedule with real all-reduces lost 170-225 us)."""
    modes = {m: dataclasses.replace(fm, allreduce_slowdown=0.0)
             for m, fm in device_profile.fill_modes.items()}
    return dataclasses.replace(device_profile, fill_modes=modes)
