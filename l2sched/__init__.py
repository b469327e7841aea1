"""l2sched: write, check and ship L2-cache weight-prefetch schedules for LLM decode.

The pipeline, one package per stage, bottom up; each imports only the stages
below it (the import-linter layers contract in ``pyproject.toml`` is the
truth; ``tests/test_layers.py`` checks this list and README's table follow it):

- ``device``: one GPU's numbers from a device profile TOML, knowing no model,
  and a fill kernel's launch shape fitted to its limits (``kernel_spec``);
- ``model``: facts about the model (``adapters``, ``config``, ``inventory``,
  ``device_ops``), as data with sources;
- ``lang``: ``.l2s`` text -> typed AST -> a resolved ``Schedule``;
- ``compiler``: schedule + inventory -> ``Plan`` of byte ranges per hook point;
- ``runtime``: gates, the side stream, the fill kernel, hooks in a module
  tree (``sites.install_plan``);
- ``lint``: the decode-step graph, its simulation and the rules (a sibling
  of ``runtime``: neither imports the other);
- ``fit``: the search for the schedule the lint predicts fastest;
- ``bench``: the GLM-shaped decode step and its timing (``bench run|tp``);
- ``vllm``: the vLLM general plugin (a sibling of ``profile``: neither
  imports the other);
- ``profile``: the probes that measure a box into a device profile;
- ``cli``: the ``l2sched`` command (``python -m l2sched``).

Base modules every stage may use: ``errors`` (one error family with spans),
``units`` (sizes, alignment, graph modes, report formatting), ``files``
(safe reads and atomic writes), ``attrs`` (dotted-path lookup).
"""

__version__ = "0.1.0"
