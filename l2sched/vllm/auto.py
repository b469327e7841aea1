"""``"schedule": "auto"`` (issue 31 item 2): the plugin fits a schedule for
the live engine instead of reading one from a file.

``auto_schedule`` runs ``l2sched fit``'s search (``l2sched.fit.Search``,
its default size) for the live model config (vLLM's ``hf_text_config`` as a
dict), the TP layout, the measured device profile of the rank's GPU and the
decode batch sizes the engine captures (``vllm.loss_gate.capture_sizes``),
and returns an ``AutoChoice``: the fitted ``.l2s`` text (``None``: no
prefetch) and one line saying what it chose, with the predicted gain per M
and the fit's lower bound, or why it chose nothing.

The answer is cached on disk (``auto_cache``: ``default_cache_dir``, one
``CacheEntry`` per key), keyed by ``cache_key``: the model config's content,
TP degree, EP, the device profile's content (the numbers the fit reads, not
its path), the profile's name or path as the schedule's ``device`` line
writes it, the token counts, the l2sched version, the source of the code
that decides the answer (``code_digest``: a checkout changes without a new
version), the search's settings and the entry format. An entry that does
not read back whole is logged in one line and refitted; a cache directory
that cannot be written is logged in one line and the answer is used
uncached. Nothing here raises for a cache problem. TP ranks that start
together fit once: the first takes the entry's lock, the others wait for it
and read its entry.

Times (CPU seconds of one core of this repository's 2-core machine,
2026-12-03, ``jobs`` 1, the GLM-5.3-Flash config, the 12 sizes vLLM 0.33.0
captures by default up to M = 256): on ``h200`` the fit answers no prefetch
in 7.9 s at TP1 and 9.3 s at TP4 with ``l2sched fit``'s default size. Where
it finds windows the search goes deeper: on the ``h200`` profile with the
fills' all-reduce slowdown at 0 (the profile the ``-fit-idle`` schedule was
fitted on), TP4, the default size took 32.5 s (492 evaluations, objective
+879.8 us); ``AUTO_SIZE`` (3 local-search rounds) 22.1 s (326, +834.8 us:
5% less lower-bound gain), ``--quick`` 7.8 s (112, +561.4 us: 36% less).
So ``auto`` searches with ``AUTO_SIZE``; on ``h200`` at TP1 and TP4 its
answer is the default's. A cache hit is a few milliseconds.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from l2sched import __version__
from l2sched.device import DeviceProfile, GpuIdentity
from l2sched.errors import L2sError, L2sPluginError
from l2sched.fit import FitOptions, Search, fit_text
from l2sched.fit.search import DEFAULT_SIZE
from l2sched.lang.resolve import load_schedule_text
from l2sched.model.adapters import adapter_of_config
from l2sched.model.config import validate_config
from l2sched.units import format_size
from l2sched.vllm.auto_cache import CACHE_FORMAT, CacheEntry, default_cache_dir

log = logging.getLogger("l2sched.vllm.auto")

#: The search's size: ``l2sched fit``'s default (``DEFAULT_SIZE``) with 3
#: local-search rounds instead of 6, so the deepest first fit measured stays
#: within the issue's 30 s (see the module docstring for the numbers).
AUTO_SIZE = dataclasses.replace(DEFAULT_SIZE, rounds=3)
#: Worker processes of the fit: 1, so a vLLM worker starts no process pool
#: (the answer does not depend on it, docs/fit.md).
JOBS = 1
#: The parts of the package whose code decides the fit's answer (the
#: stages it runs, their data, this module): their source is part of the
#: key (``code_digest``), so a checkout whose code changed without a new
#: version number is a miss too.
FIT_CODE = ("lang", "model", "device", "compiler", "lint", "fit", "data",
            "units.py", "vllm/auto.py")
#: Model-config keys that do not change the model: where it was read from
#: and which transformers wrote it (``_name_or_path``, ``_commit_hash``, any
#: key starting with ``_``, ``transformers_version``).
VOLATILE_CONFIG_KEYS = ("transformers_version",)


class AutoOff(L2sPluginError):
    """Prefetch stays off by ``auto``'s answer (``AutoChoice.off_error``):
    logged as the plugin's one "prefetch OFF" line at ``level``."""

    def __init__(self, summary: str, level: int):
        super().__init__(summary)
        self.level = level


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto_schedule`` chose: ``text`` the fitted ``.l2s`` text
    (``None``: no prefetch), ``summary`` one human line (windows, budgets,
    predicted gain per M with the fit's lower bound; or ``no prefetch`` and
    why), ``path`` the cached ``.l2s`` file (``None`` when nothing was
    written), ``key`` the cache key (empty when no fit applies), ``cached``
    whether it came from the cache, ``seconds`` the time it took (s: the
    fit, or the cache read), ``reason`` why there is no prefetch (``""``
    with one; ``no profile``, ``no prefetch``, ``unsupported layout``)."""

    text: str | None
    summary: str
    path: Path | None = None
    key: str = ""
    cached: bool = False
    seconds: float = 0.0
    reason: str = ""

    @property
    def prefetch(self) -> bool:
        """True when the choice has windows to install."""
        return self.text is not None

    def off_error(self) -> "AutoOff":
        """The plugin's "prefetch OFF" error for a choice without a schedule:
        ``summary`` as its line, at INFO for ``no prefetch`` (the fit
        decided; nothing is wrong), else at WARNING."""
        return AutoOff(self.summary, 20 if self.reason == "no prefetch" else 30)

    def schedule(self, model_config: Mapping | None = None,
                 overrides: Sequence[str] = ()):
        """The resolved ``Schedule`` of ``text`` (``load_schedule_text``,
        diagnostics named by ``path``), for ``model_config`` (the live
        model's). Raises ``ValueError`` without a schedule (no prefetch);
        ``L2sError`` as ``load_schedule_text``."""
        if self.text is None:
            raise ValueError(f"no schedule to load: {self.summary}")
        return load_schedule_text(self.text, str(self.path or "<auto>"), overrides,
                                  model_config)


# --------------------------------------------------------------------------
# the cache key


def _stable_config(value: Any) -> Any:
    """``value`` without the ``VOLATILE_CONFIG_KEYS`` and ``_``-keys, at
    every depth."""
    if isinstance(value, Mapping):
        return {str(k): _stable_config(v) for k, v in value.items()
                if not str(k).startswith("_") and k not in VOLATILE_CONFIG_KEYS}
    if isinstance(value, (list, tuple)):
        return [_stable_config(v) for v in value]
    return value


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def profile_digest(device_profile: DeviceProfile) -> str:
    """SHA-256 of what the fit reads from ``device_profile``: every field
    but its file ``path`` and ``source_text`` (so a copy of the file
    elsewhere, or a comment edited, keeps the digest, and any number
    changed changes it)."""
    numbers = dataclasses.replace(device_profile, path="", source_text="")
    return hashlib.sha256(repr(numbers).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the files of ``FIT_CODE`` (``.py``, ``.json``, ``.toml``,
    ``.lark``; relative path and bytes, in path order) as this process
    imported them (read once per process, about 10 ms)."""
    root = Path(__file__).resolve().parents[1]
    files = []
    for part in FIT_CODE:
        p = root / part
        files += [p] if p.is_file() else [
            f for f in p.rglob("*") if f.suffix in (".py", ".json", ".toml", ".lark")
            and "__pycache__" not in f.parts]
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def key_parts(model_config: Mapping, tp: int, ep: bool,
              device_profile: DeviceProfile, device_name: str,
              tokens: Sequence[int]) -> dict:
    """The parts of the cache key (see the module docstring), as JSON
    values; ``code`` is ``code_digest``, ``search`` the fit's size,
    ``max_tokens`` and set-aside setting, so a change to any is a miss."""
    return {"format": CACHE_FORMAT, "l2sched": __version__, "code": code_digest(),
            "model_config": _digest(_stable_config(model_config)),
            "tp": int(tp), "ep": bool(ep),
            "profile": profile_digest(device_profile), "device": str(device_name),
            "tokens": [int(m) for m in tokens],
            "search": [repr(AUTO_SIZE), FitOptions.max_tokens, FitOptions.set_aside]}


def cache_key(model_config: Mapping, tp: int, ep: bool, device_profile: DeviceProfile,
              device_name: str, tokens: Sequence[int]) -> str:
    """The cache key: 32 hex digits of the SHA-256 of ``key_parts``."""
    return _digest(key_parts(model_config, tp, ep, device_profile, device_name,
                             tokens))[:32]


# --------------------------------------------------------------------------
# the answer


def _tokens_text(tokens: Sequence[int]) -> str:
    """``M=1,4`` for up to 4 sizes, else ``M=1..256 (12 sizes)``."""
    if len(tokens) <= 4:
        return "M=" + ",".join(map(str, tokens))
    return f"M={tokens[0]}..{tokens[-1]} ({len(tokens)} sizes)"


def _windows_text(candidate, search: Search) -> str:
    """``kda+moe: attn.pre_all_reduce 17.5 MB + moe.pre_all_reduce 10 MB;
    ...`` with the kernel and policy."""
    per_kind: dict[str, list[str]] = {}
    for chain in candidate.chains:
        per_kind.setdefault(chain.kind, []).append(" -> ".join(
            f"{link.hook} {format_size(link.budget)}" for link in chain.links))
    kinds = "; ".join(f"{k}: {', '.join(v)}" for k, v in per_kind.items())
    n = sum(len(c.links) for c in candidate.chains)
    return (f"{n} window{'s' if n != 1 else ''} [{kinds}], kernel {candidate.kernel}, "
            f"{candidate.policy}, set_aside {candidate.set_aside}")


def _summary(result, search: Search, what: str) -> str:
    """The one line of a fit's answer (without its timing)."""
    if result.candidate is None and result.best_rejected is None:
        return (f"auto: no prefetch for {what}: no lower bound (every candidate was "
                "infeasible, or its lower bound below minus the noise floor at some "
                f"M); noise floor {result.floor:.1f} us")
    if result.candidate is None:
        return (f"auto: no prefetch for {what}: best lower bound "
                f"{result.best_rejected:+.1f} us (weighted), not above the noise "
                f"floor {result.floor:.1f} us")
    gains = ", ".join(f"M={m} {med:+.1f}/{lb:+.1f}"
                      for m, _w, med, lb, _f in result.rows)
    return (f"auto: {_windows_text(result.candidate, search)} for {what}; predicted "
            f"gain us (median/lower bound) {gains}; objective "
            f"{result.objective:+.1f} us (lower bound, weighted) vs noise floor "
            f"{result.floor:.1f} us")


def _off(summary: str, reason: str) -> AutoChoice:
    log.debug("l2sched: %s", summary)
    return AutoChoice(None, summary, reason=reason)


def _check_tokens(tokens: Sequence[int]) -> tuple[int, ...]:
    got = tuple(int(m) for m in tokens)
    if not got or list(got) != sorted(set(got)) or got[0] < 1 \
            or got[-1] > FitOptions.max_tokens:
        raise L2sPluginError(
            "auto fit failed", f"decode sizes {list(tokens)}: expected increasing "
            f"whole numbers from 1 to {FitOptions.max_tokens} (the fitted "
            "schedule's max_tokens)")
    return got


def auto_schedule(model_config: Mapping, tp: int, ep: bool,
                  device_profile: DeviceProfile | None, device_name: str, *,
                  tokens: Sequence[int], cache_dir: Path | None = None,
                  gpu: GpuIdentity | None = None,
                  environ: Mapping[str, str] | None = None) -> AutoChoice:
    """Fit (or read from the cache) the schedule of ``"schedule": "auto"``.

    ``model_config``: the live model's HF text config as a dict (vLLM's
    ``model_config.hf_text_config.to_dict()``); ``tp``: the TP degree;
    ``ep``: expert parallelism on; ``device_profile``: the measured profile
    of this GPU (``None`` when none matches it; ``device.profile_for_gpu``);
    ``device_name``: how the schedule's ``device`` line names it (a shipped
    name, or the ``.toml`` file's path, made absolute); ``tokens``: the decode
    batch sizes M the engine captures up to ``max_tokens`` (increasing,
    1..256; ``vllm.loss_gate.capture_sizes``); ``cache_dir``: default
    ``default_cache_dir(environ)``; ``gpu``: the GPU, named in the no-profile line.

    Returns an ``AutoChoice`` without a schedule (no fit run) for no
    profile, an estimate profile (not measured by ``l2sched profile``) or
    ``ep`` on (the fit models TP without EP); else the fit's answer, from
    the cache when an entry for the same key reads back whole. Raises
    ``L2sPluginError("auto fit failed", ...)`` when the model config is not
    one the fit can read or the fit itself fails (the plugin's one line);
    never for a cache problem."""
    t0 = time.perf_counter()
    if device_profile is None or not device_profile.is_measured:
        which = gpu.describe() if gpu is not None else "this GPU"
        have = ("" if device_profile is None else
                f" (profile {device_profile.name} is an estimate, not measured)")
        return _off(f"auto: no measured device profile for {which}"
                    f"{have}; measure one with `l2sched profile --output my-box.toml` "
                    "and name it with \"device\": \"/path/my-box.toml\"", "no profile")
    if ep:
        return _off("auto: `l2sched fit` models tensor parallelism without expert "
                    "parallelism, and this server runs EP on; serve without "
                    "--enable-expert-parallel, or write a schedule with `ep on` and "
                    "name it",
                    "unsupported layout")
    tokens = _check_tokens(tokens)
    if device_name != device_profile.name and (
            os.sep in device_name or device_name.endswith(".toml")):
        device_name = os.path.abspath(device_name)  # the cached file lives elsewhere
    key = cache_key(model_config, tp, ep, device_profile, device_name, tokens)
    where = Path(cache_dir) if cache_dir is not None else default_cache_dir(environ)
    entry = CacheEntry.of(where, device_profile.name, tp, ep, key)
    hit = _cached(entry)
    if hit is not None:
        return dataclasses.replace(hit, seconds=time.perf_counter() - t0)
    with entry.lock():
        hit = _cached(entry, quiet=True)  # another rank fitted meanwhile
        if hit is not None:
            return dataclasses.replace(hit, seconds=time.perf_counter() - t0)
        return _fit(model_config, tp, device_profile, device_name, tokens, entry, t0)


def _cached(entry: CacheEntry, quiet: bool = False) -> AutoChoice | None:
    """The answer of ``entry`` when it reads back whole (``CacheEntry.read``:
    a damaged one is one WARNING line, unless ``quiet``), else None."""
    got = entry.read(quiet)
    if got is None:
        return None
    return AutoChoice(got.text if got.prefetch else None,
                      f"{got.summary} (from the cache, {got.path})", got.path,
                      entry.key, True, reason="" if got.prefetch else "no prefetch")


def _fit(model_config, tp, device_profile: DeviceProfile, device_name, tokens, entry: CacheEntry,
         t0: float) -> AutoChoice:
    """Run the fit, write the entry (when the directory takes it), return
    the answer."""
    config = dict(model_config)
    try:
        validate_config(config, "the live model config",
                        adapter=adapter_of_config(config))
        ref = None if device_name == device_profile.name else device_name
        search = Search(device_profile, FitOptions(
            tp=tp, tokens=tokens, jobs=JOBS, model_config=config, device_ref=ref))
        search.size = AUTO_SIZE  # FitOptions has no size (only quick)
        result = search.run()
    except L2sError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise L2sPluginError("auto fit failed", first) from None
    seconds = time.perf_counter() - t0
    name = f"auto-{entry.prefix}"  # auto-h200-tp1
    config_path = entry.file("-config.json")
    command = shlex.join(["l2sched", "fit", "--device", device_name, "--tp", str(tp),
                          "--tokens", ",".join(map(str, tokens)), "--model-config",
                          str(config_path), "--jobs", str(JOBS)])
    text = fit_text(result, search, device_arg=device_name, command=command, name=name)
    what = f"{device_profile.name}, TP{tp} EP off, {_tokens_text(tokens)}"
    summary = _summary(result, search, what)
    l2s = entry.file(".l2s")
    written = entry.write(text, summary, result.candidate is not None, config, seconds)
    where = f"cached at {l2s}" if written else "not cached"
    chosen = result.candidate is not None
    return AutoChoice(text if chosen else None,
                      f"{summary} (fitted in {seconds:.1f} s; {where})",
                      l2s if written else None, entry.key, False, seconds,
                      "" if chosen else "no prefetch")
