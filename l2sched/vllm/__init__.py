"""vLLM general plugin: compile and install an L2-prefetch schedule per TP rank.

Entry point (``pyproject.toml``)::

    [project.entry-points."vllm.general_plugins"]
    l2sched = "l2sched.vllm:register"

vLLM calls ``register()`` once per process (API server, engine core, every
worker) before any model is built. ``register()`` is cheap: it imports
nothing beyond the standard library and only arranges for
``vllm.plugin.activate_after_load`` to run right after vLLM's
``process_weights_after_loading(model, model_config, device)``
(``vllm/model_executor/model_loader/utils.py:139``), the function every model
loader calls last, after all per-layer post-load processing (MLA's
``W_UK_T``/``W_UV``) and the model-level hook. Why this point and not a
registry override subclass: see ``docs/vllm.md`` ("How it hooks in"). A
loader that never calls it (``TensorizerLoader``) gets the same step when
its ``load_model`` returns (``get_model_loader`` is wrapped: every loader
vLLM builds a model with comes from it), and hooks on modules that vLLM's
LoRA manager wraps afterwards follow them (``vllm.replaced``).

Opt in with either

* ``--additional-config '{"l2sched": {"schedule": "x.l2s", "set": {"window.B.budget": "25MB"}}}'``
  (read from ``vllm_config.additional_config``), or
* ``L2SCHED_SCHEDULE=x.l2s`` plus optional ``L2SCHED_SET="k=v; k=v"``.

An ``l2sched`` section in ``additional_config`` is the whole configuration
(the environment is then not read). Optional keys (or env vars):
``backend`` (``L2SCHED_BACKEND``): ``cuda`` (default) or ``dry-run`` (records
issues, no GPU; for CPU checks); ``lint`` (``L2SCHED_LINT``): ``error``
(default), ``warn`` or ``off``; ``device`` (``L2SCHED_DEVICE``): a device
profile name or ``.toml`` path; ``on_predicted_loss``, ``fills`` and
``verify`` (``L2SCHED_VERIFY``: rounds of the start-up A/B of the captured
decode graphs, ``verify_startup``). With neither schedule source, nothing
happens. See ``docs/vllm.md``.

Modules: ``config`` (what the user asked for), ``plugin`` (the post-load
step), ``sites`` (``runtime.sites.install_plan``, a missing hook site
turned into vLLM drift), ``step_info`` (what the
gate needs to know about vLLM's forward), ``drift`` (a vLLM name missing:
one WARNING line, prefetch off), ``replaced`` (hooked modules replaced
after install, loaders that skip ``process_weights_after_loading``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import logging
import sys
import threading
import weakref

from l2sched.vllm import drift as _drift

log = logging.getLogger("l2sched.vllm")

#: vLLM module whose ``process_weights_after_loading`` is wrapped.
LOADER_UTILS = "vllm.model_executor.model_loader.utils"
#: vLLM's weight-reload paths that do not go through
#: ``process_weights_after_loading``; after each the plugin redoes its
#: post-load step for the model (``plugin.reactivate``).
RELOAD_LAYERWISE = "vllm.model_executor.model_loader.reload.layerwise"
RELOAD_INPLACE = "vllm.model_executor.model_loader.reload.inplace"
GPU_WORKER = "vllm.v1.worker.gpu_worker"
#: vLLM's loader registry: ``get_model_loader`` hands out every loader a
#: model is built with; its ``load_model`` is wrapped per instance.
MODEL_LOADER = "vllm.model_executor.model_loader"
#: vLLM's LoRA manager: ``LoRAModelManager._create_lora_modules`` wraps the
#: LoRA targets after load; the hooks on them follow (``replaced.after_lora``).
LORA_MANAGER = "vllm.lora.model_manager"

_lock = threading.Lock()
_registered = False
_original_pwal = None
#: Models ``process_weights_after_loading`` ran for (their post-load step
#: ran there; a loader's return then only follows replaced modules).
_post_loaded: weakref.WeakSet = weakref.WeakSet()
#: Depth of wrapped reload calls in progress (a reload_weights runs
#: finalize_layerwise_reload inside): only the outermost one reactivates.
_reload_depth = threading.local()


class _PostImportPatcher(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs the patch of a vLLM module in ``_PATCHES`` right after that module
    is imported, before any other module does ``from ... import name`` (so
    they bind the wrapped function).

    It never waits for a module that does not exist: ``register()`` gives it
    only modules ``module_exists`` finds in the installed vLLM (the others
    are a ``drift`` line at once), and a pending module whose import finds
    no spec is a ``drift`` line and is dropped. The finder takes itself off
    ``sys.meta_path`` when nothing is pending. A module that exists but is
    never imported in this process (the GPU worker in the API server) keeps
    it waiting at the cost of one set lookup per import."""

    def __init__(self):
        self.pending = set(_PATCHES)
        self._inner = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            self._give_up(fullname)
            return None
        self._inner[fullname] = spec.loader
        spec.loader = self
        return spec

    def _give_up(self, name: str) -> None:
        self.pending.discard(name)
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        _drift.drift(f"module {name}", _moved(name))

    def create_module(self, spec):
        return self._inner[spec.name].create_module(spec)

    def exec_module(self, module):
        name = module.__spec__.name
        self._inner.pop(name).exec_module(module)
        self.pending.discard(name)
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            _PATCHES[name](module)
        except Exception as e:  # never break vLLM's import
            log.warning("l2sched: patching %s failed: %s: %s", name,
                        type(e).__name__, e)


def register() -> None:
    """The vLLM general plugin. Idempotent and cheap: arranges for
    ``activate_after_load`` to run after every model load (wrapping
    ``process_weights_after_loading`` now if vLLM's loader utils are already
    imported, else right after they are), and for ``reactivate`` to run after
    each weight-reload path (``reload_weights``, ``finalize_layerwise_reload``,
    ``Worker.wake_up``). It does not read the configuration here:
    ``additional_config`` is only known once a model is loaded; with no
    schedule configured the wrappers do nothing.

    vLLM drift: a module of ``_PATCHES`` that the installed vLLM does not
    have (``module_exists``, which imports nothing), or a patch target missing
    in its module, is one WARNING line naming it and the vLLM version
    (``drift``), and prefetch stays off in this process; the import finder
    waits only for modules that exist. Never raises."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    try:
        later = []
        if not _drift.module_exists("vllm"):  # nothing to patch, nothing drifted
            return
        for name, patch in _PATCHES.items():
            mod = sys.modules.get(name)
            if mod is not None:
                patch(mod)
            elif _drift.module_exists(name):
                later.append(name)
            else:
                _drift.drift(f"module {name}", _moved(name))
        if later:
            finder = _PostImportPatcher()
            finder.pending = set(later)
            sys.meta_path.insert(0, finder)
    except Exception as e:  # never break vLLM start-up
        log.warning("l2sched: plugin not registered: %s: %s", type(e).__name__, e)


def _moved(module: str) -> str:
    what = _PATCH_TARGETS.get(module)
    return f"moved? l2sched patches its {what}" if what else "moved?"


def _rebind(original, wrapped, name: str) -> None:
    """Point every loaded ``vllm.*`` module's ``name`` that is ``original``
    (bound by ``from ... import name`` before the patch) at ``wrapped``."""
    for mod_name, m in list(sys.modules.items()):
        if (mod_name.startswith("vllm") and m is not None
                and vars(m).get(name) is original):
            setattr(m, name, wrapped)


def _patch_loader_utils(utils) -> None:
    """Wrap ``utils.process_weights_after_loading`` and rebind the name in
    loader modules that already imported the original."""
    global _original_pwal
    original = _target(utils, "process_weights_after_loading")
    if original is None or getattr(original, "__l2sched__", False):
        return
    _original_pwal = original
    activate = _then(original, "l2sched.vllm.plugin", "activate_after_load")

    def wrapped(model, *args, **kwargs):
        with contextlib.suppress(TypeError):  # a model no weak reference takes
            _post_loaded.add(model)
        return activate(model, *args, **kwargs)

    _mark(wrapped, original)
    utils.process_weights_after_loading = wrapped
    _rebind(original, wrapped, "process_weights_after_loading")


def _patch_model_loader(module) -> None:
    """Wrap ``get_model_loader`` so that the ``load_model`` of every loader
    it returns runs ``replaced.after_load`` when it returns (the post-load
    step for a loader that never called ``process_weights_after_loading``,
    the check for replaced hooked modules for one that did)."""
    original = _target(module, "get_model_loader")
    if original is None or getattr(original, "__l2sched__", False):
        return

    def get_model_loader(*args, **kwargs):
        loader = original(*args, **kwargs)
        _watch_load_model(loader)
        return loader

    _mark(get_model_loader, original)
    module.get_model_loader = get_model_loader
    _rebind(original, get_model_loader, "get_model_loader")


def _watch_load_model(loader) -> None:
    load = getattr(loader, "load_model", None)
    if load is None or getattr(load, "__l2sched__", False):
        return

    def load_model(*args, **kwargs):
        model = load(*args, **kwargs)
        _step("after_load", model, _arg(args, kwargs, 0, "vllm_config"),
              type(loader).__name__, model in _post_loaded)
        return model

    _mark(load_model, load)
    try:
        loader.load_model = load_model
    except Exception as e:  # a loader class with __slots__: pwal still covers it
        log.warning("l2sched: cannot watch %s.load_model (%s: %s); the plugin "
                    "installs only if the loader calls process_weights_after_loading",
                    type(loader).__name__, type(e).__name__, e)


def _patch_lora_manager(module) -> None:
    """``LoRAModelManager._create_lora_modules(self)`` wraps the LoRA targets
    of ``self.model``; after it the hooks on them follow
    (``replaced.after_lora``)."""
    original = _target(module, "LoRAModelManager", "_create_lora_modules")
    if original is None or getattr(original, "__l2sched__", False):
        return

    def _create_lora_modules(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        _step("after_lora", self)
        return out

    _mark(_create_lora_modules, original)
    module.LoRAModelManager._create_lora_modules = _create_lora_modules


def _step(name: str, *args) -> None:
    """``replaced.name(*args)`` after a vLLM function returned, the module
    imported at the first call; a failure is one WARNING line, never raised
    into vLLM."""
    try:
        getattr(importlib.import_module("l2sched.vllm.replaced"), name)(*args)
    except Exception as e:
        log.warning("l2sched: unexpected %s in the plugin's %s step: %s",
                    type(e).__name__, name, e)


def _then(original, module: str, name: str):
    """A wrapper of vLLM's ``original(first, ...)`` that, when it returns,
    calls ``module.name(first)`` and returns ``original``'s result. The
    module is imported at the first call, not at registration: every vLLM
    process registers, few load a model or capture graphs."""

    def wrapper(first, *args, **kwargs):
        out = original(first, *args, **kwargs)
        getattr(importlib.import_module(module), name)(first)
        return out

    _mark(wrapper, original)
    return wrapper


def _target(module, *attrs):
    """``module.attr[.attr...]``, or ``None`` after a ``drift`` line naming
    the full dotted name when it is missing (renamed or moved in this
    vLLM)."""
    obj = module
    for a in attrs:
        obj = getattr(obj, a, None)
        if obj is None:
            _drift.drift(".".join((module.__name__,) + attrs), "moved?")
            return None
    return obj


def _mark(wrapper, original) -> None:
    wrapper.__l2sched__ = True
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    wrapper.__name__ = getattr(original, "__name__", wrapper.__name__)


def _after_reload(original, model_of):
    """A wrapper of reload function ``original`` that, when the outermost
    wrapped reload returns, redoes the plugin's post-load step for the model
    (``model_of(args, kwargs)``; ``None`` = nothing to do)."""

    def wrapper(*args, **kwargs):
        depth = getattr(_reload_depth, "n", 0)
        _reload_depth.n = depth + 1
        try:
            out = original(*args, **kwargs)
        finally:
            _reload_depth.n = depth
        if depth == 0:
            model = model_of(args, kwargs)
            if model is not None:
                # Lazy: register() imports only the standard library (above).
                from l2sched.vllm.plugin import reactivate

                reactivate(model)
        return out

    _mark(wrapper, original)
    return wrapper


def _patch_function(module, name: str, model_of) -> None:
    original = _target(module, name)
    if original is None or getattr(original, "__l2sched__", False):
        return
    wrapped = _after_reload(original, model_of)
    setattr(module, name, wrapped)
    _rebind(original, wrapped, name)


def _arg(args, kwargs, index: int, key: str):
    return args[index] if len(args) > index else kwargs.get(key)


def _patch_layerwise(module) -> None:
    """``finalize_layerwise_reload(model, model_config)``: the end of every
    layerwise reload (``reload_weights`` from a checkpoint, weight-transfer
    engines' ``finish_weight_update``)."""
    _patch_function(module, "finalize_layerwise_reload",
                    lambda a, k: _arg(a, k, 0, "model"))


def _patch_inplace(module) -> None:
    """``reload_weights(vllm_config, model, ...)``: vLLM's in-place reload
    (both model runners and the worker's ``reload_weights`` RPC)."""
    _patch_function(module, "reload_weights", lambda a, k: _arg(a, k, 1, "model"))


def _patch_gpu_worker(module) -> None:
    """``Worker.wake_up(self, tags)``: the weights are back after a sleep;
    ``Worker.compile_or_warm_up_model(self)``: the CUDA graphs are captured,
    the plugin's ``verify`` option measures them (``verify_startup``)."""
    original = _target(module, "Worker", "wake_up")
    cls = getattr(module, "Worker", None)
    if original is not None and not getattr(original, "__l2sched__", False):
        def model_of(args, kwargs):
            runner = getattr(args[0], "model_runner", None) if args else None
            return getattr(runner, "model", None)

        cls.wake_up = _after_reload(original, model_of)
    warm = _target(module, "Worker", "compile_or_warm_up_model")
    if warm is None or getattr(warm, "__l2sched__", False):
        return

    cls.compile_or_warm_up_model = _then(warm, "l2sched.vllm.verify_startup",
                                         "verify_after_capture")


#: vLLM module -> the name its patch wraps (for the drift line).
_PATCH_TARGETS = {LOADER_UTILS: "process_weights_after_loading",
                  RELOAD_LAYERWISE: "finalize_layerwise_reload",
                  RELOAD_INPLACE: "reload_weights",
                  GPU_WORKER: "Worker.wake_up and Worker.compile_or_warm_up_model",
                  MODEL_LOADER: "get_model_loader",
                  LORA_MANAGER: "LoRAModelManager._create_lora_modules"}

#: vLLM module -> its patch (applied at registration, or right after the
#: module's import).
_PATCHES = {LOADER_UTILS: _patch_loader_utils, RELOAD_LAYERWISE: _patch_layerwise,
            RELOAD_INPLACE: _patch_inplace, GPU_WORKER: _patch_gpu_worker,
            MODEL_LOADER: _patch_model_loader, LORA_MANAGER: _patch_lora_manager}
