"""Installing a plan into vLLM's GLM-5.3 decoder layers: the hook sites of
each layer kind (from the adapter's ``Install`` records) and one
installation per layer kind feeding one runtime. ``install_plan`` is the
public API the plugin and the benchmarks use."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from l2sched.errors import L2sPluginError
from l2sched.model.adapters import get_adapter
from l2sched.runtime.install import HookSite, install


@dataclass
class Installed:
    """A plan installed in one model: ``plan``, ``runtime`` (the backend),
    ``installations`` (one per layer kind, ``runtime.install.Installation``),
    ``summary`` (the log line). The plugin also records ``model`` (a weak
    reference to the top-level model) and ``config``/``vllm_config`` (what it
    was installed with), to find and redo it at a weight reload.
    ``remove()`` takes every hook out; ``retire()`` also retires the
    runtime."""

    plan: Any
    runtime: Any
    installations: list = field(default_factory=list)
    summary: str = ""
    lint: str = ""
    model: Any = None
    config: Any = None
    vllm_config: Any = None

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

    def bind_now(self) -> None:
        """Bind every range to its tensor now and write the rows where the
        fills read them (the device table), instead of at the next firing:
        a replayed CUDA graph fires no Python hook."""
        for inst in self.installations:
            inst.bind_all()
        self.runtime.flush()


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
    sites = {}
    for h in get_adapter("glm5next").HOOKS:
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


def install_plan(decoder_layers, inventory, plan, runtime,
                 join_every_layer: bool = False) -> Installed:
    """Install ``plan`` into ``decoder_layers`` (the model's decoder-layer
    list, indexed like the inventory): one ``runtime.install.install`` per
    layer kind (hook sites differ between KDA and MLA layers), all feeding
    the one ``runtime``; the join goes with the kind of the last layer, as a
    forward post-hook on the last decoder layer (before the
    pipeline-parallel early return of ``Glm5NextModel.forward``).
    ``join_every_layer``: a join at the end of every decoder layer instead
    (each kind's installation joins at its own layers), so the side stream's
    work never spans a layer boundary in a captured graph. Raises
    ``L2sPluginError`` (``unsupported model``, ``install failed``), having
    installed nothing."""
    layers = list(decoder_layers)
    kinds = list(inventory.kinds)
    if len(layers) != len(kinds):
        raise L2sPluginError("unsupported model", f"{len(layers)} decoder layers, "
                             f"{len(kinds)} with weights")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, wi in enumerate(plan.issues):
        groups[str(kinds[wi.layer])].append(i)
    last_kind = str(kinds[-1])
    groups.setdefault(last_kind, [])
    by_name = {str(k): k for k in kinds}
    out = Installed(plan, runtime)
    if join_every_layer:
        for k in by_name:
            groups.setdefault(k, [])
    try:
        for name in sorted(groups, key=lambda k: k == last_kind):
            idx = groups[name]
            sub = replace(plan, issues=tuple(plan.issues[i] for i in idx))
            if join_every_layer:
                join_on = [lay for lay, k in zip(layers, kinds) if str(k) == name]
            else:
                join_on = layers[-1] if name == last_kind else None
            out.installations.append(install(
                layers, sub, hook_sites(by_name[name]), _IssueMap(runtime, idx),
                join_on=join_on))
    except Exception as e:
        out.remove()
        raise L2sPluginError("install failed", f"{type(e).__name__}: {e}") from None
    return out
