"""``"schedule": "auto"`` (issue 31 item 2): the plugin fits a schedule for
the live engine instead of reading one from a file.

``auto_schedule`` runs ``l2sched fit``'s search (``l2sched.fit.Search``,
its default size) for the live model config (vLLM's ``hf_text_config`` as a
dict), the TP layout, the measured device profile of the rank's GPU and the
decode batch sizes the engine captures (``vllm.loss_gate.capture_sizes``),
and returns an ``AutoChoice``: the fitted ``.l2s`` text (``None``: no
prefetch) and one line saying what it chose, with the predicted gain per M
and the fit's lower bound, or why it chose nothing.

The answer is cached on disk (``default_cache_dir``: ``$L2SCHED_CACHE_DIR``, else
``$XDG_CACHE_HOME/l2sched/auto``, else ``~/.cache/l2sched/auto``, else, for a
user with no home directory, a private temporary directory with one WARNING
line), keyed by
``cache_key``: the model config's content, TP degree, EP, the device
profile's content (the numbers the fit reads, not its path), the profile's
name or path as the schedule's ``device`` line writes it, the token counts,
the l2sched version, the source of the code that decides the answer
(``code_digest``: a checkout changes without a new version) and the
search's settings. One entry is three files whose names are a readable
prefix and the key (``<profile>-tp<N>-<key>``: the profile's name with every
character but letters, digits, ``_`` and ``-`` made ``-``, then the key's 32
hex digits; the suffixes below are appended, never substituted, so a dotted
profile name such as ``h200.sxm5`` keeps one entry per key): ``.l2s`` (the
fitted schedule with its
header: ``l2sched lint`` it), ``-config.json`` (the model config, so the
header's ``l2sched fit`` command reproduces the answer) and ``.json`` (the
record, written last: the summary and the ``.l2s`` text's SHA-256). Every
write is a temporary file and ``os.replace``; an entry that does not read
back whole (bad JSON, another format, a missing or changed ``.l2s``) is
logged in one line and refitted; a cache directory that cannot be written
is logged in one line and the answer is used uncached. Nothing here raises
for a cache problem. TP ranks that start together fit once: the first takes
a lock (``fcntl.flock`` on ``<entry>.lock``), the others wait for it and
read its entry (``.lock``).

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

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shlex
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from l2sched import __version__
from l2sched.device import DeviceProfile, GpuIdentity
from l2sched.env import env_path
from l2sched.errors import L2sError, L2sPluginError
from l2sched.fit import FitOptions, Search, fit_text
from l2sched.fit.search import DEFAULT_SIZE
from l2sched.lang.resolve import load_schedule_text
from l2sched.model.adapters import adapter_of_config
from l2sched.model.config import validate_config
from l2sched.units import format_size

log = logging.getLogger("l2sched.vllm.auto")

#: The variable naming the cache directory (replaces the default).
ENV_CACHE_DIR = "L2SCHED_CACHE_DIR"
#: The layout of a cache entry; a change makes every older entry a miss (2:
#: file names are ``_Entry`` names, format 1's cut dotted profile names).
CACHE_FORMAT = 2
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
# cache key and place


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the answers are cached: ``$L2SCHED_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/l2sched/auto`` (an absolute ``XDG_CACHE_HOME`` only,
    as the XDG base-directory spec says), else ``~/.cache/l2sched/auto``
    (``environ`` default ``os.environ``), else (no home directory: ``HOME``
    unset and no passwd entry for the user, a container's user) the private
    temporary directory of ``home_less_cache_dir``, with one WARNING line;
    ``None`` (the answer is used uncached, said in that line) when there is
    no usable temporary directory either. Never raises."""
    own = env_path(ENV_CACHE_DIR, environ)
    if own is not None:
        return own
    xdg = env_path("XDG_CACHE_HOME", environ)
    if xdg is not None and xdg.is_absolute():
        return xdg / "l2sched" / "auto"
    try:
        return Path.home() / ".cache" / "l2sched" / "auto"
    except RuntimeError:  # "Could not determine home directory"
        return home_less_cache_dir()


def home_less_cache_dir() -> Path | None:
    """The cache directory of a user with no home directory:
    ``<tempfile.gettempdir()>/l2sched-<uid>/auto``, the ``l2sched-<uid>``
    directory made mode 0700 and used only when it is a real directory (not
    a link) owned by this user that no one else may read or write; else a
    fresh ``tempfile.mkdtemp`` directory (private by construction; not
    found again by the next start, so that start fits again). Logs one
    WARNING line naming the directory, or saying that the answer is used
    uncached (returns ``None``) when no temporary directory can be made.
    Never raises."""
    uid = os.getuid()
    why = f"HOME is unset and user id {uid} has no passwd entry"
    try:
        place = Path(tempfile.gettempdir()) / f"l2sched-{uid}"
        with contextlib.suppress(FileExistsError):
            place.mkdir(mode=0o700)
        st = os.lstat(place)
        if not (stat.S_ISDIR(st.st_mode) and st.st_uid == uid
                and not stat.S_IMODE(st.st_mode) & 0o077):
            place = Path(tempfile.mkdtemp(prefix=f"l2sched-{uid}-"))
    except OSError as e:
        log.warning("l2sched: auto: no home directory (%s) and no usable temporary "
                    "directory (%s); the answer is used uncached (set %s to cache it)",
                    why, getattr(e, "strerror", None) or e, ENV_CACHE_DIR)
        return None
    log.warning("l2sched: auto: no home directory (%s); caching fitted schedules in "
                "%s (set %s to choose the place)", why, place / "auto", ENV_CACHE_DIR)
    return place / "auto"


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


@dataclass(frozen=True)
class _Entry:
    """The files of one cache entry in ``directory`` (``None``: no cache,
    the answer is used uncached): ``<base>.l2s``, ``<base>-config.json``,
    ``<base>.json`` (the record) and ``<base>.lock``, ``base`` being
    ``<prefix>-<key>``. Each name is ``base`` with its suffix appended:
    nothing is cut from a user-chosen name, so two keys never share a
    file."""

    directory: Path | None
    prefix: str
    key: str

    @classmethod
    def of(cls, directory: Path | None, device_profile: DeviceProfile, tp: int,
           ep: bool, key: str) -> "_Entry":
        """The entry of ``key``, its prefix readable: the profile's name
        (every run of characters other than ASCII letters, digits, ``_`` and
        ``-`` made one ``-``; at most 40 characters), ``-tpN`` and ``-ep``."""
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", device_profile.name).strip("-")[:40]
        return cls(directory, f"{name or 'device'}-tp{tp}{'-ep' if ep else ''}", key)

    def file(self, suffix: str) -> Path:
        """``<directory>/<prefix>-<key><suffix>``."""
        where = self.directory if self.directory is not None else Path(".")
        return where / f"{self.prefix}-{self.key}{suffix}"


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
                    f"{have}; measure one with `l2sched profile --out my-box.toml` "
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
    entry = _Entry.of(where, device_profile, tp, ep, key)
    hit = _read_entry(entry)
    if hit is not None:
        return dataclasses.replace(hit, seconds=time.perf_counter() - t0)
    with _lock(entry):
        hit = _read_entry(entry, quiet=True)  # another rank fitted meanwhile
        if hit is not None:
            return dataclasses.replace(hit, seconds=time.perf_counter() - t0)
        return _fit(model_config, tp, device_profile, device_name, tokens, entry, t0)


def _fit(model_config, tp, device_profile, device_name, tokens, entry: _Entry,
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
    written = _write_entry(entry, text, summary, result.candidate is not None, config,
                           seconds)
    where = f"cached at {l2s}" if written else "not cached"
    chosen = result.candidate is not None
    return AutoChoice(text if chosen else None,
                      f"{summary} (fitted in {seconds:.1f} s; {where})",
                      l2s if written else None, entry.key, False, seconds,
                      "" if chosen else "no prefetch")


# --------------------------------------------------------------------------
# the entry on disk


@contextlib.contextmanager
def _lock(entry: _Entry):
    """Hold the entry's ``.lock`` file (``fcntl.flock``) while fitting, so
    the ranks of one machine fit once; no lock where that fails (no
    ``fcntl``, a directory that cannot be made or written, no cache)."""
    fd = None
    try:
        import fcntl

        if entry.directory is None:
            raise OSError("no cache directory")
        entry.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(entry.file(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError):
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _atomic_write(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file beside it and
    ``os.replace``. Raises ``OSError``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_entry(entry: _Entry, text: str, summary: str, prefetch: bool,
                 config: dict, seconds: float) -> bool:
    """Write the entry's three files (the record last); False when there is
    no cache directory (said already) or (one WARNING line) the directory
    does not take them."""
    if entry.directory is None:
        return False
    record = {"format": CACHE_FORMAT, "key": entry.key, "l2sched": __version__,
              "prefetch": prefetch, "summary": summary,
              "l2s_sha256": hashlib.sha256(text.encode()).hexdigest(),
              "fit_seconds": round(seconds, 3)}
    try:
        entry.directory.mkdir(parents=True, exist_ok=True)
        _atomic_write(entry.file("-config.json"),
                      json.dumps(config, indent=1, sort_keys=True, default=str) + "\n")
        _atomic_write(entry.file(".l2s"), text)
        _atomic_write(entry.file(".json"), json.dumps(record, indent=1) + "\n")
    except OSError as e:
        log.warning("l2sched: auto: cannot cache the fitted schedule in %s (%s); "
                    "the next start fits again", entry.directory, e.strerror or e)
        return False
    return True


def _read_entry(entry: _Entry, quiet: bool = False) -> AutoChoice | None:
    """The cached answer of ``entry``, or None: no cache, no entry (a miss),
    or one that does not read back whole (one WARNING line, unless
    ``quiet``; the caller refits and overwrites it)."""
    if entry.directory is None:
        return None
    key = entry.key
    record_path, l2s = entry.file(".json"), entry.file(".l2s")
    try:
        raw = record_path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no directory)
        return None
    except (OSError, UnicodeDecodeError) as e:
        return _corrupt(record_path, getattr(e, "strerror", None) or str(e), quiet)
    try:
        rec = json.loads(raw)
        ok = (isinstance(rec, dict) and rec.get("format") == CACHE_FORMAT
              and rec.get("key") == key and isinstance(rec.get("summary"), str)
              and isinstance(rec.get("prefetch"), bool)
              and isinstance(rec.get("l2s_sha256"), str))
    except ValueError as e:
        return _corrupt(record_path, f"not JSON ({e})", quiet)
    if not ok:
        return _corrupt(record_path, "not a cache record of this key and format", quiet)
    try:
        text = l2s.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return _corrupt(l2s, getattr(e, "strerror", None) or str(e), quiet)
    if hashlib.sha256(text.encode()).hexdigest() != rec["l2s_sha256"]:
        return _corrupt(l2s, "its text differs from the one cached", quiet)
    return AutoChoice(text if rec["prefetch"] else None,
                      f"{rec['summary']} (from the cache, {l2s})", l2s, key, True,
                      reason="" if rec["prefetch"] else "no prefetch")


def _corrupt(path: Path, why: str, quiet: bool) -> None:
    if not quiet:
        log.warning("l2sched: auto: ignoring the cache entry %s: %s; fitting again",
                    path, why)
    return None
