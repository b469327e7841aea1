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
registry override subclass: see ``docs/vllm.md`` ("How it hooks in").

Opt in with either

* ``--additional-config '{"l2sched": {"schedule": "x.l2s", "set": {"window.B.budget": "25MB"}}}'``
  (read from ``vllm_config.additional_config``), or
* ``L2SCHED_SCHEDULE=x.l2s`` plus optional ``L2SCHED_SET="k=v; k=v"``.

An ``l2sched`` section in ``additional_config`` is the whole configuration
(the environment is then not read). Optional keys (or env vars):
``backend`` (``L2SCHED_BACKEND``): ``cuda`` (default) or ``dry-run`` (records
issues, no GPU; for CPU checks); ``lint`` (``L2SCHED_LINT``): ``error``
(default), ``warn`` or ``off``; ``device`` (``L2SCHED_DEVICE``): a device
profile name or ``.toml`` path. With neither schedule source, nothing
happens. See ``docs/vllm.md``.

Modules: ``config`` (what the user asked for), ``plugin`` (the post-load
step), ``sites`` (hook sites and ``install_plan``), ``step_info`` (what the
gate needs to know about vLLM's forward).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading

log = logging.getLogger("l2sched.vllm")

#: vLLM module whose ``process_weights_after_loading`` is wrapped.
LOADER_UTILS = "vllm.model_executor.model_loader.utils"

_lock = threading.Lock()
_registered = False
_original_pwal = None


class _PostImportPatcher(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``_patch_loader_utils`` right after ``LOADER_UTILS`` is imported,
    before any loader module does ``from ... import
    process_weights_after_loading`` (so they bind the wrapped function)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != LOADER_UTILS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        _patch_loader_utils(module)


def register() -> None:
    """The vLLM general plugin. Idempotent and cheap: arranges for
    ``activate_after_load`` to run after every model load (wrapping
    ``process_weights_after_loading`` now if vLLM's loader utils are already
    imported, else right after they are). It does not read the configuration
    here: ``additional_config`` is only known once a model is loaded; with no
    schedule configured the wrapper does nothing."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    try:
        mod = sys.modules.get(LOADER_UTILS)
        if mod is not None:
            _patch_loader_utils(mod)
        else:
            sys.meta_path.insert(0, _PostImportPatcher())
    except Exception as e:  # never break vLLM start-up
        log.warning("l2sched: plugin not registered: %s: %s", type(e).__name__, e)


def _patch_loader_utils(utils) -> None:
    """Wrap ``utils.process_weights_after_loading`` and rebind the name in
    loader modules that already imported the original."""
    global _original_pwal
    original = getattr(utils, "process_weights_after_loading", None)
    if original is None or getattr(original, "__l2sched__", False):
        return
    _original_pwal = original

    def process_weights_after_loading(model, *args, **kwargs):
        out = original(model, *args, **kwargs)
        # imported at the first model load, not at registration: every vLLM
        # process registers, few load a model
        from l2sched.vllm.plugin import activate_after_load

        activate_after_load(model)
        return out

    process_weights_after_loading.__l2sched__ = True
    process_weights_after_loading.__wrapped__ = original
    process_weights_after_loading.__doc__ = original.__doc__
    utils.process_weights_after_loading = process_weights_after_loading
    for name, m in list(sys.modules.items()):
        if (name.startswith("vllm.model_executor.model_loader") and m is not None
                and getattr(m, "process_weights_after_loading", None) is original):
            m.process_weights_after_loading = process_weights_after_loading
