"""The lint stage: a static overlap lint of a schedule, before anything runs.

Pipeline: resolve the schedule (``lang``), build the analytical inventory
(``model.inventory``), compile the plan (``compiler``), build the
decode-step graph (``graph``), simulate it on the device profile with and
without fills (``simulate``), run the rule families (``rules``) and report
(``report``). ``timeline`` writes a Chrome/Perfetto trace and an SVG Gantt;
``calibrate`` replaces modeled op durations with a profiler trace's.
``run`` holds the entry points, re-exported here.

Pure Python: imports neither torch nor vLLM, nor networkx on the lint path
(a test checks ``sys.modules``).
"""

from l2sched.lint.run import LintRun, lint_path, run_lint

__all__ = ["LintRun", "lint_path", "run_lint"]
