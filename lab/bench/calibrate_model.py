"""``python -m lab bench calibrate``: the two decode-step terms of a device
profile that no single-kernel probe of ``l2sched profile`` measures, fitted
from ONE ``bench run --perturbations`` result, or one ``bench tp
--validation`` result (real all-reduces; its rows as ``bench tp-report``
validates them, ``tp_validation.gain_rows``) (docs/lint.md#validation):

* ``latency.fill_slowdown_scale``: a main-stream op runs at ``1 / (1 +
  scale x fill.MODE.slowdown)`` of its rate while a fill reads device
  memory. Chosen on the grid ``SCALE_GRID`` as the value with the smallest
  median |predicted - measured gain| over the result's schedule arms and M
  (ties: the smaller value); with the objective ``wrong-way-first``, the
  fewest pairs predicted faster and measured slower beyond the A/A floor
  first, then that median (a run whose arms are mostly one schedule's
  neighbourhood otherwise buys its median with slowdowns of 0, which
  calls interfering shapes faster: issue 45's first attempt,
  benchmarks/results/h100-2026-12-06-issue45-validation/).
* ``l2.set_aside_stream_slowdown``: the routed-expert stream's slowdown
  with the maximum persisting-L2 set-aside reserved: the median over M of
  (expert-stream time of the arm with a set-aside / the ``none`` arm's) -
  1, divided by the reserved fraction of the maximum. Kept as it is when
  the result has no arm with a set-aside, and when the starting profile
  measured it with its ``set_aside`` probe (``l2sched profile``): a probe
  number is not replaced by a decode-step fit.

The result is calibration for that run: judge the calibrated profile on
another run (``bench report`` of a later result, or
``lab/experiments/model_recal.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics

from l2sched.bench import read_json_file
from lab.bench import tp_validation
from l2sched.bench import recorded_profile as bench_recorded_profile
from l2sched.bench.arms import arm_schedule
from l2sched.bench.controls import CONTROL_PREFIX, control_of, is_control, without_hits
from lab.bench.controls import Residuals, residuals, run_control_kind
from l2sched.bench.arms import AA_ARM, spin_collectives
from lab.bench.validation import aa_noise_floor, validate
from lab.bench.verdicts import is_schedule_arm
from l2sched.errors import L2sInputError
from l2sched.lang.syntax import schedule_code
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.device import load_device, profile_path, profile_table_header
from l2sched.model.inventory import analytical_inventory

#: The scale values tried (0, 0.5, ..., 8; 0 = a fill slows nothing but the
#: device-memory phases it shares). The recalibration of 2026-12-01 used
#: 1, 1.5, ..., 8; 0 and 0.5 were added (session 6) for runs with one
#: hardware queue (docs/lint.md#validation).
SCALE_GRID = tuple(0.5 * i for i in range(17))
#: How ``calibrate`` chooses on the grid (the module docstring says why):
#: objective -> the rule in words, as the profile's record and the CLI print it.
OBJECTIVE_RULES = {"error": "least median |gain error|",
                   "wrong-way-first": "fewest wrong-way pairs, then least median |gain error|"}
OBJECTIVES = tuple(OBJECTIVE_RULES)


def wrong_way_pairs(figures: dict) -> int:
    """Rows of ``validate``'s ``figures`` predicted faster and measured
    slower, each beyond the row's floor."""
    return sum(1 for r in figures["rows"]
               if r["pred_verdict"] == "faster" and r["meas_verdict"] == "slower")


def recorded_profile(d: dict, fallback: str = "h200", where: str = "the result"):
    """The device profile recorded in result ``d`` (``device_profile_toml``),
    else the profile ``fallback`` names. Raises ``L2sInputError`` for an
    unusable recorded profile, located at ``where`` (the result file):
    ``WHERE: device_profile_toml:LINE:COL: ...``."""
    return bench_recorded_profile(d, where) or load_device(fallback)


def lint_setup(d: dict) -> tuple:
    """``(config, inventory, {arm: schedule})`` of result ``d``'s schedule
    arms: what ``gain_rows`` lints with, built once per result. The config
    is the one the run built its step from (``d["model_config"]``, as
    ``bench run --model-config`` gave it), else the embedded default."""
    cfg = d.get("model_config") or load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    scheds = {a["name"]: arm_schedule(a, d.get("model_config")) for a in d["arms"]
              if a["path"] and is_schedule_arm(a)}
    return cfg, inv, scheds


def gain_rows(d: dict, prof, setup: tuple | None = None) -> list[dict]:
    """Predicted (uncalibrated lint with ``prof``) and measured step-time
    gain (us, + = faster) of every schedule arm of result ``d`` per M, with
    the A/A noise floor (us): the rows ``validation.validate`` takes. The
    lint's all-reduces are the run's spin kernels (``spin_collectives``); a
    decoy control (``controls.DecoyRows``) is linted with fills that land
    nothing (``controls.without_hits``).
    ``setup``: ``lint_setup(d)`` when the caller lints ``d`` more than once."""
    cfg, inv, scheds = setup or lint_setup(d)
    prof = spin_collectives(prof)  # the run's all-reduces are idle intervals
    decoys = {a["name"] for a in d["arms"] if a.get("decoy")}
    no_hits = without_hits(prof) if decoys else prof  # their fills read a scratch buffer
    rows = []
    for r in measured_gain_rows(d, scheds):
        lr = run_lint(scheds[r["arm"]], inv, device_profile=no_hits if r["arm"] in decoys else prof,
                      tokens=r["M"], model_config=cfg)
        rows.append({**r, "pred_gain_us": lr.step_period("base") - lr.step_period("sim")})
    return rows


def measured_gain_rows(d: dict, names) -> list[dict]:
    """``[{arm, M, floor_us, meas_gain_us}]`` of the arms ``names`` of
    result ``d`` at every M where they ran: gain = median untimed step of
    ``none`` minus the arm's (us, + = faster), floor = the A/A noise floor
    of that M (``validation.aa_noise_floor``). Raises ``L2sInputError``
    for a result without the A/A arm."""
    rows = []
    for M, m in d["per_m"].items():
        arms = m["arms"]
        if AA_ARM not in arms:
            raise L2sInputError(f"the result has no {AA_ARM!r} arm (run bench run with "
                                "--perturbations or --validation)")
        floor = aa_noise_floor(arms["none"]["graph_step_us_all"],
                               arms[AA_ARM]["graph_step_us_all"])
        none = arms["none"]["graph_step_us"]["median"]
        rows += [{"arm": name, "M": int(M), "floor_us": floor,
                  "meas_gain_us": none - arms[name]["graph_step_us"]["median"]}
                 for name in names if name in arms]
    return rows


def set_aside_slowdown(d: dict, prof) -> tuple[float, str] | None:
    """``(slowdown, arm)``: the expert stream's slowdown per maximum
    set-aside measured by the first arm of result ``d`` whose schedule
    reserves one (module docstring), or None when no arm does."""
    for a in d["arms"]:
        if not a["path"]:
            continue
        aside = arm_schedule(a).set_aside
        if aside == 0 or prof.set_aside_max_bytes <= 0:
            continue
        frac = 1.0 if aside < 0 else min(aside, prof.set_aside_max_bytes) / \
            prof.set_aside_max_bytes
        ratios = [m["arms"][a["name"]]["expert_stream_us"]["median"]
                  / m["arms"]["none"]["expert_stream_us"]["median"] - 1
                  for m in d["per_m"].values() if a["name"] in m["arms"]]
        if ratios:
            return statistics.median(ratios) / frac, a["name"]
    return None


def calibrate(d: dict, profile: str = "", progress=None, where: str = "the result",
              objective: str = "error") -> dict:
    """Fit the two terms from ``d``, a ``bench run`` or ``bench tp
    --validation`` result (``read_json_file``).
    ``profile``: the profile to start from (name or TOML path; default: the
    one the result recorded). Returns ``{"scale", "scan": [(scale, median
    |error| us)], "set_aside": (slowdown, arm) or None, "set_aside_probed"
    (the profile's probe measured it: kept), "gemm_slowdown_measured" (the
    starting profile has ``fill.MODE.gemm_slowdown``), "before", "after"}``
    (``before``/``after``: ``validate`` of the result with the starting and
    the calibrated terms). ``progress``: called with a line per grid value;
    ``where``: the result's file, for errors in the profile it recorded;
    ``objective``: one of ``OBJECTIVES`` (``scan`` then has a third
    column, the wrong-way pairs). Raises ``L2sInputError`` for a result
    without an A/A arm, ``ValueError`` for an unknown objective."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} ({', '.join(OBJECTIVES)})")
    base = load_device(profile) if profile else recorded_profile(d, where=where)
    probed = str(base.measured.get("l2.set_aside_stream_slowdown", {}).get("probe", "")) \
        .startswith("set_aside")
    tp = d.get("kind") == "l2sched bench tp"
    if tp and (d.get("dry") or d.get("backend") != "nccl"):
        raise L2sInputError(f"{where}: a CPU (dry, gloo) bench tp result: nothing to "
                            "calibrate on")
    # a bench tp result has no set-aside arm (and no per-M expert-stream table)
    aside = None if probed or tp else set_aside_slowdown(d, base)
    start = dataclasses.replace(base, set_aside_stream_slowdown=aside[0]) if aside else base
    if tp:
        rows = _tp_rows(d)
    else:
        setup = lint_setup(d)

        def rows(prof):
            return gain_rows(d, prof, setup)
    scan, figures = [], {}
    for s in SCALE_GRID:
        figures[s] = validate(rows(dataclasses.replace(start, fill_slowdown_scale=s)))
        scan.append((s, figures[s]["median_abs_gain_err_us"], wrong_way_pairs(figures[s])))
        if progress is not None:
            progress(f"fill_slowdown_scale {s:g}: median |error| {scan[-1][1]:.1f} us, "
                     f"{scan[-1][2]} wrong-way")
    if objective == "wrong-way-first":
        best = min(scan, key=lambda x: (x[2], x[1], x[0]))[0]
    else:
        best = min(scan, key=lambda x: (x[1], x[0]))[0]
    return {"scale": best, "scan": scan, "set_aside": aside, "set_aside_probed": probed,
            "gemm_slowdown_measured": any(fm.gemm_slowdown is not None
                                          for fm in base.fill_modes.values()),
            "before": validate(rows(base)), "after": figures[best], "objective": objective}


def result_rows(d: dict, prof) -> list[dict]:
    """The gain rows (``validation.validate``'s input) of result ``d``, a
    ``bench run`` or ``bench tp`` result, linted with ``prof``: ``gain_rows``
    or, for ``bench tp``, ``tp_validation.gain_rows`` with the run's
    all-reduce table."""
    if d.get("kind") == "l2sched bench tp":
        return tp_validation.gain_rows(d, tp_validation.run_predictor(d, prof))[0]
    return gain_rows(d, prof)


def control_residuals(path: str, prof, run: dict | None = None,
                      run_path: str = "") -> dict[tuple[str, int], float]:
    """``{(arm, M): measured - predicted gain of ctl-arm, us}`` of the
    controls run at ``path`` (``bench run --controls`` or ``bench tp
    --controls``, .gz allowed), linted with ``prof`` (``controls.residuals``).
    ``run`` (read from ``run_path``): the result the residuals are for; then
    the controls run must be of its kind (``bench run`` / ``bench tp``), not
    the same run, and each control must have been made from the same
    schedule and overrides as ``run``'s arm. Raises ``L2sInputError`` naming
    ``path`` for any of that, a file that cannot be read or used, a --dry
    result, no A/A arm, no control arm, or a residual that is not finite."""
    return _residuals_of(read_json_file(path), path, prof, run, run_path)


def _residuals_of(d, path: str, prof, run: dict | None, run_path: str) -> Residuals:
    """``control_residuals`` of the controls run ``d`` read from ``path``."""
    if not isinstance(d, dict) or "per_m" not in d and "ranks" not in d:
        raise L2sInputError(f"{path}: not a `bench run` or `bench tp` result")
    if d.get("dry"):
        raise L2sInputError(f"{path}: a --dry result (no GPU step times) cannot be controls")
    if run is not None:
        check_controls_run(d, path, run, run_path)
    try:
        res = residuals(result_rows(d, prof), run_control_kind(d))
    except L2sInputError as e:
        raise L2sInputError(f"{path}: {e}") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        raise L2sInputError(f"{path}: not a usable controls run ({why})") from None
    if not res:
        raise L2sInputError(f"{path}: no dispatch-control arm ({CONTROL_PREFIX}NAME) "
                            "with an A/A arm beside it (run it with --validation --controls)")
    bad = [f"{a} at M={M}" for (a, M), r in res.items() if not math.isfinite(r)]
    if bad:
        raise L2sInputError(f"{path}: the control of {bad[0]} has no finite residual "
                            "(a step time that is not a number)")
    return res


def pooled_control_residuals(paths: list[str], prof, run: dict | None = None,
                             run_path: str = "") -> Residuals:
    """The mean, per (arm, M), of ``control_residuals`` over the controls
    runs ``paths`` (each checked against ``run`` as there): one run's
    residual carries that run's noise, the mean of several less of it.
    Raises ``L2sInputError`` for what ``control_residuals`` raises, a run
    given twice (by path or by its no-prefetch rounds), runs with different
    kinds of controls, or an (arm, M) one of them lacks."""
    if len(set(paths)) != len(paths):
        raise L2sInputError(f"a controls run is given twice: {', '.join(paths)}")
    got = []
    seen: dict = {}
    for p in paths:
        d = read_json_file(p)
        got.append((p, _residuals_of(d, p, prof, run, run_path)))
        rounds = none_rounds(d)  # the same run under two names (a copy, a link, ./)
        if rounds in seen:
            raise L2sInputError(f"{p}: the same run as {seen[rounds]} (the same no-prefetch "
                                "rounds): pool different runs")
        seen[rounds] = p
    kinds = {r.kind for _, r in got}
    if len(kinds) > 1:
        shown = ", ".join(sorted(kinds))
        raise L2sInputError(f"the controls runs have different kinds of controls ({shown}): "
                            "pool runs of one kind")
    keys = set(got[0][1])
    for p, r in got[1:]:
        missing = sorted(keys ^ set(r))
        if missing:
            arm, M = missing[0]
            raise L2sInputError(f"{p}: its controls cover other (arm, M) pairs than "
                                f"{got[0][0]}'s (first: {arm} at M={M})")
    return Residuals({k: statistics.fmean(r[k] for _, r in got) for k in keys},
                     kind=kinds.pop())


def pooled_controls(paths, prof, run: dict, run_path: str) -> tuple | None:
    """``(residuals, source)`` that the validations take as ``controls``:
    ``pooled_control_residuals`` of the controls runs ``paths`` for the
    result ``run`` (read from ``run_path``) and the runs' names joined by
    " + "; None without ``paths``. Raises what that raises."""
    paths = list(paths)
    if not paths:
        return None
    return pooled_control_residuals(paths, prof, run, run_path), " + ".join(paths)


def none_rounds(d: dict) -> tuple:
    """The no-prefetch arm's rounds per M (us) of a ``bench run`` or ``bench
    tp`` result ``d``: what tells one run from another (the same run under
    two names has the same rounds)."""
    if d.get("kind") == "l2sched bench tp":
        return tuple(tuple(tp_validation.arm_rounds(d, str(M), "none") or ())
                     for M in d.get("tokens", []))
    return tuple(tuple(m.get("arms", {}).get("none", {}).get("graph_step_us_all") or ())
                 for _, m in sorted(d.get("per_m", {}).items()))


#: The machine key of a bench result that records CUDA_DEVICE_MAX_CONNECTIONS
#: (results before session 8 of 2026-12-01 lack it: not checked).
QUEUES_KEY = "cuda_device_max_connections"


def _machine_of(d: dict) -> dict:
    """The machine record of a ``bench run`` result, or of rank 0 of a
    ``bench tp`` result."""
    if d.get("kind") == "l2sched bench tp":
        ranks = d.get("ranks") or [{}]
        return ranks[0].get("machine") or {}
    return d.get("machine") or {}


def check_controls_run(d: dict, path: str, run: dict, run_path: str) -> None:
    """Raise ``L2sInputError`` naming ``path`` when the controls run ``d``
    cannot serve result ``run`` (``control_residuals``): another kind of
    benchmark, another hardware-queue setting where both record it
    (``QUEUES_KEY``), the same run (the same no-prefetch rounds), or a
    control made from other schedule text or overrides than ``run``'s arm of
    that name."""
    def kind(x):
        return "bench tp" if x.get("kind") == "l2sched bench tp" else "bench run"
    if kind(d) != kind(run):
        raise L2sInputError(f"{path}: a `{kind(d)}` result cannot be the controls of a "
                            f"`{kind(run)}` result ({run_path})")
    queues = [_machine_of(x).get(QUEUES_KEY, "unrecorded") for x in (d, run)]
    if "unrecorded" not in queues and queues[0] != queues[1]:
        raise L2sInputError(f"{path}: made with CUDA_DEVICE_MAX_CONNECTIONS={queues[0]}, "
                            f"{run_path} with {queues[1]} (None: CUDA's default): the "
                            "dispatch cost depends on it")
    if none_rounds(d) == none_rounds(run):
        raise L2sInputError(f"{path}: the same run as {run_path} (the same no-prefetch "
                            "rounds): controls must come from another run")
    arms = {a.get("name"): a for a in run.get("arms", [])}
    for c in d.get("arms", []):
        x = arms.get(control_of(c.get("name", "")))
        if not is_control(c.get("name", "")) or x is None:
            continue
        own = list(x.get("overrides", []))
        texts = (c.get("schedule_text"), x.get("schedule_text"))
        # the text is what ran (a bench-dir schedule's path is a temporary
        # one); comments may differ between runs of the same schedule
        same = (schedule_code(texts[0]) == schedule_code(texts[1]) if None not in texts
                else c.get("path") == x.get("path"))
        if not same or c.get("overrides", [])[:len(own)] != own:
            raise L2sInputError(f"{path}: {c['name']} was made from another schedule or "
                                f"other overrides than {x['name']} in {run_path}")


def _tp_rows(d: dict):
    """``prof -> rows`` of a ``bench tp --validation`` result: the lint at
    its TP with the run's all-reduce table (``tp_validation``)."""
    def rows(prof):
        out = tp_validation.gain_rows(d, tp_validation.run_predictor(d, prof))[0]
        if not out:
            raise L2sInputError(f"the result has no {AA_ARM!r} arm (run bench tp with "
                                "--validation)")
        return out
    return rows


def _set_line(text: str, table: str, old: str, line: str) -> str | None:
    """``text`` with the first line of ``[table]`` that regex ``old``
    matches replaced by ``line`` (``line`` added at the table's end when
    none does); None when the profile has no ``[table]``."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    heads = [(i, name) for i, ln in enumerate(lines)
             if (name := profile_table_header(ln)) is not None]
    h = next((i for i, name in heads if name == table), None)
    if h is None:
        return None
    # the table's body: from the end of its header line to the next header
    start = offsets[h] + len(lines[h].rstrip("\r\n"))
    end = next((offsets[i] for i, _ in heads if i > h), len(text))
    body, n = re.subn(old, lambda _: line, text[start:end], count=1, flags=re.M)
    if not n:
        body = body.rstrip("\n") + f"\n{line}\n" + ("\n" if end < len(text) else "")
    return text[:start] + body + text[end:]


def _set_number(text: str, table: str, key: str, value: float, path: str) -> str:
    """``text`` with ``key = NUMBER`` inside ``[table]`` set to ``value``
    (added at the table's end when missing), without the comment lines right
    above the old one (they described the old value); raises
    ``L2sInputError`` when the profile has no ``[table]``."""
    out = _set_line(text, table, rf"^(?:#.*\n)*{re.escape(key)}\s*=.*$",
                    f"{key} = {value:.4g}")
    if out is None:
        raise L2sInputError(f"{path}: no [{table}] table (docs/devices.md)")
    return out


def _set_measured(text: str, key: str, probe: str, median: float) -> str:
    """``text`` with the ``[measured]`` record of ``key`` (``"table.key"``)
    replaced by ``{ probe = PROBE, median = MEDIAN }`` (added at the end of
    ``[measured]``; nothing when the profile has no ``[measured]``)."""
    line = f'"{key}" = {{ probe = {json.dumps(probe)}, median = {median!r} }}'
    out = _set_line(text, "measured", rf'^"{re.escape(key)}"\s*=.*$', line)
    return text if out is None else out


def profile_text(d: dict, profile: str = "", where: str = "the result") -> tuple[str, str]:
    """``(TOML text, where it came from)`` of the starting profile:
    ``profile`` (name or path), else the copy result ``d`` (read from
    ``where``) recorded. Raises ``L2sInputError`` when neither exists."""
    if profile:
        path = profile_path(profile)
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as e:
            raise L2sInputError(f"{path}: cannot read: {e.strerror or e}") from None
    if not isinstance(d, dict) or not d.get("device_profile_toml"):
        raise L2sInputError(f"{where}: records no device profile (device_profile_toml): "
                            "give --profile")
    return d["device_profile_toml"], "the profile recorded in the result"


def calibrated_profile_text(text: str, source: str, cal: dict, result: str) -> str:
    """Profile TOML ``text`` (from ``source``, for messages) with the
    calibrated terms and a first comment line naming ``result``. Raises
    ``L2sInputError`` when the profile lacks one of the fields."""
    text = _set_number(text, "latency", "fill_slowdown_scale", cal["scale"], source)
    grid = (f"grid {SCALE_GRID[0]:g}..{SCALE_GRID[-1]:g} step {SCALE_GRID[1] - SCALE_GRID[0]:g}"
            if len(SCALE_GRID) > 2 else "grid " + ", ".join(f"{g:g}" for g in SCALE_GRID))
    text = _set_measured(text, "latency.fill_slowdown_scale",
                         f"calibration: {result}, {grid}, "
                         + OBJECTIVE_RULES[cal.get("objective", "error")],
                         cal["scale"])
    if cal["set_aside"] is not None:
        text = _set_number(text, "l2", "set_aside_stream_slowdown", cal["set_aside"][0],
                           source)
        text = _set_measured(text, "l2.set_aside_stream_slowdown",
                             f"calibration: {result}, arm {cal['set_aside'][1]} (expert "
                             "stream per maximum set-aside)", cal["set_aside"][0])
    which = "fill_slowdown_scale" + (" and set_aside_stream_slowdown"
                                     if cal["set_aside"] else "")
    objective = (" --objective wrong-way-first"
                 if cal.get("objective") == "wrong-way-first" else "")
    return (f"# {which} calibrated by `python -m lab bench calibrate {result}{objective}`\n"
            + text)
