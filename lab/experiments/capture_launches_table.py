"""Issue 36: the table of a ``capture_launches.sh`` run (a ``bench run`` JSON):
per M, the gain of each (arm, capture launch) over ``none`` (median untimed
graph step of ``none`` minus the arm's, us; + = faster), the A/A noise floor
(``lab.bench.validation.aa_noise_floor`` of ``none`` and ``none-aa``) and the
compiled schedule's share of the ideal gain. Prints markdown; ``--json``
writes the same numbers.

Usage: python -m lab.experiments.capture_launches_table RUN.json [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics

from lab.bench.validation import aa_noise_floor

WINDOWS = ("A0.5", "B0.5", "C0.5", "full")


def gains(run: dict) -> dict:
    """``{M: {"none_us", "floor_us", "ideal_us", "arms": {arm: gain_us}}}``
    from a ``bench run`` result ``run``; arms without replays are left out.
    Raises ``ValueError`` when ``none`` has no untimed graph step times at some M
    (a ``--dry`` run replays nothing; a run cut short before its replays)."""
    out = {}
    for m, rec in run["per_m"].items():
        arms = rec["arms"]
        none = arms.get("none", {}).get("graph_step_us_all")
        if not none:
            raise ValueError(f"no untimed graph step times of arm 'none' at M={m} "
                             "(a --dry run replays nothing)")
        base = statistics.median(none)
        floor = (aa_noise_floor(none, arms["none-aa"]["graph_step_us_all"])
                 if "none-aa" in arms else None)
        out[m] = {"none_us": base, "floor_us": floor,
                  "ideal_us": rec.get("ideal", {}).get("ideal_gain_us"),
                  "arms": {k: base - statistics.median(a["graph_step_us_all"])
                           for k, a in arms.items()
                           if k != "none" and a.get("graph_step_us_all")}}
    return out


def markdown(table: dict) -> str:
    """One markdown table per M: rows = window arms, columns = capture
    launches found in the arm names (``WINDOW-LAUNCH``)."""
    lines = []
    for m, rec in table.items():
        arms = rec["arms"]
        launches = []
        for k in arms:
            w, _, launch = k.partition("-")
            if w in WINDOWS and launch and launch not in launches:
                launches.append(launch)
        floor = rec["floor_us"]
        ideal = rec["ideal_us"]
        lines += [f"### M = {m}: none {rec['none_us']:.1f} us, A/A floor "
                  f"{'-' if floor is None else f'{floor:.1f}'} us, ideal gain "
                  f"{'-' if ideal is None else f'{ideal:.1f}'} us", "",
                  "| arm | " + " | ".join(launches) + " |",
                  "|---|" + "---|" * len(launches)]
        for w in WINDOWS:
            cells = []
            for launch in launches:
                g = arms.get(f"{w}-{launch}")
                cells.append("-" if g is None else f"{g:+.1f}")
            lines.append(f"| {w} | " + " | ".join(cells) + " |")
        rest = {k: g for k, g in arms.items() if k.partition("-")[0] not in WINDOWS}
        lines += ["", "Other arms: " + ", ".join(f"{k} {g:+.1f}" for k, g in rest.items()), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        with open(a.run) as f:
            table = gains(json.load(f))
    except (OSError, ValueError) as e:  # JSONDecodeError (line and column) is a ValueError
        p.exit(2, f"{a.run}: {e}\n")
    print(markdown(table))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
