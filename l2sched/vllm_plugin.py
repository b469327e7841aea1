"""vLLM general plugin: compile and install an L2-prefetch schedule per TP rank.

Entry point (``pyproject.toml``)::

    [project.entry-points."vllm.general_plugins"]
    l2sched = "l2sched.vllm_plugin:register"

vLLM calls ``register()`` once per process (API server, engine core, every
worker) before any model is built. ``register()`` is cheap: it imports
nothing heavy and only arranges for ``activate_after_load`` to run right after
vLLM's ``process_weights_after_loading(model, model_config, device)``
(``vllm/model_executor/model_loader/utils.py:139``), the function every model
loader calls last, after all per-layer post-load processing (MLA's
``W_UK_T``/``W_UV``) and the model-level hook. Why this point and not a
registry override subclass: see ``docs/vllm.md`` ("How it hooks in").

Opt in with either

* ``--additional-config '{"l2sched": {"schedule": "x.l2s", "set": {"window.B.budget": "25MB"}}}'``
  (read from ``vllm_config.additional_config``), or
* ``L2SCHED_SCHEDULE=x.l2s`` plus optional ``L2SCHED_SET="k=v,k=v"``.

``additional_config`` wins when both are given. Optional keys (or env vars):
``backend`` (``L2SCHED_BACKEND``): ``cuda`` (default) or ``dry-run`` (records
issues, no GPU; for CPU checks); ``lint`` (``L2SCHED_LINT``): ``true``
(default) or ``false``. With neither schedule source, nothing happens.

Per TP rank, after loading: live inventory of the rank's own module tree ->
``compile_plan`` -> lint with the device profile of the rank's GPU (an error
refuses to install) -> ``install`` with the join as a forward post-hook on the
last decoder layer (it runs before ``Glm5NextModel.forward``'s
pipeline-parallel early return) -> one summary log line. Every failure is one
log line per rank, prefetch stays off for that rank, and nothing is raised
into vLLM.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

try:  # vLLM's logger convention, so the lines share vLLM's format and level.
    from vllm.logger import init_logger as _init_logger

    log = _init_logger("vllm.l2sched")
except Exception:  # pragma: no cover - vLLM absent or broken
    log = logging.getLogger("l2sched.vllm_plugin")

#: vLLM module whose ``process_weights_after_loading`` is wrapped.
LOADER_UTILS = "vllm.model_executor.model_loader.utils"
#: Architectures (class names of the top-level model) the plugin serves.
ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
ENV_SCHEDULE, ENV_SET = "L2SCHED_SCHEDULE", "L2SCHED_SET"
ENV_BACKEND, ENV_LINT = "L2SCHED_BACKEND", "L2SCHED_LINT"

_lock = threading.Lock()
_registered = False
_original_pwal = None
#: The live installations of this process (one per loaded model).
INSTALLED: list["Installed"] = []


# --------------------------------------------------------------------------
# user configuration


@dataclass(frozen=True)
class PluginConfig:
    """What the user asked for: ``schedule`` path, ``overrides`` as
    ``KEY=VALUE`` strings (the CLI's ``--set``), ``backend`` (``cuda`` or
    ``dry-run``), ``lint`` on/off, and ``source`` (``additional-config`` or
    ``env``) for the log lines."""

    schedule: str
    overrides: tuple[str, ...] = ()
    backend: str = "cuda"
    lint: bool = True
    source: str = "env"


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "off", "no", "")
    return bool(v)


def parse_set_env(text: str) -> tuple[str, ...]:
    """``"k=v,k=v"`` (``L2SCHED_SET``) -> ``("k=v", "k=v")``; blanks dropped."""
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def read_config(additional_config: Mapping | None,
                environ: Mapping[str, str] | None = None) -> PluginConfig | None:
    """The ``PluginConfig`` from ``additional_config["l2sched"]`` (a dict with
    ``schedule`` and optional ``set``: a dict or a list of ``KEY=VALUE``,
    ``backend``, ``lint``), else from the environment (``L2SCHED_SCHEDULE``,
    ``L2SCHED_SET``, ``L2SCHED_BACKEND``, ``L2SCHED_LINT``); ``None`` when
    neither names a schedule. Raises ``ValueError`` on a malformed value."""
    env = os.environ if environ is None else environ
    section = (additional_config or {}).get("l2sched")
    if section is not None:
        if not isinstance(section, Mapping) or not section.get("schedule"):
            raise ValueError('additional_config "l2sched" must be an object with '
                             'a "schedule" path, e.g. {"l2sched": {"schedule": '
                             '"x.l2s"}}')
        sets = section.get("set") or {}
        if isinstance(sets, Mapping):
            overrides = tuple(f"{k}={v}" for k, v in sets.items())
        elif isinstance(sets, (list, tuple)):
            overrides = tuple(str(s) for s in sets)
        else:
            raise ValueError('additional_config "l2sched.set" must be an object '
                             '{"window.B.budget": "25MB"} or a list of "k=v"')
        return PluginConfig(str(section["schedule"]), overrides,
                            str(section.get("backend", env.get(ENV_BACKEND, "cuda"))),
                            _as_bool(section.get("lint", env.get(ENV_LINT, "1"))),
                            "additional-config")
    path = env.get(ENV_SCHEDULE, "").strip()
    if not path:
        return None
    return PluginConfig(path, parse_set_env(env.get(ENV_SET, "")),
                        env.get(ENV_BACKEND, "cuda").strip() or "cuda",
                        _as_bool(env.get(ENV_LINT, "1")), "env")


# --------------------------------------------------------------------------
# registration (cheap; runs in every vLLM process)


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


# --------------------------------------------------------------------------
# the post-load step


@dataclass
class Installed:
    """A plan installed in one model: ``plan``, ``runtime`` (the backend),
    ``installations`` (one per layer kind, ``l2sched.install.Installation``),
    ``summary`` (the log line). ``remove()`` takes every hook out."""

    plan: Any
    runtime: Any
    installations: list = field(default_factory=list)
    summary: str = ""
    lint: str = ""

    def remove(self) -> None:
        """Remove every hook of this plan; idempotent."""
        for inst in reversed(self.installations):
            inst.remove()


class PluginError(Exception):
    """A reason to leave prefetch off on this rank (one log line)."""

    def __init__(self, what: str, detail: str = ""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


def _route_library_logs() -> None:
    """Send the ``l2sched.*`` loggers (runtime, installer, kernel) to vLLM's
    handler so their lines appear in the server log in vLLM's format."""
    lib = logging.getLogger("l2sched")
    vllm_logger = logging.getLogger("vllm")
    if lib.handlers or not vllm_logger.handlers:
        return
    for h in vllm_logger.handlers:
        lib.addHandler(h)
    lib.setLevel(vllm_logger.level or logging.INFO)
    lib.propagate = False


def _current_vllm_config():
    try:
        from vllm.config import get_current_vllm_config_or_none

        return get_current_vllm_config_or_none()
    except Exception:
        return None


def _tp_layout(vllm_config) -> tuple[int, int, bool, int]:
    """``(tp, tp_rank, ep, pp)`` of this process."""
    from vllm.distributed import (get_tensor_model_parallel_rank,
                                  get_tensor_model_parallel_world_size)

    tp = get_tensor_model_parallel_world_size()
    rank = get_tensor_model_parallel_rank()
    pc = getattr(vllm_config, "parallel_config", None)
    ep = bool(getattr(pc, "enable_expert_parallel", False)) and tp > 1
    pp = int(getattr(pc, "pipeline_parallel_size", 1) or 1)
    return tp, rank, ep, pp


def _text_model(model):
    """The ``Glm5NextModel`` inside a CausalLM or ConditionalGeneration."""
    for path in ("model", "language_model.model"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if hasattr(obj, "layers"):
            return obj
    raise PluginError("unsupported model", f"{type(model).__name__} has no "
                      "decoder layers at .model.layers or "
                      ".language_model.model.layers")


def activate_after_load(model, vllm_config=None, *, environ=None,
                        config: PluginConfig | None = None) -> Installed | None:
    """The post-load step for one loaded ``model`` (never raises).

    Reads the configuration (``config``, else ``vllm_config`` /
    the current vLLM config's ``additional_config`` and the environment);
    returns ``None`` when no schedule is configured, the model is not a
    GLM-5.3 architecture (e.g. an MTP drafter), or anything failed (logged as
    one line for this rank, prefetch off). On success returns the
    ``Installed`` handle (also appended to ``INSTALLED``)."""
    rank_txt = "TP rank ?"
    try:
        vllm_config = vllm_config or _current_vllm_config()
        if config is None:
            extra = getattr(vllm_config, "additional_config", None) or {}
            config = read_config(extra, environ)
        if config is None:
            return None
        arch = type(model).__name__
        if arch not in ARCHITECTURES:
            log.debug("l2sched: %s is not one of %s; not prefetched", arch,
                      ", ".join(ARCHITECTURES))
            return None
        _route_library_logs()
        tp, tp_rank, ep, pp = _tp_layout(vllm_config)
        rank_txt = f"TP rank {tp_rank}/{tp}"
        installed = _activate(model, vllm_config, config, tp, tp_rank, ep, pp)
        INSTALLED.append(installed)
        log.info("l2sched: %s: %s", rank_txt, installed.summary)
        return installed
    except PluginError as e:
        log.error("l2sched: %s: prefetch OFF: %s", rank_txt, e)
    except Exception as e:  # never raise into vLLM
        log.error("l2sched: %s: prefetch OFF: unexpected %s: %s", rank_txt,
                  type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    return None


def _first_line(err) -> str:
    diags = getattr(err, "diagnostics", ())
    if diags:
        d = diags[0]
        where = f"{d.span}: " if d.span else ""
        more = f" (+{len(diags) - 1} more)" if len(diags) > 1 else ""
        return f"{where}{d.message}{more}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _activate(model, vllm_config, cfg: PluginConfig, tp: int, tp_rank: int,
              ep: bool, pp: int) -> Installed:
    from .errors import L2sError, L2sInputError, L2sSyntaxError
    from .compile import compile_plan
    from .inventory import live_inventory
    from .semantic import load_schedule

    if cfg.backend not in ("cuda", "dry-run"):
        raise PluginError("bad configuration", f"backend {cfg.backend!r} is not "
                          "'cuda' or 'dry-run'")
    if pp > 1:
        raise PluginError("unsupported layout", f"pipeline parallel size {pp} "
                          "(vLLM gates PP off for GLM-5.3; l2sched supports PP=1)")
    text_model = _text_model(model)
    hf = getattr(getattr(vllm_config, "model_config", None), "hf_text_config", None)
    model_config = hf.to_dict() if hf is not None else None

    try:
        schedule = load_schedule(cfg.schedule, cfg.overrides, model_config)
    except L2sInputError as e:
        raise PluginError(f"cannot read schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    except L2sSyntaxError as e:
        _log_diagnostics(e, tp_rank)
        raise PluginError(f"syntax error in schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise PluginError(f"invalid schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    if schedule.tp != tp or bool(schedule.ep) != ep:
        raise PluginError(
            "schedule/layout mismatch",
            f"{schedule.name} is for tp {schedule.tp} ep "
            f"{'on' if schedule.ep else 'off'}, this server runs tp {tp} ep "
            f"{'on' if ep else 'off'} (fix it with \"set\": {{\"tp\": \"{tp}\"}} "
            "or the matching schedule)")

    device = _device_profile(cfg.backend, schedule.device)
    inventory = live_inventory(text_model.layers, tp, ep, tp_rank,
                               model_name=type(model).__name__)
    try:
        plan = compile_plan(schedule, inventory, tp_rank)
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise PluginError("compile failed", _first_line(e)) from None
    lint_note = _lint(cfg, schedule, inventory, model_config, device, tp_rank)
    runtime = _make_runtime(cfg.backend, plan)
    installed = _install(text_model, inventory, plan, runtime)
    installed.lint = lint_note
    installed.summary = _summary(schedule, plan, inventory, cfg, device, lint_note)
    return installed


def _log_diagnostics(err, tp_rank: int) -> None:
    """The full compiler-style diagnostics, once (TP rank 0)."""
    if tp_rank == 0:
        log.warning("l2sched: diagnostics:\n%s", err)


def _device_profile(backend: str, wanted: str) -> str:
    """The device profile to lint with: the profile whose compute capability
    matches this rank's GPU (the schedule's own when it matches), else the
    schedule's. Raises ``PluginError`` for the CUDA backend without a usable
    GPU (no CUDA, compute capability < 9.0)."""
    if backend == "dry-run":
        return wanted
    import torch

    if not torch.cuda.is_available():
        raise PluginError("unsupported hardware", "no CUDA device in this process "
                          "(use backend dry-run to check a schedule on CPU)")
    from . import kernel as K

    dev = torch.cuda.current_device()
    ok, why = K.device_supported(dev)
    if not ok:
        raise PluginError("unsupported hardware", why)
    cc = list(torch.cuda.get_device_capability(dev))
    profiles = _profiles()
    if profiles.get(wanted) == cc:
        return wanted
    match = sorted(n for n, c in profiles.items() if c == cc)
    if match:
        log.warning("l2sched: schedule written for device %s, this GPU is "
                    "sm_%d%d (%s): linting with device profile %s", wanted,
                    cc[0], cc[1], torch.cuda.get_device_name(dev), match[0])
        return match[0]
    log.warning("l2sched: no device profile for sm_%d%d (%s); linting with the "
                "schedule's %s", cc[0], cc[1], torch.cuda.get_device_name(dev),
                wanted)
    return wanted


def _profiles() -> dict[str, list[int]]:
    """Shipped device profile name -> compute capability."""
    from pathlib import Path

    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    out = {}
    for p in sorted((Path(__file__).parent / "data" / "devices").glob("*.toml")):
        with open(p, "rb") as f:
            out[p.stem] = list(tomllib.load(f).get("compute_capability", []))
    return out


def _lint(cfg: PluginConfig, schedule, inventory, model_config, device: str,
          tp_rank: int) -> str:
    """Lint with ``device``'s profile through ``l2sched.lint.run_lint`` (FULL
    graph mode, as vLLM runs decode) when this build has the lint. Errors
    raise ``PluginError`` (not installed; diagnostics logged once, TP rank
    0); warnings are logged once (TP rank 0). Returns a short note for the
    summary line."""
    if not cfg.lint:
        return "lint off"
    try:
        from .lint import run_lint
        from .devices import load_device
    except ImportError as e:
        if tp_rank == 0:
            log.warning("l2sched: lint is not available in this l2sched build "
                        "(%s); compiled without lint", e)
        return "lint unavailable"
    from .errors import L2sError, L2sLintError

    try:
        run = run_lint(schedule, inventory, device=load_device(device),
                       graph_mode="full", model_config=model_config)
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise PluginError(f"lint failed with device profile {device}",
                          _first_line(e)) from None
    diags = [f.diagnostic(schedule.sources) if hasattr(f, "diagnostic") else f
             for f in getattr(run, "findings", run)]
    errors = [d for d in diags if d.severity == "error"]
    warnings = [d for d in diags if d.severity == "warning"]
    if errors:
        err = L2sLintError(errors)
        _log_diagnostics(err, tp_rank)
        raise PluginError(f"lint error with device profile {device}",
                          _first_line(err))
    if warnings and tp_rank == 0:
        log.warning("l2sched: lint warnings (device profile %s):\n%s", device,
                    "\n".join(d.render() for d in warnings))
    return f"lint {device}: 0 errors, {len(warnings)} warnings"


# --------------------------------------------------------------------------
# runtime and installation


_capture_state = threading.local()


def _in_capture_phase() -> bool:
    return bool(getattr(_capture_state, "depth", 0))


def _track_graph_capture() -> None:
    """Wrap ``GroupCoordinator.graph_capture`` (entered by vLLM around all
    CUDA-graph warm-ups and captures) to know when a forward is an uncaptured
    warm-up right before a capture. Idempotent."""
    from vllm.distributed import parallel_state as ps

    cls = ps.GroupCoordinator
    orig = cls.graph_capture
    if getattr(orig, "__l2sched__", False):
        return
    import contextlib

    @contextlib.contextmanager
    def graph_capture(self, *args, **kwargs):
        _capture_state.depth = getattr(_capture_state, "depth", 0) + 1
        try:
            with orig(self, *args, **kwargs) as ctx:
                yield ctx
        finally:
            _capture_state.depth -= 1

    graph_capture.__l2sched__ = True
    graph_capture.__wrapped__ = orig
    cls.graph_capture = graph_capture


def _has_prefill(md) -> bool:
    if md is None:
        return False
    if isinstance(md, list):
        return any(_has_prefill(m) for m in md)
    if isinstance(md, dict):
        return any(_has_prefill(m) for m in md.values())
    return bool(getattr(md, "num_prefills", 0) or 0)


def _tokens(ctx) -> int | None:
    bd = getattr(ctx, "batch_descriptor", None)
    if bd is not None:
        return int(bd.num_tokens)
    md = ctx.attn_metadata
    if isinstance(md, list):
        md = md[0] if md else None
    if isinstance(md, dict):
        md = next(iter(md.values()), None)
    n = getattr(md, "num_actual_tokens", None)
    return int(n) if n is not None else None


def vllm_step_info():
    """``StepInfo`` of the forward in progress, from vLLM's forward context:
    tokens (batch descriptor, else attention metadata), prefill (any
    attention metadata with ``num_prefills``), graph mode
    (``cudagraph_runtime_mode``), and warm-up (inside vLLM's
    ``graph_capture`` but not capturing). Capture itself is detected by the
    runtime through torch (vLLM V2 reports mode NONE during a FULL capture)."""
    from .runtime import GRAPH_MODES, StepInfo

    try:
        from vllm.forward_context import (get_forward_context,
                                          is_forward_context_available)
        if not is_forward_context_available():
            return StepInfo(warmup=_in_capture_phase())
        ctx = get_forward_context()
    except Exception:
        return StepInfo(warmup=_in_capture_phase())
    mode = getattr(ctx.cudagraph_runtime_mode, "name", "NONE").lower()
    return StepInfo(num_tokens=_tokens(ctx), is_prefill=_has_prefill(ctx.attn_metadata),
                    graph_mode=mode if mode in GRAPH_MODES else "none",
                    warmup=_in_capture_phase())


def _make_runtime(backend: str, plan):
    from .runtime import make_runtime

    try:
        _track_graph_capture()
    except Exception as e:  # pragma: no cover - vLLM internals moved
        log.warning("l2sched: cannot track vLLM graph capture (%s); warm-up "
                    "forwards are not recognised", e)
    return make_runtime(plan, backend, step_provider=vllm_step_info)


class _IssueMap:
    """The runtime seen through a sub-plan: sub-plan issue index -> index in
    the full plan. ``install`` talks to it exactly as to a runtime."""

    def __init__(self, runtime, indices):
        self.runtime = runtime
        self.indices = indices

    def set_rows(self, index, rows):
        return self.runtime.set_rows(self.indices[index], rows)

    def issue(self, index):
        return self.runtime.issue(self.indices[index])

    def join(self):
        self.runtime.join()


def hook_sites(kind) -> dict:
    """``{hook name: HookSite}`` for a layer of ``kind`` (a ``LayerKind``),
    from the adapter's ``Install`` records."""
    from .adapters import glm5next as ad
    from .install import HookSite

    sites = {}
    for h in ad.HOOKS:
        if not h.exists_in(kind):
            continue
        inst = h.install_for(kind)
        if inst.mechanism in ("forward_pre_hook", "forward_hook"):
            sites[h.name] = HookSite(inst.target, "forward_pre" if
                                     inst.mechanism == "forward_pre_hook"
                                     else "forward_post")
        else:
            path, _, attr = inst.target.rpartition(".")
            sites[h.name] = HookSite(path, "wrap_method", attr,
                                     "before" if inst.mechanism == "wrap_before"
                                     else "after")
    return sites


def _install(text_model, inventory, plan, runtime) -> Installed:
    """One ``install`` per layer kind (hook sites differ between KDA and MLA
    layers), all feeding the one runtime; the join goes with the kind of the
    last layer, as a forward post-hook on the last decoder layer (before the
    pipeline-parallel early return of ``Glm5NextModel.forward``)."""
    from .install import install

    layers = list(text_model.layers)
    kinds = list(inventory.kinds)
    if len(layers) != len(kinds):
        raise PluginError("unsupported model", f"{len(layers)} decoder layers, "
                          f"{len(kinds)} with weights")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, wi in enumerate(plan.issues):
        groups[str(kinds[wi.layer])].append(i)
    last_kind = str(kinds[-1])
    groups.setdefault(last_kind, [])
    by_name = {str(k): k for k in kinds}
    out = Installed(plan, runtime)
    try:
        for name in sorted(groups, key=lambda k: k == last_kind):
            idx = groups[name]
            sub = replace(plan, issues=tuple(plan.issues[i] for i in idx))
            out.installations.append(install(
                layers, sub, hook_sites(by_name[name]), _IssueMap(runtime, idx),
                join_on=layers[-1] if name == last_kind else None))
    except Exception as e:
        out.remove()
        raise PluginError("install failed", f"{type(e).__name__}: {e}") from None
    return out


def _summary(schedule, plan, inventory, cfg: PluginConfig, device: str,
             lint_note: str) -> str:
    """The one summary line: bytes per window, windows per layer kind."""
    from .semantic import format_size

    per_window: dict[str, list[int]] = defaultdict(list)
    kinds_windows: dict[str, list[str]] = defaultdict(list)
    for wi in plan.issues:
        per_window[wi.window].append(wi.bytes)
        k = str(inventory.kinds[wi.layer])
        if wi.window not in kinds_windows[k]:
            kinds_windows[k].append(wi.window)
    windows = ", ".join(
        f"{w} {format_size(sum(v))} in {len(v)} layer{'s' if len(v) > 1 else ''}"
        for w, v in per_window.items())
    kinds = "; ".join(
        f"{k}: {'+'.join(kinds_windows.get(k, [])) or 'none'}"
        for k in sorted({str(k) for k in inventory.kinds}))
    total = sum(wi.bytes for wi in plan.issues)
    left = sum(lo.bytes for lo in plan.left_over)
    over = ", ".join(cfg.overrides)
    return (f"schedule {schedule.name} ({cfg.schedule}{'; set ' + over if over else ''}"
            f") installed, backend {cfg.backend}, device {device}, {lint_note}: "
            f"{len(plan.issues)} issues, {format_size(total)} per decode step "
            f"[{windows}]; windows per layer kind [{kinds}]; left over "
            f"{format_size(left)}")
