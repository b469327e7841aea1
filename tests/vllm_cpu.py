"""Build vLLM 0.33.0's real ``Glm5NextForCausalLM`` on a CPU-only host.

Reusable by every test that needs the real vLLM module tree (inventory,
plugin integration). Each shim below says which failure it removes
(construction on CPU needs a CPU platform, a sparse-attention backend and a
workspace manager; docs/sources.md#vllm-glm5next).

Use::

    from vllm_cpu import run_ranks, vllm_available

    def per_rank(ctx):            # module-level, so spawn can pickle it
        model = ctx.build()       # the real model, on ``ctx.device``
        return something_picklable(model)

    results = run_ranks(per_rank, config_dict, tp=4, ep=False)  # one per rank

``run_ranks`` spawns one process per TP rank (``multiprocessing`` spawn
context, so vLLM/torch state never leaks into the pytest process), joins a
gloo process group, runs ``fn(ctx)`` and returns the per-rank results in rank
order. Nothing here imports torch or vLLM in the calling process.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extras import TORCH_MISSING, VLLM_MISSING

#: Architecture and model type written into the temporary ``config.json``
#: (vLLM picks the model class from ``architectures``).
ARCHITECTURE = "Glm5NextForCausalLM"
MODEL_TYPE = "glm5_next_text"

#: Architecture -> (``model_type``, module and class vLLM 0.33.0 builds it
#: from): the models the tests build.
MODELS = {
    "Glm5NextForCausalLM": ("glm5_next_text", "vllm.models.glm5next",
                            "Glm5NextForCausalLM"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "vllm.model_executor.models.qwen3_moe",
                            "Qwen3MoeForCausalLM"),
    # the CUDA implementation (what an H200 serves), not the package's
    # platform pick (vllm/models/deepseek_v4/__init__.py picks cpu/ on CPU)
    "DeepseekV4ForCausalLM": ("deepseek_v4", "vllm.models.deepseek_v4.nvidia.model",
                              "DeepseekV4ForCausalLM"),
}


#: A tiny GLM-5.3 text config (4 layers: KDA+dense, KDA+MoE x2, MLA+MoE;
#: hidden 256, 8 experts) for the tests that build the real tree.
TINY_GLM = {
    "torch_dtype": "bfloat16", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 64, "q_lora_rank": 64,
    "qk_rope_head_dim": 0, "qk_nope_head_dim": 32, "v_head_dim": 32,
    "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "hidden_act": "silu",
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "pad_token_id": 0,
    "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
    "index_topk": 256, "index_head_dim": 128, "index_n_heads": 4,
    "index_kpool": 16, "linear_head_dim": 128, "linear_num_heads": 4,
    "linear_conv_kernel_dim": 4, "linear_lower_bound": -5.0, "hc_mult": 4,
    "hc_eps": 1e-6, "hc_sinkhorn_iters": 20, "swiglu_limit": 10.0, "mhc": True,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "mla_use_nope": True,
    "indexer_rope_interleave": True,
}


def vllm_available() -> tuple[bool, str]:
    """``(True, "")`` when ``vllm`` is importable in this interpreter, else
    ``(False, reason)``. Checks with ``importlib.util.find_spec`` only, so it
    neither imports vLLM nor torch."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False, VLLM_MISSING
    if importlib.util.find_spec("torch") is None:
        return False, f"torch is not installed in this interpreter ({TORCH_MISSING})"
    return True, ""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the gloo rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_model_dir(config: dict, directory: str,
                    architecture: str = ARCHITECTURE) -> str:
    """Write ``config`` as ``directory/config.json`` with the architecture
    (a key of ``MODELS``) and model type vLLM needs; returns ``directory``."""
    cfg = dict(config)
    cfg["architectures"] = [architecture]
    cfg["model_type"] = MODELS[architecture][0]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    return directory



def hook_target_problems(adapter: Any, model: Any) -> list[str]:
    """``layer I HOOK: TARGET`` for each hook install of ``adapter`` whose
    target does not resolve, on a decoder layer of the live ``model``, to
    what its mechanism needs: a module for the ``forward*`` hooks, a bound
    method for the ``wrap_*`` ones. Runs inside a rank process (imports
    torch)."""
    import torch

    from l2sched.attrs import resolve_path

    problems = []
    for i, layer in enumerate(adapter.decoder_layers(model)):
        kind = adapter.live_layer_kind(layer)
        for h in adapter.HOOKS:
            if not h.exists_in(kind):
                continue
            inst = h.install_for(kind)
            try:
                target = resolve_path(layer, inst.target)
            except AttributeError as e:
                problems.append(f"layer {i} {h.name}: {inst.target}: {e}")
                continue
            ok = (isinstance(target, torch.nn.Module) if inst.mechanism.startswith(
                "forward") else callable(target) and hasattr(target, "__self__"))
            if not ok:
                problems.append(f"layer {i} {h.name}: {inst.target} is "
                                f"{type(target).__name__}")
    return problems


def inventory_mismatches(ana: Any, live: Any) -> list[str]:
    """Where the analytical inventory ``ana`` and the live one ``live`` differ:
    ``Inventory.diff`` (tensors, shapes, dtypes, bytes, layer kinds) and, per
    layer, the tensor order."""
    out = ana.diff(live)
    for i, (a, b) in enumerate(zip(ana.layers, live.layers, strict=True)):
        if list(a) != list(b):
            out.append(f"layer {i}: tensor order or flags differ")
    return out

# --------------------------------------------------------------------------
# CPU shims (each runs inside a rank process)
# --------------------------------------------------------------------------

def shim_platform_env() -> None:
    """Shim 1, ``VLLM_TARGET_DEVICE=cpu``: without it the platform is
    ``UnspecifiedPlatform`` (no NVML, not a CPU build) and
    ``create_engine_config`` fails with ``RuntimeError: Device string must not
    be empty`` (``config/device.py:77``). Must run before vLLM is imported.
    ``VLLM_LOGGING_LEVEL`` is raised to WARNING to keep test output short."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def shim_no_amx() -> None:
    """Shim 1b, no AMX: on a CPU with AMX tiles vLLM's CPU GEMM dispatch
    (``check_cpu_sgl_kernel``, ``model_executor/layers/utils.py:501``) packs
    weights with ``torch.ops._C.convert_weight_packed``, which only a CPU
    build of vLLM has; the PyPI wheel (CUDA) has no ``vllm._C`` and weight
    loading fails (seen on a 2-core CI machine with amx_tile, 2026-12-07).
    Every rank answers as a CPU without AMX, where vLLM takes torch's GEMM,
    as on the machines these tests were written on."""
    import torch

    torch.cpu._is_amx_tile_supported = lambda: False


def shim_sparse_backend() -> None:
    """Shim 2, sparse-attention backend: ``CpuPlatform.get_attn_backend_cls``
    raises ``NotImplementedError: Sparse Attention is not supported on CPU.``
    (``platforms/cpu.py:154-155``) when ``MLAAttention.__init__`` asks for the
    sparse MLA backend. Return the FLASHMLA_SPARSE backend path instead (its
    class only needs to be constructible, no kernel runs). Idempotent."""
    from vllm.platforms import cpu as cpu_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    cls = cpu_platform.CpuPlatform
    if getattr(cls, "_l2sched_sparse_shim", False):
        return
    original = cls.get_attn_backend_cls.__func__

    def get_attn_backend_cls(klass, selected_backend, attn_selector_config,
                             num_heads=None):
        if attn_selector_config.use_sparse:
            return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()
        return original(klass, selected_backend, attn_selector_config, num_heads)

    cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)
    cls._l2sched_sparse_shim = True


def shim_workspace_manager() -> None:
    """Shim 3, workspace manager: ``FlashMLASparseImpl.__init__`` asserts
    ``WorkspaceManager not initialized``
    (``v1/attention/backends/mla/flashmla_sparse.py:832``); the GPU model
    runner normally initialises it. Initialise it on the CPU device."""
    import torch
    from vllm.v1.worker.workspace import init_workspace_manager

    init_workspace_manager(torch.device("cpu"))


def engine_config(model_dir: str, tp: int, ep: bool, pp: int = 1,
                  engine_kw: dict | None = None):
    """The ``VllmConfig`` for building (not serving) the model.

    Shim 4, ``enable_prefix_caching=False``: otherwise config creation fails
    with "--mamba-block-size can only be set with --enable-prefix-caching"
    (the CPU platform turns prefix caching off for MLA but the mamba ``align``
    mode still sets a block size). ``kernel_config.enable_jit_warmup=False``
    skips registering tilelang mHC warmups (no GPU to warm up).
    ``load_format="dummy"`` and ``skip_tokenizer_init`` because there are no
    weights or tokenizer files. ``pp``: the pipeline-parallel size;
    ``engine_kw``: further ``EngineArgs`` (they replace the ones above, e.g.
    ``enforce_eager=False`` for vLLM's default compilation mode)."""
    from vllm.engine.arg_utils import EngineArgs

    kw = dict(
        model=model_dir, skip_tokenizer_init=True, enforce_eager=True,
        dtype="bfloat16", max_model_len=4096, max_num_batched_tokens=4096,
        max_num_seqs=8, load_format="dummy", tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        enable_expert_parallel=bool(ep), enable_prefix_caching=False,
        kernel_config={"enable_jit_warmup": False})
    kw.update(engine_kw or {})
    args = EngineArgs(**kw)
    return args.create_engine_config()


@dataclass
class RankContext:
    """What ``fn`` gets inside a rank process: the rank (global: ``pp_rank *
    tp + tp rank``), TP size, EP flag, device (``meta`` = no memory) and the
    model directory, the PP size ``pp``; ``build()`` builds the real model
    (once) inside the current vLLM config and process group."""

    rank: int
    tp: int
    ep: bool
    device: str
    model_dir: str
    vllm_config: Any = None
    model: Any = None
    extra: dict = field(default_factory=dict)
    architecture: str = ARCHITECTURE
    pp: int = 1

    def build(self):
        """Construct the model class of ``self.architecture`` (``MODELS``;
        default ``Glm5NextForCausalLM``) on ``self.device`` (bf16 default
        dtype) and return it. Shims 2 and 3 are applied here."""
        if self.model is not None:
            return self.model
        import importlib

        import torch
        from vllm.config import set_current_vllm_config
        from vllm.utils.torch_utils import set_default_torch_dtype

        shim_sparse_backend()
        shim_workspace_manager()
        _, module, name = MODELS[self.architecture]
        cls = getattr(importlib.import_module(module), name)

        with set_current_vllm_config(self.vllm_config):
            with set_default_torch_dtype(torch.bfloat16), torch.device(self.device):
                self.model = cls(vllm_config=self.vllm_config, prefix="")
        return self.model


def plugin_log_records() -> list[str]:
    """A list that collects every record of the plugin's logger
    (``vllm.l2sched``, INFO and up) as ``"LEVEL message"`` from now on, in
    this process."""
    import logging

    records: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record):
            records.append(f"{record.levelname} {record.getMessage()}")

    log = logging.getLogger("vllm.l2sched")
    log.addHandler(Catch())
    log.setLevel(logging.INFO)
    return records


def _rank_main(rank: int, tp: int, ep: bool, device: str, model_dir: str,
               port: int, fn: Callable[[RankContext], Any], queue,
               architecture: str = ARCHITECTURE, pp: int = 1,
               engine_kw: dict | None = None) -> None:
    try:
        shim_platform_env()
        shim_no_amx()
        shim_sparse_backend()
        from vllm.config import set_current_vllm_config
        from vllm.distributed import (
            init_distributed_environment,
            initialize_model_parallel,
        )

        cfg = engine_config(model_dir, tp, ep, pp, engine_kw)
        with set_current_vllm_config(cfg):
            # Shim 5, gloo: one process per rank, CPU collectives.
            init_distributed_environment(
                world_size=tp * pp, rank=rank, local_rank=rank,
                distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
            initialize_model_parallel(tp, pp)
            ctx = RankContext(rank, tp, ep, device, model_dir, cfg,
                              architecture=architecture, pp=pp)
            result = fn(ctx)
        queue.put((rank, True, result))
    except BaseException:  # report everything to the parent, never hang it
        queue.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable[[RankContext], Any], config: dict, tp: int,
              ep: bool = False, device: str = "meta",
              timeout: float = 600.0,
              architecture: str = ARCHITECTURE, pp: int = 1,
              engine_kw: dict | None = None) -> list[Any]:
    """Spawn ``tp * pp`` rank processes (``pp``: pipeline-parallel size) that
    each build the real model setting for
    ``config`` (a HF text-config dict) as ``architecture`` (a key of
    ``MODELS``), with ``engine_kw`` as further ``EngineArgs``
    (``engine_config``), and return ``fn(ctx)``; the results in rank order. ``fn`` must be a module-level function and its result
    picklable. Raises ``RuntimeError`` with the rank's traceback when a rank
    fails, or when the ranks do not finish within ``timeout`` seconds."""
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="l2sched-vllm-") as d:
        model_dir = write_model_dir(config, os.path.join(d, "model"), architecture)
        port = free_port()
        procs = [ctx.Process(target=_rank_main,
                             args=(r, tp, ep, device, model_dir, port, fn, q,
                                   architecture, pp, engine_kw),
                             daemon=True) for r in range(tp * pp)]
        for p in procs:
            p.start()
        results: dict[int, Any] = {}
        errors = []
        try:
            while len(results) + len(errors) < tp * pp:
                try:
                    rank, ok, value = q.get(timeout=timeout)
                except queue_mod.Empty:
                    raise RuntimeError(f"vLLM ranks did not finish in {timeout} s "
                                       f"(done: {sorted(results)})") from None
                if ok:
                    results[rank] = value
                else:
                    errors.append(f"rank {rank} failed:\n{value}")
                    break
        finally:
            for p in procs:
                p.join(timeout=30 if not errors else 1)
                if p.is_alive():
                    p.kill()
                    p.join(5)
        if errors:
            raise RuntimeError("\n".join(errors))
        return [results[r] for r in range(tp * pp)]
