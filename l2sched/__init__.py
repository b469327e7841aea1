"""l2sched: write, check and ship L2-cache weight-prefetch schedules for LLM decode.

The pipeline, one package per stage, each importing only the stages below it
(the import-linter contract in ``pyproject.toml``):

- ``lang``: ``.l2s`` text -> typed AST -> a resolved ``Schedule``;
- ``model``: facts about the model (``adapters``, ``config``, ``inventory``)
  and the device (``devices``), as data with sources;
- ``compiler``: schedule + inventory -> ``Plan`` of byte ranges per hook point;
- ``lint``: the decode-step graph, its simulation and the rules;
- ``runtime``: gates, the side stream, the fill kernel, hooks in a module tree;
- ``vllm``: the vLLM general plugin; ``bench``: the GPU benchmarks;
- ``cli``: the ``l2sched`` command (``python -m l2sched``).

Base modules every stage may use: ``errors`` (one error family with spans),
``units`` (sizes, alignment, graph modes, report formatting), ``files``
(safe reads and atomic writes), ``attrs`` (dotted-path lookup).
"""

__version__ = "0.1.0"
