"""The ranks' agreement on their l2sched configuration, bounded in time.

Why: under vLLM's Ray executor (multi-node) ``L2SCHED_*`` variables reach
only the workers of the head node unless ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY``
names them (``vllm/ray/ray_env.py``), while ``--additional-config`` reaches
every rank. A rank with no configuration installs nothing, and a rank with
``verify`` would wait for it forever in the A/B's collective.

How: through the key-value store of torch.distributed's default group (the
TCPStore of vLLM's world group), never through a collective, so that no
rank waits longer than ``PluginConfig.agree_timeout_s`` for a rank that
does not take part:

1. ``publish``: a configured rank's post-load step writes its
   configuration's ``fingerprint`` under ``l2sched/config/<rank>`` and counts
   itself in ``l2sched/configured``. An unconfigured rank writes nothing.
2. ``after_capture``: after the decode graphs are captured
   (``Worker.compile_or_warm_up_model``; vLLM's executors start it on a
   worker only after every worker loaded its weights) every rank reads the
   count (one store round trip: all a deployment without l2sched pays).
   An unconfigured rank with configured peers answers ``none`` and logs one
   WARNING. A configured rank waits for every rank's answer, at most
   ``agree_timeout_s``; the first rank to decide writes the verdict
   (``compare_set``) and every configured rank follows it, so the ranks
   cannot split. A missing answer, ``none``, a bad configuration or a
   different fingerprint is a disagreement: prefetch off on every rank.
3. ``all_true``: the AND of one flag over the ranks, bounded the same way
   (``verify``'s agreements).

Verdicts and flags are keyed by the number of ``after_capture`` calls in
this process, and each published answer names the capture it is for, so a
later capture (a reload, a test's next case) never reads an earlier
verdict, and a rank that loads late is waited for, not read stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("vllm.l2sched")  # vLLM's format and level (plugin.py)

#: How often a waiting rank polls the store for missing answers, seconds.
POLL_S = 0.05

_COUNT = "l2sched/configured"
_NONE = "none"
#: The fix named in every disagreement line.
FIX = ("pass the configuration with --additional-config '{\"l2sched\": {...}}' "
       "(it reaches every rank), or for L2SCHED_* variables under Ray export "
       "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY=L2SCHED_ before starting vLLM")

# what this process published, and how many captures it has agreed on
_state: dict[str, Any] = {"published": False, "generation": 0}


@dataclass(frozen=True)
class World:
    """This process's place in torch.distributed's default group: ``rank``,
    ``size`` (ranks) and its key-value ``store``."""

    rank: int
    size: int
    store: Any


@dataclass(frozen=True)
class Verdict:
    """The outcome of ``after_capture``: ``agreed`` (every rank has the
    same configuration, or there is one rank), ``why`` (the disagreement,
    empty when agreed), ``waited_s`` (seconds spent waiting)."""

    agreed: bool
    why: str = ""
    waited_s: float = 0.0


def world() -> World | None:
    """The default group of this process, or ``None`` with one rank, no
    initialised torch.distributed, or no store (then nothing is agreed and
    nothing waits)."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    size = dist.get_world_size()
    if size < 2:
        return None
    try:
        store = distributed_c10d._get_default_store()
    except (RuntimeError, ValueError):  # a group made without a store
        return None
    return World(dist.get_rank(), size, store)


def _digest(path: str | None) -> str | None:
    """sha256 of the file at ``path`` (hex), ``unreadable: ...`` when it
    cannot be read, ``None`` for no file."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return f"unreadable: {e.strerror or type(e).__name__}"


def fingerprint(cfg) -> dict:
    """What every rank must share of a ``PluginConfig``: every field but
    ``source`` (where it came from) and ``agree_timeout_s``, plus the
    sha256 of the schedule file (not for ``auto``) and of a ``.toml``
    device profile, so that two nodes holding different files of one path
    disagree."""
    d = dataclasses.asdict(cfg)
    for k in ("source", "agree_timeout_s"):
        d.pop(k, None)
    d["overrides"] = list(d["overrides"])
    d["schedule_sha256"] = None if cfg.is_auto else _digest(cfg.schedule)
    d["device_sha256"] = _digest(cfg.device) if (cfg.device or "").endswith(".toml") \
        else None
    return d


def _config_key(rank: int) -> str:
    return f"l2sched/config/{rank}"


def _env_names() -> list[str]:
    return sorted(k for k in os.environ if k.startswith("L2SCHED_"))


def publish(rank_txt: str, cfg=None, error: str = "") -> None:
    """Write this rank's configuration (``cfg``, a ``PluginConfig``) or its
    ``error`` (a bad configuration: the other ranks must not install
    without it) for the other ranks. Never raises; without a world, does
    nothing."""
    w = world()
    if w is None:
        return
    # for the next after_capture: an answer left from an earlier capture
    # (a reload, a rank that loads late) is never read as this one's
    payload: dict[str, Any] = {"rank": rank_txt, "generation": _state["generation"] + 1}
    if cfg is not None:
        payload["source"] = cfg.source
        payload["config"] = fingerprint(cfg)
        if cfg.source == "env":
            payload["variables"] = _env_names()
    else:
        payload["error"] = error or "bad configuration"
    try:
        w.store.set(_config_key(w.rank), json.dumps(payload, sort_keys=True))
        if not _state["published"]:
            w.store.add(_COUNT, 1)
            _state["published"] = True
    except Exception as e:  # a store that fails: after_capture will say so
        log.debug("l2sched: %s: could not publish the configuration: %s", rank_txt, e)


def withdraw() -> None:
    """Take back this process's published configuration (its model is now
    loaded without one). Never raises."""
    if not _state["published"]:
        return
    _state["published"] = False
    w = world()
    if w is None:
        return
    try:
        w.store.delete_key(_config_key(w.rank))
        w.store.add(_COUNT, -1)
    except Exception as e:  # pragma: no cover - a store that fails
        log.debug("l2sched: could not withdraw the configuration: %s", e)


def configured_here() -> bool:
    """Whether this process published a configuration (``publish``) that
    it has not withdrawn."""
    return bool(_state["published"])


def _current(w: World, key: str, generation: int | None) -> bool:
    """Whether ``key`` is in the store and, for a ``generation``, holds an
    answer of that generation or a later one (not one left from an earlier
    capture)."""
    if not w.store.check([key]):
        return False
    if generation is None:
        return True
    try:
        return int(json.loads(w.store.get(key)).get("generation", 0)) >= generation
    except (ValueError, AttributeError):
        return False


def _wait(w: World, keys: list[str], timeout_s: float,
          generation: int | None = None) -> set[str]:
    """The keys of ``keys`` present in the store (``_current`` for
    ``generation``) after waiting at most ``timeout_s`` for all of them."""
    deadline = time.monotonic() + timeout_s
    missing = list(keys)
    while True:
        missing = [k for k in missing if not _current(w, k, generation)]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    return set(keys) - set(missing)


def _decide(w: World, key: str, mine: str) -> str:
    """The verdict of ``key``: ``mine`` when this rank decides first, else
    the one another rank wrote (``compare_set``: the ranks cannot split)."""
    got = w.store.compare_set(key, "", mine)
    return got.decode() if isinstance(got, bytes) else str(got)


def _describe(r: int, answer: dict | None, me: int, mine: dict,
              timeout_s: float) -> str | None:
    """Why rank ``r``'s ``answer`` disagrees with rank ``me``'s ``mine``,
    naming both ranks (every rank logs the text the first one wrote), or
    ``None``."""
    if answer is None:
        return f"rank {r} did not answer within {timeout_s:g} s (no l2sched there?)"
    who = f"rank {r} ({answer.get('rank', '?')})"
    if answer.get("none"):
        return f"{who} has no l2sched configuration"
    if "error" in answer:
        return f"{who} has a bad configuration ({answer['error']})"
    if "error" in mine:
        return None  # rank me's own error is named once, by the caller
    theirs, ours = answer.get("config") or {}, mine.get("config") or {}
    keys = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if not keys:
        return None
    return (f"{who} has " + ", ".join(f"{k} {theirs.get(k)!r}" for k in keys)
            + f" where rank {me} ({mine.get('rank', '?')}) has "
            + ", ".join(f"{ours.get(k)!r}" for k in keys))


def after_capture(rank_of, timeout_s: float) -> Verdict:
    """The configuration agreement after graph capture (module docstring,
    step 2). ``rank_of()`` gives this rank's text for log lines (called
    only when a line is logged); ``timeout_s``: the longest wait for the
    other ranks, seconds. Returns ``Verdict(True)`` with one rank or no
    world. An unconfigured rank logs its one WARNING here; a configured
    rank's caller logs the returned ``why``. Never raises: a failing store
    is a disagreement."""
    _state["generation"] += 1
    gen = _state["generation"]
    w = world()
    if w is None:
        return Verdict(True)
    t0 = time.monotonic()
    try:
        if not _state["published"]:
            if int(w.store.add(_COUNT, 0)) <= 0:
                return Verdict(True)  # nobody uses l2sched here
            w.store.set(_config_key(w.rank), json.dumps(
                {"rank": rank_of(), "none": True, "generation": gen}))
            peers = [r for r in range(w.size)
                     if r != w.rank and w.store.check([_config_key(r)])]
            named = []
            for r in peers:
                a = json.loads(w.store.get(_config_key(r)))
                if not a.get("none"):
                    src = a.get("source", "?")
                    if a.get("variables"):
                        src += " " + ", ".join(a["variables"])
                    named.append(f"rank {r} ({a.get('rank', '?')}, from {src})")
            log.warning("l2sched: %s: prefetch OFF on every rank: this rank has no "
                        "l2sched configuration while %s %s; %s", rank_of(),
                        ", ".join(named) or "other ranks",
                        "has one" if len(named) == 1 else "have one", FIX)
            return Verdict(False, "no configuration on this rank",
                           time.monotonic() - t0)
        keys = [_config_key(r) for r in range(w.size)]
        present = _wait(w, keys, timeout_s, gen)
        answers = {r: json.loads(w.store.get(k)) if k in present else None
                   for r, k in enumerate(keys)}
        mine = answers[w.rank] or {}
        problems = [p for r in range(w.size) if r != w.rank
                    for p in [_describe(r, answers[r], w.rank, mine, timeout_s)] if p]
        if "error" in mine:
            problems.insert(0, f"rank {w.rank} ({mine.get('rank', '?')}) has a bad "
                               f"configuration ({mine['error']})")
        verdict = _decide(w, f"l2sched/verdict/{gen}",
                          "; ".join(problems) if problems else "agreed")
    except Exception as e:
        return Verdict(False, f"the ranks could not agree on the configuration: "
                              f"{type(e).__name__}: {e}", time.monotonic() - t0)
    waited = time.monotonic() - t0
    if verdict == "agreed":
        return Verdict(True, "", waited)
    return Verdict(False, f"the ranks disagree about the l2sched configuration: "
                          f"{verdict}; {FIX}", waited)


def all_true(phase: str, flag: bool, timeout_s: float) -> bool:
    """``flag`` AND-ed over every rank of the default group, waiting at most
    ``timeout_s`` seconds for the others (a rank missing by then is
    ``False``); the first rank to decide writes the outcome and every rank
    returns it. ``flag`` itself with one rank. Keys are per ``phase`` and
    per ``after_capture`` call. Raises what the store raises."""
    w = world()
    if w is None:
        return flag
    base = f"l2sched/agree/{_state['generation']}/{phase}"
    w.store.set(f"{base}/{w.rank}", "1" if flag else "0")
    keys = [f"{base}/{r}" for r in range(w.size)]
    present = _wait(w, keys, timeout_s)
    mine = len(present) == w.size and all(w.store.get(k) == b"1" for k in keys)
    return _decide(w, f"{base}/verdict", "1" if mine else "0") == "1"
