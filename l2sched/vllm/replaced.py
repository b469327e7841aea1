"""Hooked modules replaced after the plugin installed, and loaders that skip
the post-load function the plugin hooks.

vLLM's LoRA manager wraps ``qkv_proj``, ``o_proj``, the MoE ``gate`` and
more in ``*WithLoRA`` layers (``LoRAModelManager._create_lora_modules``)
after the model is loaded and the plugin installed, before any graph is
captured (``after_lora``). At that moment, and when a loader returns its
model (``after_load``), every hooked module is looked up again
(``runtime.sites.Installed.follow``): a hook on a module that a wrapper now stands
for (the original kept as ``base_layer``) is hooked again at the wrapper;
a hook whose module was replaced otherwise is taken out and reported. The
summary then counts only the issues that can fire:

* hooks moved to wrappers: one INFO line naming them, and how many issues
  can fire;
* each window that lost a hook: one WARNING line naming the window, its
  hook point, the layers and what replaced the module; then the summary
  line again with the issues that can fire;
* the join's module replaced, or no issue left: one ``prefetch OFF`` line
  and the plan is removed.

``after_load``: a loader that never calls ``process_weights_after_loading``
(``TensorizerLoader``) gets the post-load step when its ``load_model``
returns; one that did call it gets the check above. Never raises into
vLLM.
"""

from __future__ import annotations

from collections import defaultdict

from l2sched.model.adapters import adapter_for
from l2sched.vllm.layout import parallel_layout
from l2sched.vllm.plugin import INSTALLED, activate_after_load, installed_for, log


def after_lora(manager) -> None:
    """``LoRAModelManager._create_lora_modules`` returned: ``manager.model``'s
    LoRA targets are wrapped; follow the hooks (module docstring)."""
    follow_model(getattr(manager, "model", None), "vLLM's LoRA manager returned")


def after_load(model, vllm_config, loader: str, post_loaded: bool) -> None:
    """A model loader (class name ``loader``) returned ``model``. When
    ``process_weights_after_loading`` ran for it (``post_loaded``), the
    plugin's post-load step ran there: follow hooked modules replaced since
    (module docstring); otherwise run the post-load step now
    (``plugin.activate_after_load`` with ``vllm_config``, the loader's
    argument). Never raises."""
    if model is None:
        return
    if post_loaded:
        follow_model(model, f"the model loader ({loader}) returned")
    else:
        activate_after_load(model, vllm_config)


def follow_model(model, when: str) -> None:
    """Look up every hook of ``model``'s installation again, at the moment
    ``when`` names for the log lines (``vLLM's LoRA manager returned``), and
    log what was replaced (module docstring). Nothing installed in
    ``model``: nothing to do. Never raises."""
    inst = installed_for(model) if model is not None else None
    if inst is None:
        return
    rank = "TP rank ?"
    try:
        rank = parallel_layout(inst.vllm_config).rank_txt
        changes = inst.follow(adapter_for(type(model).__name__).decoder_layers(model))
        off = bool(changes) and _report(inst, changes, when, rank)
    except Exception as e:  # never raise into vLLM
        log.error("l2sched: %s: prefetch OFF: unexpected %s while looking up the "
                  "hooked modules when %s: %s", rank, type(e).__name__, when, e)
        off = True
    if off:  # the plan goes (retire restores attributes only)
        if inst in INSTALLED:
            INSTALLED.remove(inst)
        inst.retire()


def _report(inst, changes, when: str, rank: str) -> bool:
    """The log lines for ``changes`` (``runtime.slots.SlotChange``) of
    ``inst`` (module docstring); True when prefetch is off: the plan must
    go."""
    issues = inst.plan.issues
    firing = len(issues) - len(inst.lost)
    join = [c for c in changes if c.join and c.action == "lost"]
    if join or firing == 0:
        why = (f"{_what(join[0], when)}; the fills are joined there" if join
               else f"none of the plan's {len(issues)} issues can fire: their hooked "
               f"modules were replaced (found when {when})")
        log.error("l2sched: %s: prefetch OFF: %s (the plan was removed)", rank, why)
        return True
    moved = _grouped(c for c in changes if c.action != "lost")
    if moved:
        log.info("l2sched: %s: hooked modules were wrapped after the plugin installed "
                 "(found when %s); the hooks follow them: %s; %d of %d issues can "
                 "fire", rank, when, "; ".join(moved), firing, len(issues))
    lost: dict[str, dict] = defaultdict(lambda: {"layers": set(), "hooks": set(),
                                                 "why": set()})
    for c in changes:
        if c.action != "lost":
            continue
        for i in c.issues:
            entry = lost[issues[i].window]
            entry["layers"].add(issues[i].layer)
            entry["hooks"].add(issues[i].hook)
            entry["why"].add(_what(c, when))
    for window, e in lost.items():
        layers = sorted(e["layers"])
        log.warning("l2sched: %s: window %s cannot fire in layer%s %s (hook point %s): "
                    "%s", rank, window, "s" if len(layers) > 1 else "",
                    ", ".join(map(str, layers)), ", ".join(sorted(e["hooks"])),
                    "; ".join(sorted(e["why"])))
    if lost:
        inst.summary = inst.summarize(inst.firing_plan())
        log.info("l2sched: %s: with the hooks that can fire: %s", rank, inst.summary)
    return False


def _what(c, when: str) -> str:
    """What happened to the module of change ``c``, for a WARNING line."""
    where = f"{c.path or 'the decoder layer'} ({c.old}) of layer {c.layer}"
    new = "removed" if c.new is None else f"replaced by {c.new}"
    return (f"{where} was {new} after the plugin installed ({c.reason}; found when "
            f"{when})")


def _grouped(changes) -> list[str]:
    """``PATH OLD -> NEW in N layers (hook moved|method wrapper kept)``, one
    entry per distinct replacement."""
    layers: dict[tuple, set] = defaultdict(set)
    for c in changes:
        layers[(c.path, c.old, c.new, c.action)].add(c.layer)
    how = {"moved": "hook moved to the wrapper", "kept": "method wrapper kept"}
    return [f"{path or 'the decoder layer'} {old} -> {new} in {len(ls)} "
            f"layer{'s' if len(ls) > 1 else ''} ({how[action]})"
            for (path, old, new, action), ls in layers.items()]
