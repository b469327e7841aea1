"""What the vLLM plugin checks about the server's parallel and compilation
layout before it plans (``plugin._activate``), and the per-rank layers and
inventory under pipeline parallelism.

- ``parallel_layout``: TP size and rank, EP, PP size and rank of this
  process, and the ``TP rank r/n`` (``, PP rank p/m``) text of its log lines;
  ``text_config_dict``: the live model's text config as the adapters read it.
- ``refuse_split_batch``: dual-batch overlap and micro-batching run forwards
  in worker threads.
- ``refuse_compiled``: a module the adapter names in ``COMPILED_MODULES``
  (vLLM's ``@support_torch_compile`` classes) is compiled in this engine, or
  the model runner compiles the whole model (``STOCK_TORCH_COMPILE``): Dynamo
  would trace the hooks, not run them.
- ``refuse_pipeline_parallel``: PP > 1 for an adapter that refuses it
  (``PIPELINE_PARALLEL_REFUSAL``).
- ``own_layers`` / ``rank_inventory``: under PP each rank plans only the
  layers it runs (vLLM builds the others as ``PPMissingLayer``
  placeholders, ``model_executor/models/utils.py`` ``make_layers``).

Every refusal raises ``L2sPluginError`` (the plugin's one ``prefetch OFF``
line). vLLM is imported only inside the functions that need it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from l2sched.attrs import resolve_path
from l2sched.errors import L2sError, L2sPluginError
from l2sched.model.adapters.protocol import optional_member
from l2sched.model.inventory import analytical_inventory, live_inventory

#: How to serve a compiled model with the plugin: compilation mode NONE keeps
#: FULL CUDA graphs for decode (vLLM 0.33.0 turns FULL_AND_PIECEWISE into
#: FULL_DECODE_ONLY without compilation: ``config/vllm.py:1129-1146``,
#: ``config/compilation.py:80-85``); ``--enforce-eager`` also drops them.
SERVE_UNCOMPILED = ("serve with --compilation-config '{\"mode\": 0}' (mode NONE; decode "
                    "keeps FULL CUDA graphs) or --enforce-eager")


@dataclass(frozen=True)
class Layout:
    """The parallel layout of one process: TP size ``tp`` and rank
    ``tp_rank``, ``ep`` (expert parallelism, TP > 1), PP size ``pp`` and
    rank ``pp_rank``."""

    tp: int
    tp_rank: int
    ep: bool = False
    pp: int = 1
    pp_rank: int = 0

    @property
    def rank_txt(self) -> str:
        """``TP rank r/n``, with ``, PP rank p/m`` under pipeline
        parallelism: the head of every plugin line of this rank."""
        pp = f", PP rank {self.pp_rank}/{self.pp}" if self.pp > 1 else ""
        return f"TP rank {self.tp_rank}/{self.tp}{pp}"


def parallel_layout(vllm_config) -> Layout:
    """The ``Layout`` of this process, from vLLM's process groups and
    ``vllm_config.parallel_config``."""
    from vllm.distributed import (
        get_tensor_model_parallel_rank,
        get_tensor_model_parallel_world_size,
    )

    tp = get_tensor_model_parallel_world_size()
    rank = get_tensor_model_parallel_rank()
    pc = getattr(vllm_config, "parallel_config", None)
    ep = bool(getattr(pc, "enable_expert_parallel", False)) and tp > 1
    pp = int(getattr(pc, "pipeline_parallel_size", 1) or 1)
    pp_rank = 0
    if pp > 1:
        from vllm.distributed import get_pp_group

        pp_rank = get_pp_group().rank_in_group
    return Layout(tp, rank, ep, pp, pp_rank)


def text_config_dict(vllm_config) -> dict | None:
    """The live model's Hugging Face text config (``model_config.
    hf_text_config``) as a dict, with every ``attribute_map`` alias the model
    code reads set to its value: transformers >= 5 writes Qwen3-MoE's
    ``num_experts`` as ``num_local_experts`` in ``to_dict()``
    (``Qwen3MoeConfig.attribute_map``; vLLM's ``qwen3_moe.py`` reads
    ``config.num_experts``), and an adapter's config keys are the names the
    checkpoint's ``config.json`` and vLLM's model code use. ``None`` without
    a model config."""
    hf = getattr(getattr(vllm_config, "model_config", None), "hf_text_config", None)
    if hf is None:
        return None
    out = hf.to_dict()
    for alias, name in (getattr(hf, "attribute_map", None) or {}).items():
        if alias not in out and name in out:
            out[alias] = out[name]
    return out


def refuse_split_batch(vllm_config) -> None:
    """Raise ``L2sPluginError("unsupported layout")`` when dual-batch overlap
    (``enable_dbo``) or micro-batching (``ubatch_size > 1``) is on: vLLM
    0.33.0's ubatch wrapper (``v1/worker/gpu_ubatch_wrapper.py``) runs each
    micro-batch's forward in its own thread while the main thread holds the
    capture, and a plan's fills are one sequence per forward on one side
    stream (each micro-batch would fetch the same layers again, racing the
    other's fork and join)."""
    pc = getattr(vllm_config, "parallel_config", None)
    dbo = bool(getattr(pc, "enable_dbo", False))
    ubatch = int(getattr(pc, "ubatch_size", 0) or 0)
    if dbo or ubatch > 1:
        raise L2sPluginError(
            "unsupported layout", f"micro-batching (enable_dbo={dbo}, "
            f"ubatch_size={ubatch}) runs model forwards in worker threads; l2sched "
            "prefetches for one forward thread (serve without --enable-dbo / "
            "--ubatch-size)")


def compiled_module(model, adapter, vllm_config) -> tuple[str, str] | None:
    """``(what, mode)`` when vLLM compiles code the plan hooks into with
    ``torch.compile`` in this engine, else ``None``. ``mode``: the name of
    ``compilation_config.mode``; ``what``: the compiled module's class, or
    ``the whole model``.

    ``STOCK_TORCH_COMPILE``: the model runner compiles the whole model after
    loading (``v1/worker/gpu/model_runner.py:555``; vLLM keeps its own NVTX
    hooks out in that mode because Dynamo would trace them,
    ``v1/worker/gpu_model_runner.py:3803``). Otherwise a module at one of the
    adapter's ``COMPILED_MODULES`` paths is compiled unless vLLM's decorator
    set its ``do_not_compile`` (modes NONE and STOCK, an ignored class, an
    ``enable_if`` that said no: ``compilation/decorators.py:411-416``);
    without that attribute (another vLLM), any mode but NONE counts."""
    cc = getattr(vllm_config, "compilation_config", None)
    mode = getattr(cc, "mode", None)
    name = getattr(mode, "name", None) or ("NONE" if not mode else str(mode))
    if name == "STOCK_TORCH_COMPILE":
        return "the whole model", name
    for path in optional_member(adapter, "COMPILED_MODULES"):
        try:
            mod = resolve_path(model, path)
        except AttributeError:
            continue
        if not getattr(mod, "do_not_compile", name == "NONE"):
            return type(mod).__name__, name
    return None


def refuse_compiled(model, adapter, vllm_config) -> None:
    """Raise ``L2sPluginError("unsupported compilation")`` when
    ``compiled_module`` finds compiled code: vLLM compiles it with
    ``fullgraph=True`` and drops every guard (``compilation/wrapper.py:
    120-171``), so Dynamo inlines the forward hooks and wrapped methods of
    its submodules once. A hook that launches a fill (ctypes, CUDA streams,
    a CuTe DSL kernel) is unsupported by Dynamo, which ``fullgraph`` turns
    into a compile error at vLLM's first forward; one that only touches
    Python objects is traced, its decisions (the step gate) frozen at trace
    time. Either way the hooks do not run at each step as the plan assumes."""
    found = compiled_module(model, adapter, vllm_config)
    if found is not None:
        what, mode = found
        raise L2sPluginError(
            "unsupported compilation", f"vLLM compiles {what} with torch.compile "
            f"(compilation_config mode {mode}), which traces l2sched's hooks instead "
            f"of running them at every step; {SERVE_UNCOMPILED}")


def refuse_pipeline_parallel(adapter, layout: Layout) -> None:
    """Raise ``L2sPluginError("unsupported layout")`` at PP > 1 when the
    adapter refuses pipeline parallelism (its ``PIPELINE_PARALLEL_REFUSAL``
    says why)."""
    refusal = optional_member(adapter, "PIPELINE_PARALLEL_REFUSAL")
    if layout.pp > 1 and refusal:
        raise L2sPluginError("unsupported layout", f"pipeline parallel size "
                             f"{layout.pp}: {refusal}")


def own_layers(layers) -> range:
    """The indices of the decoder layers this rank runs: all but vLLM's
    ``PPMissingLayer`` placeholders (the layers of other PP ranks), one
    contiguous range (``make_layers``). Raises ``L2sPluginError`` when they
    are not contiguous or there are none."""
    from vllm.model_executor.models.utils import PPMissingLayer

    mine = [i for i, layer in enumerate(layers) if not isinstance(layer, PPMissingLayer)]
    if not mine or mine != list(range(mine[0], mine[-1] + 1)):
        raise L2sPluginError("unsupported layout", f"this rank's decoder layers "
                             f"{mine} are not one contiguous range")
    return range(mine[0], mine[-1] + 1)


def rank_inventory(layers, own: range, model_config, layout: Layout, model_name: str,
                   adapter):
    """The inventory a PP rank plans with: the live tensors of its ``own``
    layers, the other ranks' layers from the analytical inventory of
    ``model_config`` (vLLM's ``hf_text_config``) at the same TP/EP rank, so
    layer indices stay those of the schedule and the lint simulates the
    whole model. With ``own`` covering every layer: the live inventory.
    Raises ``L2sPluginError`` when the config does not give the inventory or
    its layer kinds differ from the live layers'."""
    live = live_inventory([layers[i] for i in own], layout.tp, layout.ep,
                          layout.tp_rank, model_name=model_name, adapter=adapter.NAME)
    if len(own) == len(layers):
        return live
    try:
        ana = analytical_inventory(model_config or {}, layout.tp, layout.ep,
                                   layout.tp_rank, adapter=adapter.NAME)
    except (L2sError, ValueError, KeyError) as e:
        raise L2sPluginError("pipeline parallel", "cannot build the inventory of the "
                             f"other ranks' layers from the model config: {e}") from None
    if len(ana.layers) != len(layers) or list(map(str, ana.kinds[own.start:own.stop])) \
            != list(map(str, live.kinds)):
        raise L2sPluginError("pipeline parallel", "the model config's layers differ "
                             f"from the live model's (layers {own.start}-{own.stop - 1} "
                             "of this rank)")
    return dataclasses.replace(
        live, kinds=ana.kinds[:own.start] + live.kinds + ana.kinds[own.stop:],
        layers=ana.layers[:own.start] + live.layers + ana.layers[own.stop:], _index={})
