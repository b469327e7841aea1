"""The fitted ``.l2s`` file: a header comment (the profile it was fitted
for, the predicted gain per M with its lower bound, how the bound was made,
the command) above the schedule, laid out by the language's formatter
(``l2sched.lang.formatter.format_text``), so ``l2sched fmt --check`` is
clean. Nothing in it depends on the machine or the time of the run: the
same inputs give the same bytes.
"""

from __future__ import annotations

import re

from l2sched.fit.bound import AMBIGUOUS, MIN_PESSIMISTIC_SLOWDOWN
from l2sched.lint.noise import AA_NOISE_FLOOR_SOURCE
from l2sched.fit.space import Candidate, with_model_config
from l2sched.lang.formatter import format_file, format_text
from l2sched.model.adapters import DEFAULT_ADAPTER, get_adapter
from l2sched.device import DeviceProfile


def _generic(items: list[str]) -> list[str]:
    """Bound notes with fill kernels folded into ``fill.MODE``, deduplicated."""
    out: list[str] = []
    for item in items:
        g = re.sub(r"^fill\.(bulk|copy|load)\.", "fill.MODE.", item)
        key = g.split(":")[0]
        if key in AMBIGUOUS:
            g = f"{key}: low and high ends of {g.split(' end of ')[-1]}"
        if g.startswith(("fill.MODE.slowdown", "fill.MODE.gemm_slowdown")):
            g += f" (at least {MIN_PESSIMISTIC_SLOWDOWN:g})"
        if g not in out:
            out.append(g)
    return out


def _wrap(prefix: str, items: list[str], width: int = 96) -> list[str]:
    """Comment lines listing ``items`` after ``prefix``, wrapped at
    ``width`` characters."""
    lines, cur = [], prefix
    for i, item in enumerate(items):
        piece = item + ("," if i + 1 < len(items) else "")
        if len(cur) + 1 + len(piece) > width and cur.strip("# "):
            lines.append(cur)
            cur = "#     " + piece
        else:
            cur = f"{cur} {piece}" if cur else piece
    lines.append(cur)
    return lines


def profile_line(device_profile: DeviceProfile, device_arg: str) -> list[str]:
    """The header lines naming the profile and its provenance."""
    name = device_profile.name
    if device_arg != name:
        name = f"{name} ({device_arg})"
    if device_profile.is_measured:
        prov = device_profile.provenance
        what = (f"{prov.get('gpu', device_profile.description)}, measured by `l2sched profile` "
                f"on {prov.get('date', 'an unknown date')}")
        return [f"# Fitted for device profile {name}: {what}."]
    return [f"# Fitted for device profile {name}: ESTIMATE, unverified.",
            "# UNVERIFIED: the profile was not measured by `l2sched profile` on this "
            "GPU (estimate profile);",
            "# every prediction below, and the bound, is unverified until it is."]


def unmeasured_lines(result, tp: int) -> list[str]:
    """The header lines about terms not measured on the box
    (``fit.unmeasured``): why windows were withheld, or that the written
    ones are UNVERIFIED, and every unmeasured term the answer rests on."""
    out = []
    w = result.withheld
    if w is not None:
        n = sum(len(c.links) for c in w.candidate.chains)
        out += [f"# UNMEASURED: no windows written. The best candidate ({n} windows, "
                f"objective {w.objective:+.1f} us, lower bound per M "
                + " / ".join(f"{lb:+.1f}" for _m, _w, _med, lb, _f in w.rows)
                + " us) rests on:"]
        out += [f"#   {why}" for why in w.unmeasured_blocking]
        out += ["# `l2sched fit --allow-unmeasured` writes its windows, marked UNVERIFIED.",
                "#"]
    elif result.unmeasured_blocking:
        out += ["# UNVERIFIED (--allow-unmeasured): the gain rests on terms not measured "
                "on this box:"]
        out += [f"#   {why}" for why in result.unmeasured_blocking] + ["#"]
    if result.unmeasured:
        out += _wrap(f"# Not measured on this box (TP{tp}; docs/devices.md#where-every-"
                     "number-came-from):", list(result.unmeasured)) + ["#"]
    return out


def header_lines(result, device_profile: DeviceProfile, device_arg: str, command: str, tp: int,
                 floor_source: str, searched_set_aside: bool = True,
                 model_label: str = "",
                 set_aside_asked: str = "0") -> list[str]:
    """The comment lines above the fitted schedule; ``searched_set_aside``:
    whether the search chose the set-aside (``--set-aside search``);
    ``model_label``: the model fitted for (default: the default adapter's
    ``DEFAULT_MODEL_NAME (NAME)``); ``set_aside_asked``: the
    ``--set-aside`` value."""
    if not model_label:
        ad = get_adapter(DEFAULT_ADAPTER)
        model_label = f"{ad.DEFAULT_MODEL_NAME} ({ad.NAME})"
    lines = [f"# {model_label} TP{tp} weight-prefetch schedule written by "
             "`l2sched fit` (docs/fit.md).", *profile_line(device_profile, device_arg), "#"]
    lines += unmeasured_lines(result, tp)
    if result.candidate is None and result.withheld is None:
        best = ("every candidate was infeasible or lost more than the noise floor at "
                "some M" if result.best_rejected is None else
                f"the best candidate's lower bound was {result.best_rejected:+.1f} us")
        lines += ["# NO PREFETCH: no candidate's lower-bound gain beat the noise floor "
                  f"({result.floor:.1f} us);",
                  f"# {best}. This schedule has no windows: decode runs as without "
                  "l2sched."]
        if set_aside_asked == "max":
            lines.append("# --set-aside max was asked; without windows nothing is "
                         "reserved (set_aside 0).")
        lines.append("#")
    lines += [f"# Predicted decode-step time gain (us, + = faster; the lint's model on "
              f"the full {result.layers[1]}-layer step):",
              "#   M     weight  median    lower bound  noise floor"]
    for m, w, med, lb, floor in result.rows:
        lines.append(f"#   {m:<5} {w:<7g} {med:+8.1f}  {lb:+11.1f}  {floor:11.1f}")
    lines.append(f"# Objective (weighted sum of lower bounds): {result.objective:+.1f} us; "
                 f"noise floor (weighted sum): {result.floor:.1f} us.")
    measured = _generic(result.info.measured)
    fixed = _generic(result.info.fixed)
    lines.append("# Lower bound: the smallest gain over the profile variants "
                 f"{', '.join(result.variants)}.")
    if result.info.from_measurements:
        lines += _wrap("#   From recorded run-to-run spreads ([measured] p10/p90, [origin] "
                       "repeats):", measured)
    else:
        lines.append("#   NOT from measurements: the profile has no measured spreads; "
                     "fixed pessimism only.")
    lines += _wrap("#   Fixed pessimism (ASSUMPTION, not measured):", fixed)
    lines.append(f"# Noise floor: {floor_source}.")
    if result.candidate is not None and result.candidate.set_aside == "max":
        lines.append("# set_aside max: the model charges only the expert stream's measured "
                     "slowdown for the reservation (l2.set_aside_stream_slowdown; not "
                     "prefill throughput; docs/fit.md#caveats).")
    elif result.candidate is not None and not searched_set_aside:
        lines.append("# set_aside 0: not searched (the model charges a set-aside only "
                     "its expert-stream slowdown; docs/fit.md#caveats).")
    lines.append(f"# Search: {result.evaluations[0]} evaluations on the "
                 f"{result.layers[0]}-layer surrogate, {result.evaluations[1]} on the "
                 "full model.")
    lines.append(f"# Command: {command}")
    return lines


def fit_text(result, search, *, device_arg: str, command: str, name: str,
             floor_source: str = "", model_config: str | None = None) -> str:
    """The fitted schedule file: header and schedule (``search`` renders
    the body; ``model_config``: the value of its ``model_config`` line, the
    config fitted for, ``space.with_model_config``), canonical layout."""
    cand = result.candidate or Candidate("evict_last", "0", search.kernel0)
    tree = search.tree(cand, name)
    body = format_file(with_model_config(tree, model_config) if model_config else tree)
    src = floor_source or (f"A/A floors per M, {AA_NOISE_FLOOR_SOURCE}; other M: "
                           "the nearest measured M")
    ad = search.adapter
    label = (f"{ad.DEFAULT_MODEL_NAME} ({ad.NAME})" if search.opts.model_config is None
             else f"{ad.NAME} model of config {model_config}" if model_config
             else f"{ad.NAME} model of the --model-config file")
    head = header_lines(result, search.device_profile, device_arg, command, search.opts.tp, src,
                        searched_set_aside=search.opts.set_aside == "search",
                        model_label=label, set_aside_asked=search.opts.set_aside)
    notes = [f"# Fill kernel {mode} not searched: {why} (runtime.kernel.fit_spec)."
             for mode, why in sorted(getattr(search, "kernel_notes", {}).items())]
    at = next((i for i, ln in enumerate(head) if ln.startswith("# Search:")), len(head))
    head[at:at] = notes
    return format_text("\n".join(head) + "\n" + body)
