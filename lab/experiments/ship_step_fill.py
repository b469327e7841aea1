"""Write a ``step_fill`` probe record into a shipped device profile.

    python lab/experiments/ship_step_fill.py STATE.json[.gz] [--profile TOML]
        [--out TOML] (from the repository root, l2sched importable)

The shipped ``h200`` profile merges several probe runs (its header says
which), so no single probe state regenerates it; this takes the
``step_fill`` record of one ``l2sched profile`` state and changes only what
that probe derives, the way ``l2sched profile`` writes it:

- each fill kernel's ``landed``/``effect`` = the reference kernel's times
  its step ratio (``profile_step.scale_landed``), with the
  ``fill.MODE.step_ratio`` / ``fill.MODE.effect`` records;
- each op's ``step_m``/``step_gap_us`` (``bench.profile_gaps``), computed
  against the profile's own op table (any step gaps in it are dropped
  first), with an ``ops.KIND.OP.step_gap_us`` record.

Everything else (comments included) stays. The result is parsed before it is
written (``l2sched.device``), and written atomically; ``[fill] default`` is
checked against the profile's rule and reported, not changed.
"""

from __future__ import annotations

import argparse
import re
import sys

from l2sched.bench import read_json_file
from l2sched.profile.gaps import gap_probe_text, step_gaps, window_scale_records
from l2sched.profile.step_fill import apply_step_fill, check_step_fill
from l2sched.bench.step import MODEL
from l2sched.profile.write import default_fill_mode, toml_value
from l2sched.errors import L2sError
from l2sched.files import check_output_path, write_text_atomically
from l2sched.lang.resolve import load_schedule_text
from l2sched.device import load_device_text, profile_path, read_profile_text

_GAPS = re.compile(r", step_m = \[[^\]]*\], step_gap_us = \[[^\]]*\](?= \})")


def _measured_line(key: str, rec: dict) -> str:
    return f'"{key}" = {toml_value(rec)}'


def _with_measured(lines: list[str], records: list[str]) -> list[str]:
    """``lines`` (a profile's) with ``records`` at the end of its
    ``[measured]`` table (a new one at the end of the file without one)."""
    heads = [i for i, ln in enumerate(lines) if re.match(r"^\s*\[[^\[]", ln)]
    at = next((i for i in heads if lines[i].strip() == "[measured]"), None)
    if at is None:
        while lines and lines[-1] == "":
            lines.pop()
        return lines + ["", "[measured]"] + records + [""]
    end = next((i for i in heads if i > at), len(lines))
    while end > at + 1 and lines[end - 1] == "":
        end -= 1
    return lines[:end] + records + lines[end:] + ([""] if lines[-1] != "" else [])


def ship(text: str, step: dict, shown: str) -> tuple[str, list[str]]:
    """``(new profile text, notes)``: ``text`` with ``step``'s derived numbers."""
    text = _GAPS.sub("", text)
    prof = load_device_text(text, shown)
    probed = load_schedule_text(step["schedule"], "<step_fill>", []).device
    if probed != prof.name:
        raise L2sError(f"{shown}: the step_fill record was measured with device profile "
                       f"{probed!r} (its schedule's `device`), not {prof.name!r}: ship it into "
                       "that profile")
    modes = {m: {"landed": [list(p) for p in fm.landed], "effect": fm.effect}
             for m, fm in prof.fill_modes.items()}
    measured: dict = {}
    apply_step_fill(modes, step, measured)
    gaps = step_gaps(step, prof)
    lines = text.split("\n")
    section = ""
    out = []
    for line in lines:
        head = re.match(r"^\[(.+)\]\s*$", line)
        if head:
            section = head.group(1)
        m = re.match(r'^"([^"]+)" = \{ m = ', line)
        if section.startswith(f'ops.{MODEL}."') and m:
            kind = section[len(f'ops.{MODEL}."'):-1]
            per = gaps.get((kind, m.group(1)))
            if per is not None:
                ms = sorted(per)
                line = (line[:-2] + f", step_m = {toml_value(ms)}, step_gap_us = "
                        f"{toml_value([per[M]['gap_us'] for M in ms])} }}")
        fm = re.match(r"^fill\.(\w+)$", section)
        mode = fm.group(1) if fm else None
        if mode and f"fill.{mode}.step_ratio" in measured:
            if line.startswith("landed = "):
                line = f"landed = {toml_value(modes[mode]['landed'])}"
            elif line.startswith("effect = "):
                line = f"effect = {modes[mode]['effect']}"
        out.append(line)
    for (kind, op), per in gaps.items():
        ms = sorted(per)
        measured[f"ops.{kind}.{op}.step_gap_us"] = {
            "probe": gap_probe_text(per), "median": per[ms[len(ms) // 2]]["gap_us"]}
    measured.update(window_scale_records(gaps))
    keys = {f'"{k}" = ' for k in measured}
    out = [ln for ln in out if not any(ln.startswith(k) for k in keys)]
    new = "\n".join(_with_measured(out, [_measured_line(k, v) for k, v in measured.items()]))
    got = load_device_text(new, shown)  # raises on anything malformed
    rule = default_fill_mode({m: {"effect": fm.effect, "slowdown": fm.slowdown}
                              for m, fm in got.fill_modes.items()}, got)
    notes = [f"{kind} {op}: step gap " + " ".join(
        f"M={M} {r['gap_us']:.2f} (table {prof.op_times(MODEL)[(kind, op)].at(M)[0] - prof.op_times(MODEL)[(kind, op)].at(M)[1]:.2f})"
        for M, r in sorted(per.items())) for (kind, op), per in gaps.items()]
    notes += [f"fill.{k.split('.')[1]}.step_ratio {v['median']:.3f}"
              for k, v in measured.items() if k.endswith("step_ratio")]
    notes += [f"{k}: {v['probe']}" for k, v in measured.items()
              if k.startswith("step_fill.") and k.endswith(".scale")]
    if rule != got.fill_default:
        notes.append(f"NOTE: the profile's rule now picks {rule!r}; [fill] default is "
                     f"{got.fill_default!r} (not changed)")
    return new, notes


def _step_record(path: str) -> dict:
    """The checked ``results.step_fill`` record of the state at ``path``."""
    state = read_json_file(path, "profile state")
    results = state.get("results") if isinstance(state, dict) else None
    step = results.get("step_fill") if isinstance(results, dict) else None
    if not isinstance(step, dict) or "skipped" in step:
        raise L2sError(f"{path}: no results.step_fill record (or a skipped one)")
    try:
        check_step_fill(step)
    except ValueError as e:
        raise L2sError(f"{path}: results.step_fill{e}") from None
    if not isinstance(step.get("per_m"), dict) or not isinstance(step.get("schedule"), str):
        raise L2sError(f"{path}: results.step_fill has no per_m or schedule")
    if not any(r.get("ops_us") for r in step["per_m"].values()):
        raise L2sError(f"{path}: results.step_fill has no per-op records (per_m.M.ops_us): a "
                       "record from before they were kept; nothing to ship")
    return step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("state")
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--out", default=None, help="default: the profile itself")
    a = ap.parse_args()
    try:
        path = profile_path(a.profile)
        out = str(path) if a.out is None else a.out
        check_output_path(out, protect=[a.state])  # before any work
        step = _step_record(a.state)
        text = read_profile_text(path)
        new, notes = ship(text, step, str(path))
        write_text_atomically(out, new, protect=[a.state])
    except L2sError as e:
        print(f"ship_step_fill: {e}", file=sys.stderr)
        return 1
    for n in notes:
        print(n)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
