"""Installing a plan into a model's decoder layers (vLLM's or the bench
tree's): the hook sites of each layer kind (from the model adapter's
``Install`` records), keyed by (layer kind, hook point), and one
installation of the whole plan feeding one runtime. ``install_plan`` is the
public API the benchmarks use; the vLLM plugin calls it through
``vllm.sites.install_plan``, which turns a missing hook site into vLLM
drift."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from l2sched.attrs import resolve_path
from l2sched.errors import L2sInstallError, L2sPluginError
from l2sched.model.adapters import DEFAULT_ADAPTER, get_adapter
from l2sched.runtime.install import HookSite, install

__all__ = ["Installed", "MissingHookSites", "hook_sites", "install_plan", "missing_sites"]


class MissingHookSites(L2sInstallError):
    """Hook sites the plan uses that the live decoder layers lack
    (``missing_sites``); ``sites``: one entry per site, as
    ``missing_sites`` words it."""

    def __init__(self, sites: list[str]):
        super().__init__("hook site " + "; ".join(sites))
        self.sites = list(sites)


@dataclass
class Installed:
    """A plan installed in one model: ``plan``, ``runtime`` (the backend),
    ``installations`` (``runtime.install.Installation``: one per plan),
    ``summary`` (the log line). The plugin also records ``model`` (a weak
    reference to the top-level model) and ``config``/``vllm_config`` (what it
    was installed with), to find and redo it at a weight reload, and
    ``summarize`` (the summary line of a plan: ``summarize(plan)``).
    ``remove()`` takes every hook out; ``retire()`` also retires the
    runtime; ``switch(on)`` turns the fills on or off at run time;
    ``follow(layers)`` keeps the hooks on modules replaced after install,
    ``lost`` holds the plan issue indices whose hooks cannot fire."""

    plan: Any
    runtime: Any
    installations: list = field(default_factory=list)
    summary: str = ""
    lint: str = ""
    model: Any = None
    config: Any = None
    vllm_config: Any = None
    summarize: Any = None
    lost: set = field(default_factory=set)
    #: the programmatic-launch note last logged (``vllm.plugin.report_programmatic``)
    programmatic_noted: str = ""

    def remove(self) -> None:
        """Remove every hook of this plan, leaving the runtime as it is (the
        caller may install again with it, or a reload hand it the new plan:
        ``runtime.adopt``); idempotent."""
        for inst in reversed(self.installations):
            inst.remove()

    def retire(self) -> None:
        """The plan is gone for good: ``remove()`` and retire the runtime
        (device-wide state given back: the persisting-L2 request; fills a
        CUDA graph captured earlier still launches fill nothing);
        idempotent."""
        self.remove()
        self.runtime.retire()

    def switch(self, on: bool) -> bool:
        """The run-time switch of this plan's fills (``runtime.switch``):
        CUDA graphs captured with them fill or not from their next replay.
        Returns False, changing nothing, during a capture."""
        return self.runtime.switch(on)

    def follow(self, decoder_layers) -> list:
        """The hooked modules replaced in ``decoder_layers`` (the model's
        decoder layers now) since install, each hook moved to a wrapper that
        keeps the original as ``base_layer``, kept, or taken out
        (``runtime.install.Installation.follow``); the issues of a hook
        taken out join ``lost``. Returns the ``runtime.slots.SlotChange``
        list (``[]``: nothing was replaced)."""
        layers = list(decoder_layers)
        changes = [c for inst in self.installations for c in inst.follow(layers)]
        self.lost.update(i for c in changes if c.action == "lost" for i in c.issues)
        return changes

    def firing_plan(self):
        """``plan`` without the ``lost`` issues: what can fire."""
        if not self.lost:
            return self.plan
        return replace(self.plan, issues=tuple(
            wi for i, wi in enumerate(self.plan.issues) if i not in self.lost))

    def bind_now(self) -> None:
        """Bind every range to its tensor now and write the rows where the
        fills read them (the device table), instead of at the next firing:
        a replayed CUDA graph fires no Python hook."""
        for inst in self.installations:
            inst.bind_all()
        self.runtime.flush()


def hook_sites(kind, model: str = DEFAULT_ADAPTER) -> dict:
    """``{hook name: HookSite}`` for a layer of ``kind`` (a layer kind of
    adapter ``model``), from the adapter's hook catalogue (``HOOKS``,
    ``install_for``). Raises ``KeyError`` for an unknown adapter."""
    sites = {}
    for h in get_adapter(model).HOOKS:
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


def missing_sites(layers, keys, plan, sites) -> list[str]:
    """The hook sites ``plan`` uses that the live ``layers`` lack (a module
    path that does not resolve, a module hook on something that is not a
    module, a wrapped method that is missing or not callable), one entry per
    site: ``PATH`` (``.ATTRIBUTE``) ``on layer(s) N[, M]`` with the hook
    point."""
    missing: dict[tuple, list[int]] = {}
    for wi in plan.issues:
        if not 0 <= wi.layer < len(layers):
            continue
        site = sites.get((keys[wi.layer], wi.hook))
        if site is None or site.optional:
            continue
        try:
            obj = resolve_path(layers[wi.layer], site.path)
        except AttributeError:
            obj = None
        if site.kind == "wrap_method":
            ok = obj is not None and callable(getattr(obj, site.attribute, None))
        else:
            ok = obj is not None and hasattr(obj, "register_forward_hook")
        if not ok:
            what = site.path + (f".{site.attribute}" if site.attribute else "")
            where = missing.setdefault((what or "<decoder layer>", wi.hook,
                                        type(layers[wi.layer]).__name__), [])
            if wi.layer not in where:
                where.append(wi.layer)
    return [f"{what} of {cls} (hook point {hook}) on layer"
            f"{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))}"
            for (what, hook, cls), ls in missing.items()]


def install_plan(decoder_layers, inventory, plan, runtime,
                 join_every_layer: bool = False,
                 join_layer: int | None = None) -> Installed:
    """Install ``plan`` into ``decoder_layers`` (the model's decoder-layer
    list, indexed like the inventory): one ``runtime.install.install`` of
    the whole plan, its hook sites keyed by (layer kind, hook point) (they
    differ between kinds, e.g. GLM's KDA and MLA layers; the adapter is
    ``inventory.model``'s), feeding ``runtime`` with the plan's own issue
    indices; the join is a forward post-hook on the last decoder layer
    (before a model's pipeline-parallel early return).
    ``join_every_layer``: a join at the end of every decoder layer instead,
    so the side stream's
    work never spans a layer boundary in a captured graph. ``join_layer``:
    the index of the layer whose exit joins instead of the last one (under
    pipeline parallelism the rank's last real layer: the layers after it
    are other ranks' placeholders, and the join must run before the rank
    returns its intermediate tensors, so a capture never ends forked). Raises
    ``L2sPluginError`` (``unsupported model``, ``install failed``) or
    ``MissingHookSites`` (an ``L2sInstallError``: a hook site the plan uses
    is missing on the live layers, ``missing_sites``), having installed
    nothing."""
    layers = list(decoder_layers)
    kinds = list(inventory.kinds)
    if len(layers) != len(kinds):
        raise L2sPluginError("unsupported model", f"{len(layers)} decoder layers, "
                             f"{len(kinds)} with weights")
    keys = [str(k) for k in kinds]
    sites = {(str(k), hook): site for k in {str(k): k for k in kinds}.values()
             for hook, site in hook_sites(k, inventory.model).items()}
    gone = missing_sites(layers, keys, plan, sites)
    if gone:
        raise MissingHookSites(gone)
    out = Installed(plan, runtime)
    try:
        out.installations.append(install(
            layers, plan, sites, runtime, layer_keys=keys,
            join_on=(list(layers) if join_every_layer else "last_layer"
                     if join_layer is None else layers[join_layer])))
    except Exception as e:
        out.remove()
        raise L2sPluginError("install failed", f"{type(e).__name__}: {e}") from None
    return out
