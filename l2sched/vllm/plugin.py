"""The vLLM plugin's post-load step: per rank, compile and install an
L2-prefetch schedule into the loaded model of any adapter
(``activate_after_load``).

Per rank, after loading: the configuration (``vllm.config``) -> the layout
checks (``vllm.layout``: micro-batching, torch.compile, pipeline
parallelism) -> live inventory of the rank's own module tree (under PP, of
the layers it runs) -> ``compile_plan`` -> lint with the device profile of
the rank's GPU (an error refuses to install) -> ``vllm.sites.install_plan``
with the join as a forward post-hook on the rank's last real decoder layer
(it runs before the model's pipeline-parallel early return) -> one summary
log line. Every failure is one log line per rank, prefetch stays off for
that rank, and nothing is raised into vLLM. ``l2sched.vllm.register`` (the
entry point) arranges for this to run.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from dataclasses import replace

from l2sched.compiler.compile import compile_plan
from l2sched.errors import (L2sError, L2sInputError, L2sLintError, L2sPluginError,
                            L2sSyntaxError)
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import ModelConfigRef
from l2sched.lint import run_lint
from l2sched.model.adapters import adapter_for, supported_architectures
from l2sched.model.adapters.protocol import LiveModel, require
from l2sched.device import DeviceProfile, profile_for_gpu
from l2sched.fit.search import FitOptions
from l2sched.runtime import make_runtime
from l2sched.runtime.set_aside import planned_set_aside, set_aside_requests
from l2sched.runtime.sites import Installed
from l2sched.units import format_size
from l2sched.vllm import agreement as _agreement
from l2sched.vllm.auto import auto_schedule
from l2sched.vllm.config import ENV_SCHEDULE, PluginConfig, read_config
from l2sched.vllm.device_check import checked_device_profile, gpu_identity  # noqa: F401
from l2sched.vllm.device_check import first_line as _first_line
from l2sched.vllm.drift import refuse_drift
from l2sched.vllm.layout import (
    Layout,
    own_layers,
    parallel_layout,
    rank_inventory,
    refuse_compiled,
    refuse_pipeline_parallel,
    refuse_split_batch,
    text_config_dict,
)
from l2sched.vllm.loss_gate import GateRequest, capture_sizes, loss_gate
from l2sched.vllm.sites import install_plan
from l2sched.vllm.step_info import after_capture, track_graph_capture, vllm_step_info
from l2sched.vllm.summary import memset_note, programmatic_note, summary_line, unmeasured_note

try:  # vLLM's logger convention, so the lines share vLLM's format and level.
    from vllm.logger import init_logger as _init_logger

    log = _init_logger("vllm.l2sched")
except Exception:  # pragma: no cover - vLLM absent or broken
    log = logging.getLogger("l2sched.vllm")

#: The live installations of this process (one per loaded model).
INSTALLED: list[Installed] = []


# --------------------------------------------------------------------------
# the post-load step


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


def _decoder_layers(model, ad):
    """The decoder-layer list of ``model``, a model of adapter ``ad`` (its
    ``DECODER_LAYER_PATHS``). Raises ``AdapterCapabilityError`` when the
    adapter cannot read a live model, ``L2sPluginError`` when none of the
    paths holds the layers."""
    layers = require(ad, LiveModel, "the vLLM plugin").decoder_layers(model)
    if layers is model:
        raise L2sPluginError("unsupported model", f"{type(model).__name__} has no "
                             "decoder layers at " + " or ".join(
                                 f".{p}" for p in ad.DECODER_LAYER_PATHS))
    return layers


def _configured(vllm_config, environ) -> bool:
    """Whether any source names the plugin at all (an ``l2sched`` section in
    ``additional_config``, or ``L2SCHED_SCHEDULE``); its values are read and
    validated later, once the TP rank is known for the log line."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    env = os.environ if environ is None else environ
    return "l2sched" in extra or bool((env.get(ENV_SCHEDULE) or "").strip())


def installed_for(model) -> Installed | None:
    """The live installation in ``model`` (the top-level model object), if
    any."""
    for inst in INSTALLED:
        if inst.model is not None and inst.model() is model:
            return inst
    return None


def activate_after_load(model, vllm_config=None, *, environ=None,
                        config: PluginConfig | None = None) -> Installed | None:
    """The post-load step for one loaded ``model`` (never raises).

    Reads the configuration (``config``, else ``vllm_config`` /
    the current vLLM config's ``additional_config`` and the environment);
    returns ``None`` when no schedule is configured, no adapter serves the
    model's class (e.g. an MTP drafter), or anything failed (one line
    for this rank, prefetch off; ``bad configuration`` names the key; vLLM
    drift: ``docs/vllm.md``). On success returns the ``Installed`` handle.

    A model that has an installation already (a weight reload: a second
    ``process_weights_after_loading``, ``reload_weights``, a wake-up; see
    ``reactivate``) first loses it exactly (every hook out); the new plan is
    compiled against the reloaded weights and installed, keeping the runtime
    when the plan's table layout is unchanged (``runtime.adopt``: CUDA graphs
    captured earlier keep the table's address), and its rows are bound at
    once, before any replay. If anything fails, prefetch stays off and the
    line says the earlier plan was removed."""
    rank_txt = "TP rank ?"
    previous = installed_for(model)
    gone = " (the plan installed before the reload was removed)" if previous else ""
    try:
        if previous is not None:
            previous.remove()
        refuse_drift()  # a vLLM name it needs is missing (vllm/drift.py)
        vllm_config = vllm_config or _current_vllm_config()
        if config is None and not _configured(vllm_config, environ):
            _agreement.withdraw()
            if previous is not None:
                raise L2sPluginError("no schedule configured at this reload")
            return None
        arch = type(model).__name__
        if adapter_for(arch) is None:
            log.debug("l2sched: %s is not one of %s; not prefetched", arch,
                      ", ".join(supported_architectures()))
            return None
        _route_library_logs()
        layout = parallel_layout(vllm_config)
        rank_txt = layout.rank_txt
        if config is None:
            extra = getattr(vllm_config, "additional_config", None) or {}
            try:
                config = read_config(extra, environ)
            except L2sPluginError as e:
                _agreement.publish(rank_txt, error=str(e))
                raise
        _agreement.publish(rank_txt, config)
        installed = _activate(model, vllm_config, config, layout, previous)
        installed.model, installed.config = weakref.ref(model), config
        installed.vllm_config = vllm_config
        if previous is not None:
            INSTALLED.remove(previous)
        INSTALLED.append(installed)
        how = "reinstalled after a weight reload: " if previous else ""
        log.info("l2sched: %s: %s%s", rank_txt, how, installed.summary)
        return installed
    except L2sPluginError as e:  # ERROR; a predicted loss (nothing failed): WARNING
        log.log(e.level, "l2sched: %s: prefetch OFF: %s%s", rank_txt, e, gone)
    except Exception as e:  # never raise into vLLM
        log.error("l2sched: %s: prefetch OFF: unexpected %s: %s%s", rank_txt,
                  type(e).__name__, str(e).splitlines()[0] if str(e) else "", gone)
    if previous is not None:
        _drop(previous)
    return None


def _drop(installed: Installed) -> None:
    """Take ``installed`` out for good (never raises)."""
    try:
        installed.retire()
    except Exception as e:  # pragma: no cover - removal restores attributes only
        log.warning("l2sched: removing the earlier plan: %s: %s", type(e).__name__, e)
    if installed in INSTALLED:
        INSTALLED.remove(installed)


def reactivate(model) -> Installed | None:
    """A reload path ran for ``model`` outside ``process_weights_after_loading``
    (vLLM's ``reload_weights``, ``finalize_layerwise_reload`` of a weight
    transfer, a wake-up): redo the post-load step with the configuration the
    model's installation was made with (``activate_after_load``); with no
    installation, the post-load step with the current configuration. Never
    raises."""
    prev = installed_for(model)
    if prev is None:
        return activate_after_load(model)
    return activate_after_load(model, prev.vllm_config, config=prev.config)


def _activate(model, vllm_config, cfg: PluginConfig, layout: Layout,
              previous: Installed | None) -> Installed:
    """Everything from the schedule to the installed plan, for one rank
    (``layout``: its TP/EP/PP layout); ``previous``: the installation a
    reload replaces (its hooks are out already). Raises
    ``L2sPluginError``."""
    tp, tp_rank = layout.tp, layout.tp_rank
    if cfg.backend not in ("cuda", "dry-run"):
        raise L2sPluginError("bad configuration", f"backend {cfg.backend!r} is not "
                          "'cuda' or 'dry-run'")
    ad = adapter_for(type(model).__name__)
    refuse_pipeline_parallel(ad, layout)
    refuse_split_batch(vllm_config)
    refuse_compiled(model, ad, vllm_config)
    layers = _decoder_layers(model, ad)
    own = own_layers(layers) if layout.pp > 1 else range(len(layers))
    model_config = text_config_dict(vllm_config)
    schedule = _schedule(cfg, vllm_config, model_config, layout)
    device = cfg.device or schedule.device
    device_profile = checked_device_profile(cfg.backend, device)
    if schedule.model != ad.NAME:
        raise L2sPluginError(
            "schedule/model mismatch", f"{schedule.name} is for model "
            f"{schedule.model}, this server runs {type(model).__name__} ({ad.NAME})")
    inventory = rank_inventory(layers, own, model_config, layout, type(model).__name__,
                               ad)
    try:  # under PP only the rank's own layers, and no fill of another rank's
        plan = compile_plan(schedule, inventory, tp_rank,
                            layers=None if len(own) == len(layers) else own)
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise L2sPluginError("compile failed", _first_line(e)) from None
    owner = f"plan {schedule.name} of model {id(model):#x}"
    lint_schedule, aside_note = schedule, ""
    if cfg.backend == "cuda":
        import torch
        lint_schedule, aside_note = set_aside_for_lint(
            schedule, torch.cuda.current_device(), owner)
    # the set-aside variant compiles to the same issues (compile_plan reads
    # the set-aside into the plan only)
    lint_plan = plan if lint_schedule is schedule else replace(
        plan, set_aside=lint_schedule.set_aside)
    lint_note, linted = _lint(cfg, lint_schedule, inventory, model_config, device_profile,
                              device, tp_rank, layout.rank_txt, plan=lint_plan)
    lint_note += loss_gate(cfg, GateRequest(lint_schedule, lint_plan, inventory, device_profile,
                                            model_config, tp, tp_rank, linted),
                           vllm_config, log, lint=run_lint)
    if aside_note:
        lint_note = f"{lint_note} ({aside_note})"
    runtime = _runtime_for(cfg.backend, plan, owner, previous, layout.rank_txt, device_profile,
                           cfg.capture_launch)
    runtime.switch(cfg.fills == "on")  # outside a capture: the post-load step
    installed = install_plan(layers, inventory, plan, runtime, join_layer=own[-1])
    if previous is not None:
        installed.bind_now()
    installed.lint = lint_note
    installed.summarize = functools.partial(  # again if hooks move: vllm/replaced.py
        summary_line, schedule, inventory=inventory, cfg=cfg, device=device,
        lint_note=lint_note, unmeasured=unmeasured_note(device_profile, tp, plan, schedule, cfg),
        groups=runtime.groups_of)
    installed.summary = installed.summarize(plan)
    return installed


def _schedule(cfg: PluginConfig, vllm_config, model_config, layout: Layout):
    """The resolved schedule of ``cfg`` (a file, or ``auto``'s fit) for the
    live ``model_config``, checked against the server's TP/EP ``layout``.
    Raises ``L2sPluginError`` (diagnostics logged once, TP rank 0)."""
    tp, tp_rank, ep = layout.tp, layout.tp_rank, layout.ep
    try:
        schedule = (_auto(cfg, vllm_config, model_config, layout) if cfg.is_auto
                    else load_schedule(cfg.schedule, cfg.overrides, model_config,
                                       LIVE_CONFIG))
    except L2sPluginError:
        raise
    except L2sInputError as e:
        raise L2sPluginError(f"cannot read schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    except L2sSyntaxError as e:
        _log_diagnostics(e, tp_rank)
        raise L2sPluginError(f"syntax error in schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise L2sPluginError(f"invalid schedule {cfg.schedule!r}",
                          _first_line(e)) from None
    if schedule.tp != tp or bool(schedule.ep) != ep:
        raise L2sPluginError(
            "schedule/layout mismatch",
            f"{schedule.name} is for tp {schedule.tp} ep "
            f"{'on' if schedule.ep else 'off'}, this server runs tp {tp} ep "
            f"{'on' if ep else 'off'} (fix it with \"set\": {{\"tp\": \"{tp}\"}} "
            "or the matching schedule)")
    named = schedule.config_ref.replaced if schedule.config_ref else None
    if named is not None and schedule.config_ref.differs:
        # its windows were written for another model: the live config rules
        raise L2sPluginError(
            "schedule/model mismatch",
            f"{schedule.name} names model config {named.name}, this server's model "
            f"differs from it in {', '.join(schedule.config_ref.differs)} (remove the "
            "schedule's model_config line to use it with this model, or serve the "
            "model it names)")
    return schedule


#: What names the live model's config (``Schedule.config_ref``): it takes the
#: place of a schedule's ``model_config`` line (``_schedule`` refuses a
#: schedule whose line names a config that differs from it).
LIVE_CONFIG = ModelConfigRef("the live model's config", "", "live model")


class AutoNoPrefetch(L2sPluginError):
    """``"schedule": "auto"`` chose no prefetch (the fit's answer: logged at
    INFO) or could not fit (no measured profile, EP on: WARNING)."""


def _auto(cfg: PluginConfig, vllm_config, model_config, layout: Layout):
    """The ``Schedule`` that ``"schedule": "auto"`` fits for this engine
    (``vllm.auto.auto_schedule``: the live model config, TP/EP, the device
    profile (the plugin's ``device``, else the shipped measured profile of
    this GPU, ``device.profile_for_gpu``), vLLM's capture sizes up to the
    fit's largest M), its choice logged in one INFO line per rank. Raises
    ``AutoNoPrefetch`` for no prefetch, ``L2sPluginError`` when the fit
    fails."""

    gpu = None
    name = cfg.device
    if cfg.backend == "cuda":
        import torch
        gpu = gpu_identity(torch.cuda.current_device())
        name = name or profile_for_gpu(gpu)
    device_profile = None
    if name is not None:
        device_profile = checked_device_profile(cfg.backend, name)  # checks it is this GPU's
        if name.endswith(".toml"):
            name = os.path.abspath(name)
    choice = auto_schedule(model_config or {}, layout.tp, layout.ep, device_profile, name or "",
                           tokens=capture_sizes(vllm_config, FitOptions.max_tokens),
                           gpu=gpu)
    if not choice.prefetch:
        err = AutoNoPrefetch(choice.summary)
        err.level = 20 if choice.reason == "no prefetch" else 30  # INFO, WARNING
        raise err
    log.info("l2sched: %s: %s", layout.rank_txt, choice.summary)
    return choice.schedule(model_config)


def _log_diagnostics(err, tp_rank: int) -> None:
    """The full compiler-style diagnostics, once (TP rank 0)."""
    if tp_rank == 0:
        log.warning("l2sched: diagnostics:\n%s", err)


def _lint(cfg: PluginConfig, schedule, inventory, model_config,
          device_profile: DeviceProfile, device: str, tp_rank: int, rank_txt: str,
          plan=None) -> tuple[str, dict]:
    """Lint with ``device_profile`` (named ``device`` in the log lines)
    through ``l2sched.lint.run_lint`` (FULL graph mode, as vLLM runs
    decode). With ``cfg.lint == "error"`` (the default) an error-severity
    finding raises ``L2sPluginError`` (not installed; diagnostics logged
    once, TP rank 0); with ``"warn"`` the
    errors are logged and the plan is installed anyway, with one WARNING
    line per rank saying so (the explicit override); ``"off"`` skips the
    lint. Warnings are logged once (TP rank 0). ``plan``: the rank's
    compiled plan (None: compiled here for ``tp_rank``). Returns a short note
    for the summary line and ``{1: findings}`` of the run (it lints M = 1;
    the loss gate reuses them: ``GateRequest.linted``)."""
    if cfg.lint == "off":
        return "lint off", {}
    try:
        # the rank's own plan, the one it installs (compiled once)
        run = run_lint(schedule, inventory, device_profile=device_profile, graph_mode="full",
                       model_config=model_config, tp_rank=tp_rank, plan=plan)
    except L2sError as e:
        _log_diagnostics(e, tp_rank)
        raise L2sPluginError(f"lint failed with device profile {device}",
                          _first_line(e)) from None
    diags = [f.diagnostic(schedule.sources) if hasattr(f, "diagnostic") else f
             for f in getattr(run, "findings", run)]
    errors = [d for d in diags if d.severity == "error"]
    warnings = [d for d in diags if d.severity == "warning"]
    note = f"lint {device}: 0 errors"
    if errors:
        err = L2sLintError(errors)
        _log_diagnostics(err, tp_rank)
        if cfg.lint != "warn":
            raise L2sPluginError(f"lint error with device profile {device}",
                              _first_line(err))
        n = f"{len(errors)} error{'s' if len(errors) > 1 else ''}"
        log.warning("l2sched: %s: installing despite %s (\"lint\": \"warn\" in "
                    "the plugin configuration): %s", rank_txt, n, _first_line(err))
        note = f"lint {device}: {n} (overridden: lint warn)"
    if warnings and tp_rank == 0:
        log.warning("l2sched: lint warnings (device profile %s):\n%s", device,
                    "\n".join(d.render() for d in warnings))
    return f"{note}, {len(warnings)} warnings", {1: list(getattr(run, "findings", run))}


# --------------------------------------------------------------------------
# runtime


def set_aside_for_lint(schedule, device_index: int, owner: str):
    """``(schedule, note)``: ``schedule`` with the persisting-L2 set-aside
    that will be in force on ``device_index`` once ``owner``'s request is made
    (``runtime.set_aside.planned_set_aside``: the largest request of all
    plans on the device), so the lint models what will run; ``note`` says
    whose request that is (empty, and ``schedule`` itself, when it is the
    schedule's own)."""
    want = planned_set_aside(device_index, schedule.set_aside, owner)
    if want == schedule.set_aside:
        return schedule, ""
    whose = [o for o, v in sorted(set_aside_requests(device_index).items())
             if o != owner and v == want]
    size = "the device maximum" if want < 0 else format_size(want)
    return (replace(schedule, set_aside=want),
            f"linted with the set-aside in force on device {device_index}: {size}, "
            f"the request of {', '.join(whose)}")


def _runtime_for(backend: str, plan, owner: str, previous: Installed | None,
                 rank_txt: str, device_profile: DeviceProfile, capture_launch: str | None = None):
    """The runtime for a new ``plan``: at a reload, the previous one when it
    takes the plan (``adopt``: same backend, capture launch and table layout, so CUDA graphs
    captured before keep working and see the new rows); otherwise the
    previous one is retired (its table zeroed: graphs captured before launch
    fills of nothing until vLLM captures again, which a WARNING line says)
    and a new one is made."""
    if previous is not None:
        old = previous.runtime
        if (getattr(previous.config, "backend", None) == backend
                and getattr(previous.config, "capture_launch", None) == capture_launch
                and old.adopt(plan)):
            return old
        old.retire()
        if backend == "cuda" and old.stats.issued:
            log.warning("l2sched: %s: the reloaded plan has another table layout; "
                        "CUDA graphs captured before the reload launch no fills "
                        "until vLLM captures them again", rank_txt)
    return _make_runtime(backend, plan, owner, device_profile, capture_launch)


def _make_runtime(backend: str, plan, owner: str, device_profile: DeviceProfile,
                  capture_launch: str | None = None):
    """The runtime of ``backend`` for ``plan``, its gate fed by vLLM's
    forward context, its fill kernels from ``device_profile``, its
    persisting-L2 request made as ``owner``, its fills entering FULL graphs
    by ``capture_launch`` (``None``: the runtime's default)."""
    try:
        track_graph_capture()
        after_capture(report_programmatic)
    except Exception as e:  # pragma: no cover - vLLM internals moved
        log.warning("l2sched: cannot track vLLM graph capture (%s); warm-up "
                    "forwards are not recognised", e)
    kw = {"set_aside_owner": owner} if backend == "cuda" else {}
    if backend == "cuda" and capture_launch is not None:
        kw["capture_launch"] = capture_launch
    return make_runtime(plan, backend, device_profile=device_profile,
                        step_provider=vllm_step_info, **kw)


def report_programmatic() -> None:
    """After vLLM's CUDA-graph capture, per installation whose fills start late behind
    programmatic-launch kernels (``summary.programmatic_note``, ``runtime.pdl_watch``) or whose
    captured step has MEMSET nodes beside forked fills (``summary.memset_note``):
    its summary line again with that note at its end (INFO, once per count). Never raises."""
    for inst in list(INSTALLED):
        try:
            note = (programmatic_note(getattr(inst.runtime, "stats", None))
                    + memset_note(inst.runtime))
            if not note or note == getattr(inst, "programmatic_noted", "") or not inst.summarize:
                continue
            inst.programmatic_noted = note
            try:
                rank = parallel_layout(inst.vllm_config).rank_txt
            except Exception:  # a config the layout cannot read: the line still goes out
                rank = "TP rank ?"
            inst.summary = inst.summarize(inst.firing_plan(), runtime_note=note)
            log.info("l2sched: %s: after CUDA-graph capture: %s", rank, inst.summary)
        except Exception as e:  # never raise into vLLM
            log.debug("l2sched: programmatic-launch note failed: %s: %s", type(e).__name__, e)
