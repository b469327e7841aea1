"""The plugin's ``verify`` option: right after vLLM captured its CUDA
graphs, measure the installed schedule's gain on this engine's own decode
graphs (``replay.replay_ab``: prefetch on / off / off again, ``verify``
rounds) and leave prefetch on only where it measured faster.

Runs from the wrapped ``Worker.compile_or_warm_up_model``
(``l2sched.vllm.__init__``), in every worker, before the engine serves.
Rule: prefetch stays on when no measured batch size is ``slower`` and at
least one is ``faster`` beyond the A/A noise (``verify.verdict``); otherwise
it is switched off (``runtime.switch``: no recapture). One log line per rank
either way, with each size's median gain and noise.

Under TP/PP the decode graphs hold the collectives, so every rank must
replay the same sequence or none. Before anything else the ranks agree that
they share one l2sched configuration (``agreement.after_capture``: a rank
whose ``L2SCHED_*`` variables did not reach it turns prefetch off on every
rank, and no rank waits on it longer than ``agree_timeout_s``). Then they
agree (``agreement.all_true``, over the store, bounded) that all of them can
measure, and afterwards that all of them measured a gain; a rank that cannot
(its install failed, no FULL decode graph) makes every rank switch off.
Never raises into vLLM.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Sequence

from l2sched.vllm import agreement
from l2sched.vllm.config import AGREE_TIMEOUT_S, read_config
from l2sched.vllm.layout import parallel_layout
from l2sched.vllm.replay import REPLAYS, full_decode_graphs, replay_ab
from l2sched.vllm.verify import from_rounds

log = logging.getLogger("vllm.l2sched")

#: Batch sizes measured at start-up, at most: each costs
#: 3 x (rounds + 1) x (REPLAYS + 1) replays of its graph.
MAX_SIZES = 4


def startup_batches(captured: Sequence[int], max_num_seqs: int,
                    count: int = MAX_SIZES) -> list[int]:
    """Up to ``count`` of the ``captured`` decode graph sizes that a decode
    batch of at most ``max_num_seqs`` requests uses, spread evenly on a log
    scale from the smallest to the largest (both included; the smallest
    alone for ``count`` 1). ``[]`` when none is at most ``max_num_seqs``
    or ``count`` < 1."""
    sizes = sorted({int(n) for n in captured if 0 < int(n) <= max_num_seqs})
    if len(sizes) <= count or count < 2:
        return sizes[:max(count, 0)]
    lo, hi = math.log(sizes[0]), math.log(sizes[-1])
    picked: list[int] = []
    for i in range(count):
        target = lo + (hi - lo) * i / (count - 1)
        best = min((s for s in sizes if s not in picked),
                   key=lambda s: abs(math.log(s) - target))
        picked.append(best)
    return sorted(picked)


def decide(timings: dict) -> tuple[bool, str]:
    """``replay.replay_ab``'s answer -> (keep prefetch on, the per-size text
    ``M=4 +12.0 us (noise 3.1) faster``). On when no size is ``slower`` and
    at least one is ``faster`` (off, "no batch size measured", for none).
    Raises ``ValueError`` for a size whose arms have different round
    counts (``verify.from_rounds``)."""
    parts, verdicts = [], []
    for batch in sorted(timings, key=int):
        s = from_rounds(int(batch), timings[batch]).summary()
        verdicts.append(s["verdict"])
        gain, noise = s["gain_us"]["median"], s["noise_us"]
        parts.append(f"M={batch} {'n/a' if gain is None else f'{gain:+.1f}'} us "
                     f"(noise {'n/a' if noise is None else f'{noise:.1f}'}) {s['verdict']}")
    on = "slower" not in verdicts and "faster" in verdicts
    return on, ", ".join(parts) or "no batch size measured"


def _config(worker):
    vc = getattr(worker, "vllm_config", None)
    try:
        return read_config(getattr(vc, "additional_config", None) or {})
    except Exception:  # the post-load step logged the bad configuration
        return None


def _rank_txt(worker) -> str:
    try:
        return parallel_layout(worker.vllm_config).rank_txt
    except Exception:
        return "TP rank ?"


def _installation(worker):
    try:
        # Lazy: the plugin imports vLLM (its logger).
        from l2sched.vllm.plugin import installed_for

        return installed_for(worker.model_runner.get_model())
    except Exception:
        return None


def verify_after_capture(worker) -> None:
    """After vLLM's ``Worker.compile_or_warm_up_model`` (every rank, whether
    configured or not): first the ranks' configuration agreement
    (``agreement.after_capture``: a rank that disagrees, or none, switches
    prefetch off everywhere, bounded by ``agree_timeout_s``), then the
    start-up A/B when the configuration asks for it (``verify`` > 0). Every
    configured rank takes part in both of verify's agreements whatever
    happened to it; each is bounded in time. Never raises: an error
    switches the fills off with one line."""
    cfg = _config(worker)
    timeout = cfg.agree_timeout_s if cfg is not None else AGREE_TIMEOUT_S
    verdict = agreement.after_capture(lambda: _rank_txt(worker), timeout)
    if not verdict.agreed:
        if agreement.configured_here():
            _off(_installation(worker), _rank_txt(worker), verdict.why)
        return
    if cfg is None or cfg.verify <= 0:
        return
    inst, rank_txt, runner, sizes, why = None, "TP rank ?", None, [], ""
    try:
        vc = worker.vllm_config
        rank_txt = _rank_txt(worker)
        runner = worker.model_runner
        inst = _installation(worker)
        captured = vc.compilation_config.cudagraph_capture_sizes or []
        max_seqs = vc.scheduler_config.max_num_seqs
        sizes = startup_batches(captured, max_seqs)
        graphs = full_decode_graphs(runner)
        if inst is None:
            why = "no schedule installed on this rank"
        elif not inst.runtime.fills_on:
            why = "the fills were installed switched off"
        elif captured and not sizes:
            why = (f"no cudagraph_capture_sizes of at most max_num_seqs {max_seqs} "
                   f"(captured: {', '.join(map(str, sorted(captured)))})")
        elif not sizes or any(s not in graphs for s in sizes):
            missing = ", ".join(str(s) for s in sizes if s not in graphs)
            why = (f"no FULL decode CUDA graph{' of batch size ' + missing if missing else ''}"
                   " to time (enforce_eager, or a cudagraph_mode without FULL decode "
                   "graphs)")
    except Exception as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    try:
        ready = agreement.all_true("verify-ready", not why, cfg.agree_timeout_s)
    except Exception as e:
        ready, why = False, f"the ranks could not agree: {type(e).__name__}: {e}"
    if not ready:
        _off(inst, rank_txt, f"verify: not measured: {why or 'another rank cannot measure'}")
        return
    on, text, t0 = False, "", time.monotonic()
    try:
        timings = replay_ab(runner, sizes, rounds=cfg.verify, warmup=1, replays=REPLAYS,
                            switch=lambda flag: _switch(inst, flag))
        on, text = decide(timings)
    except Exception as e:
        text = f"verify failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    try:
        # the other ranks time the same sizes: allow twice this rank's time
        on_all = agreement.all_true("verify-on", on, cfg.agree_timeout_s
                                    + 2 * (time.monotonic() - t0))
        _switch(inst, on_all)
    except Exception as e:
        _off(inst, rank_txt, f"verify: {type(e).__name__}: {e}")
        return
    head = f"l2sched: {rank_txt}: verify ({cfg.verify} rounds of replayed decode graphs): "
    if on_all:
        log.info("%sprefetch ON: measured gain (off - on per step) %s", head, text)
    else:
        reason = " (faster here; another rank was not)" if on else ""
        log.warning("%sprefetch OFF: not faster beyond noise%s: %s", head, reason, text)


def _switch(inst, on: bool) -> None:
    if inst is None or not inst.switch(on):
        raise RuntimeError("the switch was refused (a capture in progress)")


def _off(inst, rank_txt: str, why: str) -> None:
    """Switch ``inst`` off and log why: one WARNING line; only DEBUG when this
    rank has no installation (its post-load step logged its own 'prefetch
    OFF' line already: one line per rank)."""
    if inst is None:
        log.debug("l2sched: %s: prefetch OFF: %s", rank_txt, why)
        return
    try:
        inst.switch(False)
    except Exception:  # pragma: no cover - the switch writes one word
        pass
    log.warning("l2sched: %s: prefetch OFF: %s", rank_txt, why)
