"""Which Qwen3-MoE decode ops vLLM 0.33.0 launches with programmatic
dependent launch (PDL): none that its Python shows (``PDL_LAUNCHES`` is
empty; lint rule ``L2S113``). ``model_executor/models/qwen3_moe.py``
builds ``GateLinear`` without ``out_dtype`` and nothing sets it
(``set_out_dtype`` is called by ``models/deepseek_v2.py`` only), so the
router gate's PDL tiers (``gate_linear.py`` ``GateLinear.forward`` tiers 1
and 3 need an fp32 output) are off and it runs ``F.linear``. The norms,
rotary, top-k and all-reduce are C++ or library kernels whose launch
attributes are not visible in vLLM's Python, so the lint says nothing
about them."""

from __future__ import annotations

from l2sched.model.adapters.records import PdlLaunch

PDL_LAUNCHES: tuple[PdlLaunch, ...] = ()
