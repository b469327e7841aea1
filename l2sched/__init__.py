"""l2sched: write, check and ship L2-cache weight-prefetch schedules for LLM decode.

Pipeline, one module per stage: ``syntax`` (Lark grammar -> typed AST in
``ast``), ``semantic`` (extends, overrides, name resolution), ``adapters``
(model facts: layer kinds, hook catalogue, inventory), ``lint`` (networkx
timeline graph and rules), ``compile`` (plan), ``runtime``/``kernel``/
``install`` (GPU side), ``vllm_plugin`` and ``cli``.
"""

__version__ = "0.1.0"
