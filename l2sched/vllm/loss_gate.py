"""The plugin's gate on a predicted loss (issue 31): before installing, the
rank's plan is linted at every decode batch size vLLM captures as a CUDA
graph up to the schedule's ``max_tokens``; when the lint's L2S110
(``lint.rules.gain``: the predicted step slower with prefetch than without,
beyond the A/A noise floor at that M, the floor ``l2sched fit`` uses) occurs
at any of them, prefetch stays off with one WARNING line per rank::

    prefetch OFF: predicted slower at M=4 by 23 us (lower bound); on_predicted_loss=warn installs anyway

naming the M with the largest predicted loss. ``on_predicted_loss = "warn"``
in the plugin's options installs anyway, with one WARNING line saying so.
The microseconds are the lint's prediction on the device profile as written;
``(lower bound)``: the profile's pessimistic variants (``fit.bound``, the
fit's lower bound of the gain) predict a larger loss, not a smaller one, on
every shipped schedule predicted to lose.

Which M: ``compilation_config.cudagraph_capture_sizes`` (vLLM 0.33.0:
``vllm/config/compilation.py``; decode runs as a FULL graph of one of these
sizes), the distinct ones from 1 to ``max_tokens``; of more than
``MAX_SIZES``, the size nearest in log(M) to each of ``MAX_SIZES`` even steps
in log(M) from the smallest to the largest (small batches, where decode
spends most steps and the fills matter most, keep every size); one lint of
the 45-layer model is about 0.1-0.2 s. Without capture sizes (eager, or no compilation config) the M with a measured noise floor
(``lint.noise.AA_NOISE_FLOOR_US``: 1, 4, 16, 64) up to ``max_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from l2sched.errors import L2sPluginError
from l2sched.lint import run_lint
from l2sched.lint.noise import AA_NOISE_FLOOR_US
from l2sched.device import DeviceProfile

#: The code of the lint's predicted-net-loss finding.
LOSS_CODE = "L2S110"
#: At most this many capture sizes are linted (sampled beyond it).
MAX_SIZES = 16


class PredictedLoss(L2sPluginError):
    """Prefetch stays off: the plan is predicted slower than no prefetch
    (logged as a WARNING line, not an error: nothing failed)."""

    level = 30  # logging.WARNING


def capture_sizes(vllm_config, max_tokens: int) -> tuple[int, ...]:
    """The decode batch sizes to lint: vLLM's CUDA-graph capture sizes from 1
    to ``max_tokens`` (distinct, ascending; at most ``MAX_SIZES``, sampled
    evenly in log(M), both ends kept), else the M of the measured noise
    floors up to ``max_tokens`` (at least 1)."""
    cc = getattr(vllm_config, "compilation_config", None)
    raw = getattr(cc, "cudagraph_capture_sizes", None) or ()
    try:
        sizes = sorted({int(m) for m in raw if 1 <= int(m) <= max_tokens})
    except (TypeError, ValueError):
        sizes = []
    if not sizes:
        sizes = [m for m in sorted(AA_NOISE_FLOOR_US) if m <= max_tokens] or [1]
    if len(sizes) > MAX_SIZES:  # the nearest size in log(M) to each of
        lo, hi = math.log(sizes[0]), math.log(sizes[-1])  # MAX_SIZES even steps
        sizes = sorted({min(sizes, key=lambda m: abs(math.log(m) - t))
                        for t in (lo + (hi - lo) * i / (MAX_SIZES - 1)
                                  for i in range(MAX_SIZES))})
    return tuple(sizes)


def predicted_losses(lint, sizes, known=None, **kw) -> list:
    """The L2S110 findings of ``lint`` (``run_lint``, called with ``kw`` and
    ``tokens=M``, ``select=[L2S110]``) at every M of ``sizes``, in M
    order; ``known``: ``M -> findings`` already linted (taken as they are,
    not linted again)."""
    out = []
    for m in sizes:
        if known and m in known:
            out += [f for f in known[m] if getattr(f, "code", None) == LOSS_CODE]
            continue
        run = lint(tokens=m, select=[LOSS_CODE], **kw)
        out += [f for f in getattr(run, "findings", run)
                if getattr(f, "code", None) == LOSS_CODE]
    return out


def gate(mode: str, findings: list, rank_txt: str, log) -> str:
    """Judge the L2S110 ``findings`` (one per losing M): none -> ``""``;
    else with ``mode`` ``off`` raise ``PredictedLoss`` (the one line), with
    ``warn`` log one WARNING line on ``log`` and return a note for the summary."""
    if not findings:
        return ""
    worst = max(findings, key=lambda f: f.data.get("loss_us", 0.0))
    m, us = worst.data.get("tokens"), worst.data.get("loss_us", 0.0)
    what = f"predicted slower at M={m} by {us:.0f} us (lower bound)"
    if mode != "warn":
        raise PredictedLoss(f"{what}; on_predicted_loss=warn installs anyway")
    log.warning("l2sched: %s: %s; installing anyway (on_predicted_loss=warn)",
                rank_txt, what)
    return f", predicted slower at M={m} (overridden: on_predicted_loss warn)"


@dataclass(frozen=True)
class GateRequest:
    """What one rank's gate lints: ``schedule`` as the plugin linted it (with
    the persisting-L2 set-aside in force on the device) and ``plan``, its
    compiled plan for the rank; the rank's ``inventory``; the
    ``device_profile``; the live ``model_config`` (dict); ``tp`` and
    ``tp_rank``; ``linted``: ``M -> findings`` of lint runs the plugin
    already made (its M = 1 lint with every rule), reused instead of linting
    that M again."""

    schedule: Any
    plan: Any
    inventory: Any
    device_profile: DeviceProfile
    model_config: Mapping | None
    tp: int
    tp_rank: int
    linted: Mapping[int, list] = field(default_factory=dict)


def loss_gate(cfg, request: GateRequest, vllm_config, log, lint=None) -> str:
    """The gate of one rank: lints ``request`` (with ``lint``, default
    ``l2sched.lint.run_lint``) at every ``capture_sizes`` M not in
    ``request.linted`` and judges the L2S110 findings (``gate``). Skipped
    with ``"lint": "off"``. Returns a note for the summary line (may be
    empty); raises ``PredictedLoss``."""
    if cfg.lint == "off":
        return ""
    r = request
    found = predicted_losses(
        lint or run_lint, capture_sizes(vllm_config, r.schedule.max_tokens), r.linted,
        schedule=r.schedule, inventory=r.inventory, device_profile=r.device_profile,
        graph_mode="full", model_config=r.model_config, tp_rank=r.tp_rank, plan=r.plan)
    return gate(cfg.on_predicted_loss, found, f"TP rank {r.tp_rank}/{r.tp}", log)
