"""vLLM drift: a name the plugin patches or hooks (a patch target, a module
the import finder waits for, a hook site, a name the gate reads) is missing
in the installed vLLM. Each is one WARNING line per process naming it and
``vllm.__version__`` (``drift``), and prefetch is off in that process
(``DRIFT``; ``plugin.activate_after_load`` installs nothing). Standard
library and ``l2sched.errors`` only: ``register()`` uses it before vLLM has
loaded a model.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import sys
import threading
from importlib.metadata import version

from l2sched.errors import L2sPluginError

#: The plugin's logger (``plugin.log``: vLLM's ``init_logger`` of the same
#: name), so a drift line at registration shares vLLM's format and level.
_vllm_log = logging.getLogger("vllm.l2sched")

#: The one vLLM version the patch targets and hook sites are written for.
SUPPORTED_VLLM = "0.33.0"

_lock = threading.Lock()

#: The vLLM names the post-load step (``plugin``) and the gate
#: (``step_info``) call; resolved at each load before anything is installed
#: (``drifted``).
NAMES = ("vllm.config.get_current_vllm_config_or_none",
         "vllm.distributed.get_tensor_model_parallel_rank",
         "vllm.distributed.get_tensor_model_parallel_world_size",
         "vllm.forward_context.get_forward_context",
         "vllm.forward_context.is_forward_context_available",
         "vllm.distributed.parallel_state.GroupCoordinator.graph_capture")

#: Every vLLM name this process needed and did not find (patch target, module
#: the import finder would wait for, hook site, step-info name) -> what was
#: missing. Non-empty: prefetch is off in this process for every load
#: (``plugin.activate_after_load`` installs nothing); each name was logged
#: once, as one WARNING line (``drift``).
DRIFT: dict[str, str] = {}


class VllmDrift(L2sPluginError):
    """A name the plugin needs is missing in the installed vLLM: ``target``
    (what was looked for) and ``why`` (a short reason, ``moved?`` by
    default). The plugin logs it as its ``prefetch OFF`` line, at WARNING
    (``refuse_drift``'s, whose names were logged already: DEBUG)."""

    level = logging.WARNING

    def __init__(self, target: str, why: str = "moved?"):
        super().__init__(f"vLLM {vllm_version()} has no {target} ({why}); l2sched "
                         f"supports vllm=={SUPPORTED_VLLM}")
        self.target, self.why = target, why


def record(target: str, why: str = "moved?") -> bool:
    """Note ``target`` in ``DRIFT`` (prefetch off in this process); True when
    it is new (its line is still to be logged)."""
    with _lock:
        if target in DRIFT:
            return False
        DRIFT[target] = why
        return True


def vllm_version() -> str:
    """``vllm.__version__`` of the installed vLLM (its distribution's
    version when the package is not imported yet; ``?`` when neither is
    known). Imports nothing."""
    v = getattr(sys.modules.get("vllm"), "__version__", None)
    if v:
        return str(v)
    try:
        return version("vllm")
    except Exception:
        return "?"


def drift(target: str, why: str = "moved?", rank_txt: str = "") -> bool:
    """Record that the installed vLLM has no ``target`` and log it: one
    WARNING line per ``target`` per process, naming it and ``vllm.__version__``
    (``rank_txt``, e.g. ``TP rank 0/4``, when known). Prefetch is then off in
    this process (``DRIFT``). Returns True when this call logged the line.
    Never raises."""
    if not record(target, why):
        return False
    who = f"{rank_txt}: " if rank_txt else ""
    try:
        _vllm_log.warning("l2sched: %sprefetch OFF: %s", who, VllmDrift(target, why))
    except Exception:  # pragma: no cover - a broken handler must not break vLLM
        pass
    _drop_installed()
    return True


def _drop_installed() -> None:
    """A drift found after a plan was installed (a module imported later):
    take every installation of the process out (``plugin.INSTALLED``)."""
    plugin = sys.modules.get("l2sched.vllm.plugin")
    for inst in list(getattr(plugin, "INSTALLED", ())):
        try:
            inst.retire()
        except Exception:  # pragma: no cover - retire restores attributes only
            pass
        if inst in plugin.INSTALLED:
            plugin.INSTALLED.remove(inst)


def resolve_vllm_name(dotted: str):
    """The object at ``dotted`` (``module.attr[.attr...]``: the longest
    importable module prefix, then attributes). Raises ``VllmDrift`` naming
    ``dotted`` when the module or an attribute is missing."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name and not mod_name.startswith(e.name) and e.name != mod_name:
                raise VllmDrift(dotted, f"importing {mod_name}: "
                                f"ModuleNotFoundError: {e}") from None
            continue
        except Exception as e:
            raise VllmDrift(dotted, f"importing {mod_name}: {type(e).__name__}: "
                            f"{e}") from None
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise VllmDrift(dotted)
            obj = getattr(obj, attr)
        return obj
    raise VllmDrift(dotted)


def check_vllm_names(names, rank_txt: str = "") -> bool:
    """Resolve every dotted name of ``names`` (``resolve_vllm_name``); each
    missing one is a ``drift`` line. True when all resolve."""
    ok = True
    for name in names:
        try:
            resolve_vllm_name(name)
        except VllmDrift as e:
            drift(e.target, e.why, rank_txt)
            ok = False
    return ok


def module_exists(name: str) -> bool:
    """Whether module ``name`` (dotted) exists in the installed packages,
    found without importing it or its parents (``PathFinder`` from the top
    package down; a parent already imported gives its ``__path__``)."""
    parts = name.split(".")
    path = None
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        mod = sys.modules.get(sub)
        if mod is not None:
            if i == len(parts):
                return True
            path = getattr(mod, "__path__", None)
            if path is None:
                return False
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec(sub, path)
        except Exception:
            return False
        if spec is None:
            return False
        if i == len(parts):
            return True
        path = spec.submodule_search_locations
        if path is None:
            return False
    return True


def drifted() -> bool:
    """Whether a vLLM name the plugin needs is missing in this process: the
    ``NAMES`` are resolved now (each missing one is one WARNING line), and
    any drift recorded before (a patch target, a module, a hook site)
    counts. Then prefetch stays off for every load of this process."""
    check_vllm_names(NAMES)
    if DRIFT:
        _vllm_log.debug("l2sched: prefetch off: vLLM drift (%s)", ", ".join(DRIFT))
        return True
    return False


def refuse_drift() -> None:
    """Raise ``VllmDrift`` at DEBUG (its names were logged already) when
    ``drifted``: prefetch stays off."""
    if drifted():
        err = VllmDrift(", ".join(DRIFT), "logged before")
        err.level = logging.DEBUG
        raise err
