"""The fit stage: ``l2sched fit`` searches the schedule the lint's model
predicts fastest for a device profile, and answers "no prefetch" when no
schedule's lower-bound gain beats the noise floor.

- ``space``: per layer kind and hook point, the weight bytes a window could
  fetch (``Stream``) and the candidate schedule (``Candidate``, chains of
  windows joined by ``carry``), rendered through the language's formatter;
- ``bound``: the pessimistic device-profile variants of the lower
  confidence bound, and the A/A noise floors;
- ``evaluate``: one candidate linted at every M and variant
  (``l2sched.lint.run_lint``), on a 9-layer surrogate of the model during
  the search; hard constraints;
- ``pool``: batches of evaluations in worker processes;
- ``caps``: how many bytes a fill at each hook point can land before the
  expert stream;
- ``search``: the greedy pass over hook points, the local search and the
  final judgement on the full model;
- ``output``: the fitted ``.l2s`` file with its header.

Imports the lint, compiler, language and model stages, never the CLI, and
neither torch nor vLLM. Docs: ``docs/fit.md``.
"""

from l2sched.fit.output import fit_text
from l2sched.fit.search import FitOptions, FitResult, Search

__all__ = ["FitOptions", "FitResult", "Search", "fit_text"]
