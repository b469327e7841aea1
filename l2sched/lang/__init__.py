"""The language stage: ``.l2s`` text -> a resolved ``Schedule``.

``syntax`` (Lark grammar ``grammar/l2s.lark`` -> the typed AST of ``nodes``,
with spans), ``formatter`` (the canonical layout ``l2sched fmt`` writes),
``overrides`` (``set`` lines and ``--set``), ``values`` (sizes, settings,
layer selectors), ``resolve`` (``extends`` chains, merging, name checks)
and ``schedule`` (the resolved ``Schedule`` and ``Window``).
"""
