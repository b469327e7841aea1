"""Issue 43: the plugin installs under every vLLM 0.33.0 loader that builds
the model, exactly once.

One TP1 rank on CPU (gloo) loads vLLM's real ``Qwen3MoeForCausalLM``
(tests/test_qwen3_moe_vllm.py's config) the way vLLM's model runner does,
``get_model_loader(load_config).load_model(...)``, once per load format,
the plugin registered as vLLM registers it and configured with the
every-hook schedule of tests/test_qwen3_moe_plugin.py (dry-run backend).
Each load must log exactly one summary line for its model (the loaders that
call ``process_weights_after_loading`` must not install twice), and in a
decode-shaped forward every issue that line counts must fire once.

Each loader's own code runs; only file I/O is stubbed, and only where the
library that does it is not installed here:

- ``dummy``: nothing to read;
- ``safetensors`` (``DefaultModelLoader``): a real Hugging Face checkpoint
  of the config (``model.safetensors``, Qwen3-MoE's names), read by vLLM;
- ``runai_streamer`` (``RunaiModelStreamerLoader``): the same file; the Run:ai
  streamer's listing and reader (``list_safetensors``,
  ``runai_safetensors_weights_iterator``) are vLLM's local safetensors
  reader instead;
- ``tensorizer`` (``TensorizerLoader``), a vLLM-tensorized file and a
  serialized Hugging Face state dict: tensorizer's reads
  (``is_vllm_tensorized``, ``deserialize_tensorizer_model``,
  ``tensorizer_weights_iterator``) read a ``torch.save`` file instead. On
  2af54cc neither path installed anything (the loader never calls
  ``process_weights_after_loading``) and said nothing;
- ``sharded_state`` (``ShardedStateLoader``): the state vLLM's own
  ``ShardedStateLoader.save_model`` wrote, read by vLLM.

vLLM 0.33.0 has no bitsandbytes loader; ``modelexpress`` and ``ipc_cache``
need a package or a weight-cache daemon that is not here (docs/vllm.md,
"Model loaders"). Slow (about a minute); ``-m vllm``.
"""

from __future__ import annotations

import contextlib
import glob
import os

import pytest
import test_qwen3_moe_plugin as qp
import test_qwen3_moe_vllm as qv
import test_vllm_lora as tl
from test_vllm_drift import fresh_registration  # noqa: F401 - a fixture
from vllm_cpu import plugin_log_records, run_ranks, vllm_available

import l2sched.vllm as reg
from l2sched.vllm import drift as dr

_OK, _WHY = vllm_available()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not _OK, reason=_WHY)]

#: name -> (load format, loader class)
LOADS = {"dummy": ("dummy", "DummyModelLoader"),
         "safetensors": ("safetensors", "DefaultModelLoader"),
         "runai_streamer": ("runai_streamer", "RunaiModelStreamerLoader"),
         "tensorizer (vLLM-tensorized)": ("tensorizer", "TensorizerLoader"),
         "tensorizer (Hugging Face)": ("tensorizer", "TensorizerLoader"),
         "sharded_state": ("sharded_state", "ShardedStateLoader")}


#: ``enable_lora`` only so that vLLM picks its Triton MoE kernel, whose
#: post-load step runs here: the CPU kernel's weight repacking needs vLLM's
#: CPU build (``torch.ops._C.prepack_moe_weight``), which the CUDA wheel
#: lacks, and ``moe_backend=triton`` is refused on a CPU device without
#: LoRA. The loaders do not apply LoRA (the model runner does:
#: tests/test_vllm_lora.py); the forward runs tests/test_qwen3_moe_vllm.py's
#: reference experts either way.
ENGINE = tl.LORA


def hf_state_dict(config: dict) -> dict:
    """A Hugging Face Qwen3-MoE checkpoint of ``config`` (its tensor names
    and shapes): N(0, 0.02) bf16, norms around 1."""
    import torch

    g = torch.Generator().manual_seed(1)
    h, hd, v = config["hidden_size"], config["head_dim"], config["vocab_size"]
    nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h),
              "model.norm.weight": (h,)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (nh * hd, h),
                       p + "self_attn.k_proj.weight": (nkv * hd, h),
                       p + "self_attn.v_proj.weight": (nkv * hd, h),
                       p + "self_attn.o_proj.weight": (h, nh * hd),
                       p + "self_attn.q_norm.weight": (hd,),
                       p + "self_attn.k_norm.weight": (hd,)})
        if i in config["mlp_only_layers"]:
            mlps = {"mlp": config["intermediate_size"]}
        else:
            shapes[p + "mlp.gate.weight"] = (config["num_experts"], h)
            mlps = {f"mlp.experts.{e}": config["moe_intermediate_size"]
                    for e in range(config["num_experts"])}
        for m, n in mlps.items():
            shapes.update({f"{p}{m}.gate_proj.weight": (n, h),
                           f"{p}{m}.up_proj.weight": (n, h),
                           f"{p}{m}.down_proj.weight": (h, n)})
    return {name: (torch.randn(shape, generator=g) * 0.02
                   + (1.0 if "norm" in name else 0.0)).to(torch.bfloat16)
            for name, shape in shapes.items()}


@contextlib.contextmanager
def patched(module, **names):
    """``module.NAME = value`` for each of ``names``, restored after."""
    saved = {n: getattr(module, n) for n in names}
    for n, v in names.items():
        setattr(module, n, v)
    try:
        yield
    finally:
        for n, v in saved.items():
            setattr(module, n, v)


def runai_io(model_dir: str):
    """The Run:ai streamer's listing and reader, as vLLM's local safetensors
    reader."""
    import vllm.model_executor.model_loader.runai_streamer_loader as runai
    from vllm.model_executor.model_loader.weight_utils import (
        safetensors_weights_iterator,
    )

    def read(files, use_tqdm_on_load, is_distributed=False):
        return safetensors_weights_iterator(files, use_tqdm_on_load)

    return patched(runai, list_safetensors=lambda path: sorted(
        glob.glob(os.path.join(path, "*.safetensors"))),
        runai_safetensors_weights_iterator=read)


def tensorizer_io(path: str):
    """tensorizer's reads of ``path``, a ``torch.save`` file of the tensors
    (a vLLM-tensorized file holds ``vllm_tensorized_marker``)."""
    import torch
    import vllm.model_executor.model_loader.tensorizer_loader as tz

    def tensors():
        return torch.load(path, weights_only=True)

    def deserialize(model, tensorizer_config):  # TensorDeserializer.load_into_module
        for name, t in tensors().items():
            owner, _, attr = name.rpartition(".")
            mod = model.get_submodule(owner)
            if attr in mod._buffers:
                mod._buffers[attr] = t
            else:
                setattr(mod, attr, torch.nn.Parameter(t, requires_grad=False))
        del model.vllm_tensorized_marker

    return patched(tz,
                   is_vllm_tensorized=lambda c: "vllm_tensorized_marker" in tensors(),
                   deserialize_tensorizer_model=deserialize,
                   tensorizer_weights_iterator=lambda args: iter(tensors().items()))


def _load(ctx, name: str, path: str, tmp: str, embed) -> tuple:
    """Load with ``name``'s loader; the log lines, whether the plan was
    installed, its issues planned and fired in a forward, the loader class,
    and whether the embedding is ``embed`` (the checkpoint's)."""
    import torch
    from vllm.model_executor.model_loader import get_model_loader

    from l2sched.vllm import plugin

    fmt, _cls = LOADS[name]
    lc = ctx.vllm_config.load_config
    lc.load_format, lc.model_loader_extra_config = fmt, {}
    io = contextlib.nullcontext()
    if name == "runai_streamer":
        io = runai_io(ctx.model_dir)
    elif fmt == "tensorizer":
        uri = os.path.join(tmp, "vllm.tensors" if "vLLM" in name else "hf.tensors")
        lc.model_loader_extra_config = {"tensorizer_config": {"tensorizer_uri": uri}}
        io = tensorizer_io(uri)
    records = plugin_log_records()
    trace: list = []
    with io:
        model = tl.load_with_plugin(ctx, path, trace)
    inst = plugin.installed_for(model)
    out = {"records": list(records), "installed": inst is not None,
           "loader": type(get_model_loader(lc)).__name__,
           "checkpoint": torch.equal(model.model.embed_tokens.weight, embed)}
    if inst is not None:
        qv.record_events(inst.runtime, trace)
        trace.clear()
        qv._forward(model, ctx.vllm_config)
        out["planned"] = len(inst.plan.issues)
        out["fired"] = len([e for e in trace if e[:2] == ("l2s", "fork")])
        inst.retire()
    plugin.INSTALLED.clear()
    return out, model


def _rank(ctx) -> dict:
    import tempfile

    import torch
    from safetensors.torch import save_file
    from vllm.model_executor.model_loader import ShardedStateLoader

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "q.l2s")
        with open(path, "w") as f:
            f.write(qp.plugin_schedule(ctx.tp))
        hf = hf_state_dict(qv.TINY)
        embed = hf["model.embed_tokens.weight"]
        save_file(hf, os.path.join(ctx.model_dir, "model.safetensors"))
        torch.save(hf, os.path.join(tmp, "hf.tensors"))
        for name in ("dummy", "safetensors", "runai_streamer"):
            out[name], model = _load(ctx, name, path, tmp, embed)
        # what tensorizer's serializer writes: the vLLM model's tensors and
        # the marker (vllm/model_executor/model_loader/tensorizer.py)
        state = {**dict(model.named_parameters()), **dict(model.named_buffers()),
                 "vllm_tensorized_marker": torch.ones(1)}
        torch.save({k: v.detach().clone() for k, v in state.items()},
                   os.path.join(tmp, "vllm.tensors"))
        for name in ("tensorizer (vLLM-tensorized)", "tensorizer (Hugging Face)"):
            out[name], _ = _load(ctx, name, path, tmp, embed)
        os.remove(os.path.join(ctx.model_dir, "model.safetensors"))
        ShardedStateLoader.save_model(model, ctx.model_dir)
        out["sharded_state"], _ = _load(ctx, "sharded_state", path, tmp, embed)
    return out


_CACHE: dict = {}


def _run() -> dict:
    if not _CACHE:
        _CACHE["tp1"] = run_ranks(_rank, qv.TINY, 1, device="cpu", timeout=900,
                                  architecture=qv.ARCH, engine_kw=ENGINE)[0]
    return _CACHE["tp1"]


@pytest.mark.parametrize("name", list(LOADS))
def test_the_plugin_installs_once_under_every_loader(name):
    got = _run()[name]
    lines = [x for x in got["records"] if x.startswith((
        "INFO l2sched: TP rank 0/1: schedule every_hook", "ERROR",
        "WARNING l2sched: TP"))]
    assert len(lines) == 1 and " installed, backend dry-run" in lines[0], got["records"]
    assert got["installed"]
    assert got["loader"] == LOADS[name][1]
    assert got["checkpoint"] == (name != "dummy")  # the weights came from the file
    planned = int(lines[0].split(" issues, ")[0].rsplit(" ", 1)[1])
    assert planned == got["planned"] == got["fired"] > 8


@pytest.mark.parametrize("patch,module,target", [
    ("_patch_model_loader", "vllm.model_executor.model_loader", "get_model_loader"),
    ("_patch_lora_manager", "vllm.lora.model_manager",
     "LoRAModelManager._create_lora_modules"),
])
def test_a_missing_patch_target_is_one_warning_and_prefetch_off(
        fresh_registration, caplog, patch, module, target):
    """vLLM drift (docs/vllm.md): the two names these patches wrap, missing
    from their module (a stand-in module with neither, so no vLLM import)."""
    import types

    getattr(reg, patch)(types.ModuleType(module))
    warn = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warn == [f"l2sched: prefetch OFF: vLLM {dr.vllm_version()} has no "
                    f"{module}.{target} (moved?); l2sched supports vllm==0.33.0"]
    assert list(dr.DRIFT) == [f"{module}.{target}"]
    assert reg.MODEL_LOADER in reg._PATCHES and reg.LORA_MANAGER in reg._PATCHES
