"""Numbers docs/fit.md quotes from the code, printed in the document's units.

Issue 43: every number of ``docs/fit.md`` is checked. Numbers a command
prints are checked against that command (``<!-- doc-test: numbers from:
CMD -->``, ``tests/test_docs.py``); the fit's constants and the predictions
the fit's model makes for a shipped schedule have no command of their own,
so this script prints them from the code that uses them:

- ``python tests/doc_numbers.py search``: the search's sizes, caps and cut-offs
  (``l2sched.fit.search``, ``caps``, ``space``) and the surrogate's layers
  and weights (``l2sched.fit.evaluate``);
- ``python tests/doc_numbers.py pessimism``: the fixed factors of the lower
  bound's ``low`` variant (``l2sched.fit.bound``);
- ``python tests/doc_numbers.py gains SCHEDULE [DEVICE]``: the schedule's
  predicted gain per M (us, + = faster), the median and the lower bound over
  the profile variants on the full model, as ``l2sched fit`` computes them,
  and how far the 9-layer surrogate's gains are from the full model's.

Run from the repository root (``tests/test_docs.py`` runs it there).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOKENS = (1, 4, 16, 64)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:g} MB"


def _size(name: str, size) -> str:
    steps = " and ".join(_mb(s) for s in size.steps)
    return (f"{name} search: chain starts {size.starts}, budgets per hook {size.budgets}, "
            f"beam {size.beam}, local-search rounds at most {size.rounds}, budget steps "
            f"{steps}, finalists {size.finalists}")


def search_numbers() -> list[str]:
    """The fit's search constants and the GLM-5.3-Flash surrogate."""
    from l2sched.device import load_device
    from l2sched.fit.bound import profile_variants
    from l2sched.fit.caps import CAP_MARGIN
    from l2sched.fit.evaluate import Evaluator, surrogate_layers
    from l2sched.fit.search import DEFAULT_SIZE, MIN_BUDGET, QUICK_SIZE
    from l2sched.fit.space import BUDGET_STEP, MIN_GAP_US
    from l2sched.model.config import default_config

    device = load_device("h200")
    ev = Evaluator(default_config("glm5next"), 4, profile_variants(device)[0][:1], TOKENS,
                   capacity=device.capacity_bytes, surrogate=True)
    kinds = [str(k) for k in ev.full_inventory.kinds]
    keep = surrogate_layers(kinds)
    return [
        f"cap margin x {CAP_MARGIN}; smallest budget {_mb(MIN_BUDGET)}; "
        f"budget step {_mb(BUDGET_STEP)}",
        f"op gap cut-off {MIN_GAP_US} us",
        _size("default", DEFAULT_SIZE),
        _size("quick", QUICK_SIZE),
        f"surrogate of the {len(kinds)}-layer model: {len(keep)} layers "
        f"{', '.join(map(str, keep))}",
        f"surrogate layer weights: {', '.join(f'{w:g}' for w in ev.weights)}",
    ]


def pessimism_numbers() -> list[str]:
    """The fixed factors of ``l2sched.fit.bound.DIRECTIONAL``."""
    from l2sched.fit.bound import DIRECTIONAL, MIN_PESSIMISTIC_SLOWDOWN

    out = [f"{key}: {direction}, x {factor} ({what})"
           for key, (direction, factor, what) in DIRECTIONAL.items()]
    return out + [f"smallest pessimistic slowdown {MIN_PESSIMISTIC_SLOWDOWN}"]


def gain_numbers(schedule: str, device_name: str | None = None) -> list[str]:
    """Per M: the median and lower-bound gain (us) of ``schedule`` on the
    full model, and the largest |surrogate - full| over variants and M."""
    from l2sched.device import load_device
    from l2sched.fit.bound import profile_variants
    from l2sched.fit.evaluate import Evaluator
    from l2sched.lang.resolve import load_schedule
    from l2sched.model.config import default_config

    resolved = load_schedule(schedule)
    device = load_device(device_name or resolved.device)
    variants, _ = profile_variants(device)
    config = (resolved.model_config if getattr(resolved, "model_config", None) is not None
              else default_config(resolved.model))
    text = Path(schedule).read_text(encoding="utf-8")
    runs = {}
    for surrogate in (False, True):
        runs[surrogate] = Evaluator(config, resolved.tp, variants, TOKENS,
                                    capacity=device.capacity_bytes, surrogate=surrogate,
                                    model=resolved.model).evaluate(text)
    full, sur = runs[False], runs[True]
    names = [v.name for v in variants]
    out = [f"{schedule} on {device.name}, variants {', '.join(names)}"]
    for m in TOKENS:
        med = full.gains["median"][m]
        low = min(full.gains[v][m] for v in names)
        out.append(f"M={m}: median {med:+.1f} us, lower bound {low:+.1f} us")
    diff = max(abs(sur.gains[v][m] - full.gains[v][m]) for v in names for m in TOKENS)
    out.append(f"largest |surrogate - full model| gain: {diff:.3f} us")
    return out


def main(argv: list[str]) -> int:
    """Print the numbers of ``argv[0]`` (``search``, ``pessimism`` or
    ``gains SCHEDULE [DEVICE]``); exit 2 on other arguments."""
    if argv[:1] == ["search"] and len(argv) == 1:
        lines = search_numbers()
    elif argv[:1] == ["pessimism"] and len(argv) == 1:
        lines = pessimism_numbers()
    elif argv[:1] == ["gains"] and len(argv) in (2, 3):
        lines = gain_numbers(*argv[1:])
    else:
        print("usage: python tests/doc_numbers.py search | pessimism | "
              "gains SCHEDULE [DEVICE]", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
