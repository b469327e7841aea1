"""The DeepSeek-V4 hook catalogue: the hook points a schedule may name, in
layer-timeline order, each with how it is installed on vLLM 0.33.0's
``DeepseekV4DecoderLayer`` (CUDA: ``models/deepseek_v4/nvidia/model.py``)
without editing vLLM (``Install``: file:line in the ``vllm==0.33.0`` wheel,
paths relative to ``vllm/``) and the graph modes whose Python runs it.

The names are GLM-5.3's and Qwen3-MoE's where the place in the layer is the
same, so a schedule's windows read the same across families.

Graph modes: ``DeepseekV4Model`` carries no ``@support_torch_compile``, so
the decoder layers run as Python in every mode (as GLM-5.3's do): each step
when ``eager``, once at capture under ``full`` or ``piecewise`` (the kernels
the hooks launched replay). The attention core is an eager break of a
breakable capture (``@eager_break_during_capture``,
``models/deepseek_v4/attention.py:737``); the two hooks around it wrap the
decorated method from outside, so with the V2 model runner they too run at
capture, and what they launch lies in the captured segments before and after
the break. With the V1 runner the whole attention preparation is one eager
break (``_prepare_and_attn_eager``, ``attention.py:323-328,542-570``), and
those two hooks run at every step."""

from __future__ import annotations

from dataclasses import dataclass

from l2sched.model.adapters.deepseek_v4.kinds import LayerKind
from l2sched.model.adapters.records import Install
from l2sched.units import GRAPH_MODES


@dataclass(frozen=True)
class HookPoint:
    """One hook point a schedule may name (``protocol.HookPointLike``):
    ``order`` in the layer's timeline, ``install`` the one way it is
    installed (every layer has the same attention and MoE modules around
    these hooks, so no hook has two installs and every hook exists in every
    kind)."""

    name: str
    order: int
    description: str
    install: Install
    graph_modes: tuple[str, ...] = GRAPH_MODES

    def exists_in(self, kind: LayerKind) -> bool:
        """True: every DeepSeek-V4 hook fires in every kind of layer."""
        return True

    def install_for(self, kind: LayerKind) -> Install:
        """The install in a layer of ``kind`` (the same in every kind)."""
        return self.install


_M = "models/deepseek_v4/nvidia/model.py:"
_A = "models/deepseek_v4/attention.py:"
_L = "model_executor/layers/linear.py:"
_R = "model_executor/layers/fused_moe/runner/moe_runner.py:"

#: The hook catalogue in timeline order.
HOOKS: tuple[HookPoint, ...] = (
    HookPoint("layer.entry", 0, "layer entry, before the attention "
              "hyper-connection mix (mHC pre) and attn_norm",
              Install("forward_pre_hook", "", _M + "714 (DeepseekV4DecoderLayer."
                      "forward)", note="args: x, positions, input_ids, ...")),
    HookPoint("attn.after_first_proj", 10, "after the fused q-lora/kv GEMM "
              "(fused_wqa_wkv)",
              Install("forward_hook", "attn.fused_wqa_wkv",
                      _A + "655 (" + _L + "616)")),
    HookPoint("attn.before_core", 20, "right before the sparse indexer and MLA "
              "attention core (after wq_b, q norm, rotary, KV insert and the "
              "compressors)",
              Install("wrap_before", "attn._sparse_indexer_and_attn",
                      _A + "640 (call), :737 (eager break)")),
    HookPoint("attn.after_core", 30, "right after the attention core",
              Install("wrap_after", "attn._sparse_indexer_and_attn",
                      _A + "640 (call), :737 (eager break)")),
    HookPoint("attn.pre_all_reduce", 40, "between the wo_b GEMM and its "
              "all-reduce",
              Install("wrap_after", "attn.wo_b.quant_method.apply",
                      _L + "1815 (GEMM), :1818 (all-reduce)",
                      note="every LinearBase owns its quant-method instance, so "
                           "the wrapper is per layer")),
    HookPoint("attn.post_all_reduce", 50, "after the wo_b all-reduce",
              Install("forward_hook", "attn.wo_b", _L + "1818")),
    HookPoint("moe.after_gate", 60, "after the router gate GEMM",
              Install("forward_hook", "ffn.gate", _R + "914",
                      note="the MoE runner holds and calls the block's gate")),
    HookPoint("moe.before_experts", 70, "right before the routed experts (the "
              "expert stream)",
              Install("wrap_before", "ffn.experts.routed_experts.forward_modular",
                      _R + "637", note="a modular MXFP4 backend; a monolithic "
                      "one calls forward_monolithic (:620-629) and this hook does "
                      "not fire")),
    HookPoint("moe.pre_all_reduce", 80, "between the MoE output (routed + shared) "
              "and its all-reduce",
              Install("wrap_before", "ffn.experts._maybe_reduce_final_output",
                      _R + "794 (call), :515 (all-reduce)")),
    HookPoint("moe.post_all_reduce", 90, "after the MoE all-reduce",
              Install("forward_hook", "ffn.experts", _R + "689 (MoERunner.forward)")),
    HookPoint("layer.exit", 100, "layer exit",
              Install("forward_hook", "", _M + "808")),
)

HOOKS_BY_NAME: dict[str, HookPoint] = {h.name: h for h in HOOKS}
