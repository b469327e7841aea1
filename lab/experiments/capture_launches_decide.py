"""Issue 36: the decision rule of docs/runtime.md ("Fills as nodes of the model
stream's capture"), written before the runs, applied by code so that nothing is
chosen after seeing the numbers.

``run1 TABLE.json [TABLE.json ...]``: from run 1's tables (``capture_launches_table
--json``, or the bench run JSON: every capture launch, M = 4 and 16, each process
with its own ``fork`` arms) the candidate, or none: a choice whose lone
windows A, B and C at 0.5 MB are each within -floor of ``none`` at every M and
whose whole schedule gains at least ``fork``'s minus the floor at every M; among
candidates the largest whole-schedule gain summed over M. Prints the verdict
per choice and, last, ``candidate: NAME`` or ``candidate: none``; exit 0.

``run2 CANDIDATE TABLE_A.json RUN_B.json``: (a) run 2a's table (``fork`` and
the candidate, M = 4 and 16): every lone window of the candidate within -floor;
(b) run 2b (``bench run --aa`` of the fitted idle-interval schedule with the
variant ``cand:launch=CANDIDATE``, M = 1, 4, 16, 64): the candidate's gain at
least 90% of the run's ideal gain and never below -floor at every M (the
issue's marks), and at least ``compiled``'s (the schedule with ``fork``) minus
the floor at every M (the default changes if (a) holds and this holds).
Prints each check with its numbers and ``default: CANDIDATE`` or
``default: fork``; exit 0.

Gains in us (+ = faster), floor = ``aa_noise_floor`` of ``none`` and
``none-aa`` of the same process and M (``capture_launches_table.gains``).
"""

from __future__ import annotations

import argparse
import json

from lab.experiments.capture_launches_table import gains

LONE = ("A0.5", "B0.5", "C0.5")
#: The decode tokens M each run must have (a run cut short misses the rest).
RUN1_TOKENS = ("4", "16")
RUN2B_TOKENS = ("1", "4", "16", "64")
#: The issue's mark: the schedule's gain over the ideal gain at every M.
IDEAL_SHARE = 0.90


def _launches(table: dict) -> list[str]:
    """The capture launches of the ``WINDOW-LAUNCH`` arms, in arm order."""
    seen: list[str] = []
    for rec in table.values():
        for k in rec["arms"]:
            w, _, launch = k.partition("-")
            if w in LONE + ("full",) and launch and launch not in seen:
                seen.append(launch)
    return seen


def lone_within_floor(table: dict, launch: str) -> list[str]:
    """The misses of rule 1's (and 2a's) first half for ``launch``: each lone
    window's gain at each M against -floor; a missing arm is a miss."""
    misses = [f"M={m} not run" for m in RUN1_TOKENS if m not in table]
    for m, rec in table.items():
        floor = rec["floor_us"]
        for w in LONE:
            g = rec["arms"].get(f"{w}-{launch}")
            if g is None or floor is None or g < -floor:
                misses.append(f"{w} at M={m}: "
                              f"{'not run' if g is None else f'{g:+.1f}'} us "
                              f"(floor {floor if floor is None else round(floor, 1)} us)")
    return misses


def decide_run1(*tables: dict) -> tuple[str | None, dict[str, list[str]]]:
    """Rule 1 on run 1's ``tables`` (``capture_launches_table.gains``, one per
    process, each judged against its own ``fork``): ``(candidate or None,
    {launch: misses})`` (no misses = a candidate)."""
    misses: dict[str, list[str]] = {}
    totals: dict[str, float] = {}
    for table, launch in [(t, la) for t in tables for la in _launches(t) if la != "fork"]:
        bad = lone_within_floor(table, launch)
        total = 0.0
        for m, rec in table.items():
            full, fork = rec["arms"].get(f"full-{launch}"), rec["arms"].get("full-fork")
            if full is None or fork is None or rec["floor_us"] is None:
                bad.append(f"full at M={m}: not run")
                continue
            total += full
            if full < fork - rec["floor_us"]:
                bad.append(f"full at M={m}: {full:+.1f} us < fork {fork:+.1f} - floor "
                           f"{rec['floor_us']:.1f}")
        misses[launch] = bad
        totals[launch] = total
    ok = [launch for launch, bad in misses.items() if not bad]
    return (max(ok, key=lambda launch: totals[launch]) if ok else None), misses


def judge_run2(candidate: str, table_a: dict, table_b: dict) -> tuple[bool, list[str]]:
    """Rule 2 on run 2a's table and run 2b's (``gains`` of each JSON):
    ``(the candidate becomes the default, report lines)``."""
    lines = []
    miss_a = lone_within_floor(table_a, candidate)
    lines.append(f"(a) lone windows of {candidate} within -floor: "
                 + ("yes" if not miss_a else "no: " + "; ".join(miss_a)))
    beats_fork = marks = all(m in table_b for m in RUN2B_TOKENS)
    if not beats_fork:
        lines.append(f"(b) M not run: {[m for m in RUN2B_TOKENS if m not in table_b]}")
    for m, rec in table_b.items():
        cand, fork = rec["arms"].get("cand"), rec["arms"].get("compiled")
        floor, ideal = rec["floor_us"], rec["ideal_us"]
        if cand is None or fork is None or floor is None:
            lines.append(f"(b) M={m}: an arm or the A/A arm is missing")
            beats_fork = marks = False
            continue
        share = cand / ideal if ideal else None
        mark = share is not None and share >= IDEAL_SHARE and cand >= -floor
        ge = cand >= fork - floor
        marks &= mark
        beats_fork &= ge
        lines.append(f"(b) M={m}: {candidate} {cand:+.1f} us, fork {fork:+.1f} us, floor "
                     f"{floor:.1f} us, ideal {'-' if ideal is None else f'{ideal:.1f}'} us "
                     f"({'-' if share is None else f'{share:.0%}'}): 90% mark "
                     f"{'met' if mark else 'missed'}; >= fork - floor: {'yes' if ge else 'no'}")
    lines.append(f"issue marks (90% of ideal, never below -floor) at every M: "
                 f"{'met' if marks else 'missed'}")
    return (not miss_a and beats_fork), lines


def _load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return data if "per_m" not in data else gains(data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r1 = sub.add_parser("run1")
    r1.add_argument("tables", nargs="+", help="run 1's bench run JSONs or their table JSONs")
    r2 = sub.add_parser("run2")
    r2.add_argument("candidate")
    r2.add_argument("table_a", help="run 2a's bench run JSON or its table JSON")
    r2.add_argument("run_b", help="run 2b's bench run JSON or its table JSON")
    a = p.parse_args(argv)
    if a.cmd == "run1":
        cand, misses = decide_run1(*map(_load, a.tables))
        for launch, bad in misses.items():
            print(f"{launch}: " + ("candidate" if not bad else "; ".join(bad)))
        print(f"candidate: {cand or 'none'}")
        return 0
    default, lines = judge_run2(a.candidate, _load(a.table_a), _load(a.run_b))
    print("\n".join(lines))
    print(f"default: {a.candidate if default else 'fork'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
