"""The plugin's install: ``runtime.sites.install_plan`` with vLLM's drift
handling. A hook site the plan uses that the live decoder layers lack
(``runtime.sites.MissingHookSites``) means vLLM moved or renamed it: it is
recorded (``drift.record``) and raised as ``drift.VllmDrift`` (logged at
WARNING; prefetch stays off in the process)."""

from __future__ import annotations

from l2sched.runtime import sites
from l2sched.vllm.drift import VllmDrift, record


def install_plan(decoder_layers, inventory, plan, runtime,
                 join_every_layer: bool = False,
                 join_layer: int | None = None) -> sites.Installed:
    """``runtime.sites.install_plan`` (same arguments, same ``Installed``
    handle), raising ``drift.VllmDrift`` instead of
    ``runtime.sites.MissingHookSites``, having installed nothing."""
    try:
        return sites.install_plan(decoder_layers, inventory, plan, runtime,
                                  join_every_layer=join_every_layer,
                                  join_layer=join_layer)
    except sites.MissingHookSites as e:
        record(str(e))
        raise VllmDrift(str(e)) from None
