"""vLLM general plugin of the TP-emulation instrument: one GPU serves TP
rank 0 of a TP model, with idle intervals where the other ranks would
all-reduce (``lab/engine_tp/__init__.py`` says why and how to run it).

Installed with an entry point by ``benchmarks/vllm_gpu/stage.sh``
(``vllm.general_plugins``: ``l2sched_lab_engine_tp =
lab.engine_tp.plugin:register``), so vLLM runs ``register()`` in every
process. It does nothing unless ``$L2SCHED_LAB_EMULATE`` names a spec file
(JSON, written by ``lab.engine_tp.session``)::

    {"tp": 4, "model": "glm5next", "full_config": {...the TP model's text config},
     "device_profile": "/abs/path/emulated.toml", "embedding": true}

With it, in each process that loads a model:

1. **Idle intervals.** Before l2sched's post-load step
   (``l2sched.vllm.plugin.activate_after_load``, which runs after every
   model load whether or not l2sched is configured), ``idle.install_idle``
   puts a spin kernel at every all-reduce site of the loaded model, lasting
   ``DeviceProfile.allreduce_us(tp, nbytes)`` of the spec's profile for the
   message it stands for. vLLM's CUDA-graph capture records them.
2. **l2sched sees the emulated rank.** ``parallel_layout`` answers TP
   ``tp`` rank 0 and ``text_config_dict`` the full config, so the plugin
   (``auto`` included) plans for the TP model the GPU emulates; its live
   inventory check then compares the served per-rank weights with the
   analytical TP inventory of the full config.

One WARNING line per process says what was applied; a failure is logged in
one line and leaves vLLM alone.
"""

from __future__ import annotations

import json
import logging
import os
import weakref

log = logging.getLogger("vllm.l2sched_lab_engine_tp")

#: The environment variable naming the spec file.
ENV_SPEC = "L2SCHED_LAB_EMULATE"

_done = False
_installed: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def read_spec(path: str) -> dict:
    """The spec at ``path`` with its keys checked. Raises ``ValueError``
    naming the file and the key."""
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    for key, kind in (("tp", int), ("model", str), ("full_config", dict),
                      ("device_profile", str)):
        if not isinstance(spec.get(key), kind):
            raise ValueError(f"{path}: {key!r} missing or not a {kind.__name__}")
    if spec["tp"] < 2:
        raise ValueError(f"{path}: 'tp' must be >= 2 (got {spec['tp']})")
    return spec


def emulated_layout(tp: int):
    """``parallel_layout``'s replacement: TP ``tp`` rank 0, no EP, no PP."""
    from l2sched.vllm.layout import Layout

    def parallel_layout(vllm_config) -> Layout:
        return Layout(tp, 0)
    return parallel_layout


def idle_for(spec: dict):
    """``(idle, calibrate)``: ``idle(site, nbytes)`` for ``install_idle``, a
    spin of the spec's profile's all-reduce time at the spec's TP degree;
    ``calibrate()`` measures the spin kernel's rate on the current GPU
    (outside any graph capture; ``idle`` calls it first if nobody did)."""
    from l2sched.device import load_device
    from lab.engine_tp.idle import cuda_spin

    profile = load_device(spec["device_profile"])
    tp = int(spec["tp"])
    state: dict = {}

    def calibrate() -> None:
        import torch

        from l2sched.bench.step import spin_cycles_per_us
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the idle spin was first used inside a graph capture "
                               "(calibrate before capturing)")
        state["spin"] = cuda_spin(spin_cycles_per_us(torch))

    def idle(site: str, nbytes: int) -> None:
        if "spin" not in state:
            calibrate()
        state["spin"](profile.allreduce_us(tp, nbytes))
    return idle, calibrate


def _wrap_activate(spec: dict) -> None:
    import l2sched.vllm.plugin as plugin
    from lab.engine_tp.idle import install_idle

    original = plugin.activate_after_load
    idle, calibrate = idle_for(spec)

    def activate_after_load(model, *args, **kwargs):
        if model not in _installed and hasattr(getattr(model, "model", None), "layers"):
            try:
                _installed[model] = install_idle(model, idle,
                                                 embedding=spec.get("embedding", True))
                calibrate()  # outside any capture: the first forward may be one
                log.warning("l2sched_lab_engine_tp: pid %d: idle intervals %s",
                            os.getpid(), json.dumps(_installed[model].count))
            except Exception as e:  # report; vLLM serves on without them
                log.error("l2sched_lab_engine_tp: pid %d: idle intervals FAILED: %s: %s",
                          os.getpid(), type(e).__name__, e)
        return original(model, *args, **kwargs)

    plugin.activate_after_load = activate_after_load


def _see_emulated_rank(spec: dict) -> None:
    import l2sched.vllm.layout as layout
    import l2sched.vllm.plugin as plugin
    import l2sched.vllm.replaced as replaced

    fake = emulated_layout(int(spec["tp"]))
    full = dict(spec["full_config"])
    for mod in (layout, plugin, replaced):
        mod.parallel_layout = fake
    plugin.text_config_dict = lambda vllm_config: dict(full)


def register() -> None:
    """Apply the emulation once per process when ``$L2SCHED_LAB_EMULATE`` is
    set; never raises."""
    global _done
    path = os.environ.get(ENV_SPEC, "")
    if _done or not path:
        return
    _done = True
    try:
        spec = read_spec(path)
        _see_emulated_rank(spec)
        _wrap_activate(spec)
        log.warning("l2sched_lab_engine_tp: pid %d: emulating TP rank 0/%d of %s, "
                    "all-reduces as idle intervals of %s", os.getpid(), spec["tp"],
                    spec["model"], spec["device_profile"])
    except Exception as e:
        log.error("l2sched_lab_engine_tp: pid %d: not applied: %s: %s", os.getpid(),
                  type(e).__name__, e)
