"""Where and how ``"schedule": "auto"`` (``l2sched.vllm.auto``) keeps its
answers on disk: the cache directory (``default_cache_dir``) and one entry's
files (``CacheEntry``), read back whole or not at all.

An entry is three files whose names are a readable prefix and the key
(``<profile>-tp<N>-<key>``: the profile's name with every run of characters
other than ASCII letters, digits, ``_`` and ``-`` made one ``-``, then the
key's 32 hex digits, ``auto.cache_key``); each suffix is appended, never
substituted, so a dotted profile name such as ``h200.sxm5`` keeps one entry
per key: ``.l2s`` (the fitted schedule with its header: ``l2sched lint``
it), ``-config.json`` (the model config, so the header's ``l2sched fit``
command reproduces the answer) and ``.json`` (the record, written last: the
summary and the ``.l2s`` text's SHA-256); ``.lock`` is held while fitting,
so the TP ranks of one machine fit once. Every write is a temporary file
and ``os.replace``; an entry that does not read back whole (bad JSON,
another format, a missing or changed ``.l2s``) is one WARNING line and a
miss; a directory that cannot be written is one WARNING line. Nothing here
raises for a cache problem. The lines go to the ``l2sched.vllm.auto``
logger.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from l2sched import __version__
from l2sched.env import env_path

log = logging.getLogger("l2sched.vllm.auto")

#: The variable naming the cache directory (replaces the default).
ENV_CACHE_DIR = "L2SCHED_CACHE_DIR"
#: The layout of a cache entry, part of the key; a change makes every older
#: entry a miss (2: ``CacheEntry`` names; format 1 cut a dotted profile name
#: at its dot, so the entries of such a profile shared one file).
CACHE_FORMAT = 2


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


@dataclass(frozen=True)
class Cached:
    """An entry read back whole: ``text`` the fitted ``.l2s`` text, ``prefetch``
    whether it has windows, ``summary`` the fit's line, ``path`` the
    ``.l2s`` file."""

    text: str
    prefetch: bool
    summary: str
    path: Path


@dataclass(frozen=True)
class CacheEntry:
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
    def of(cls, directory: Path | None, profile_name: str, tp: int, ep: bool,
           key: str) -> "CacheEntry":
        """The entry of ``key``, its prefix readable: ``profile_name``
        (every run of characters other than ASCII letters, digits, ``_`` and
        ``-`` made one ``-``; at most 40 characters), ``-tpN`` and ``-ep``."""
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", profile_name).strip("-")[:40]
        return cls(directory, f"{name or 'device'}-tp{tp}{'-ep' if ep else ''}", key)

    def file(self, suffix: str) -> Path:
        """``<directory>/<prefix>-<key><suffix>``."""
        where = self.directory if self.directory is not None else Path(".")
        return where / f"{self.prefix}-{self.key}{suffix}"

    @contextlib.contextmanager
    def lock(self):
        """Hold the ``.lock`` file (``fcntl.flock``) while fitting, so the
        ranks of one machine fit once; no lock where that fails (no
        ``fcntl``, a directory that cannot be made or written, no cache)."""
        fd = None
        try:
            import fcntl  # optional: POSIX only (no lock elsewhere)

            if self.directory is None:
                raise OSError("no cache directory")
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.file(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
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

    def write(self, text: str, summary: str, prefetch: bool, config: dict,
              seconds: float) -> bool:
        """Write the entry's three files (the record last); False when there
        is no cache directory (said already) or (one WARNING line) the
        directory does not take them."""
        if self.directory is None:
            return False
        record = {"format": CACHE_FORMAT, "key": self.key, "l2sched": __version__,
                  "prefetch": prefetch, "summary": summary,
                  "l2s_sha256": hashlib.sha256(text.encode()).hexdigest(),
                  "fit_seconds": round(seconds, 3)}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            _atomic_write(self.file("-config.json"), json.dumps(
                config, indent=1, sort_keys=True, default=str) + "\n")
            _atomic_write(self.file(".l2s"), text)
            _atomic_write(self.file(".json"), json.dumps(record, indent=1) + "\n")
        except OSError as e:
            log.warning("l2sched: auto: cannot cache the fitted schedule in %s (%s); "
                        "the next start fits again", self.directory, e.strerror or e)
            return False
        return True

    def read(self, quiet: bool = False) -> Cached | None:
        """The entry read back, or None: no cache, no entry (a miss), or one
        that does not read back whole (one WARNING line, unless ``quiet``;
        the caller refits and overwrites it)."""
        if self.directory is None:
            return None
        record_path, l2s = self.file(".json"), self.file(".l2s")
        try:
            raw = record_path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):  # no entry (or directory)
            return None
        except (OSError, UnicodeDecodeError) as e:
            return _corrupt(record_path, getattr(e, "strerror", None) or str(e), quiet)
        try:
            rec = json.loads(raw)
            ok = (isinstance(rec, dict) and rec.get("format") == CACHE_FORMAT
                  and rec.get("key") == self.key and isinstance(rec.get("summary"), str)
                  and isinstance(rec.get("prefetch"), bool)
                  and isinstance(rec.get("l2s_sha256"), str))
        except ValueError as e:
            return _corrupt(record_path, f"not JSON ({e})", quiet)
        if not ok:
            return _corrupt(record_path, "not a cache record of this key and format",
                            quiet)
        try:
            text = l2s.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            return _corrupt(l2s, getattr(e, "strerror", None) or str(e), quiet)
        if hashlib.sha256(text.encode()).hexdigest() != rec["l2s_sha256"]:
            return _corrupt(l2s, "its text differs from the one cached", quiet)
        return Cached(text, rec["prefetch"], rec["summary"], l2s)


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


def _corrupt(path: Path, why: str, quiet: bool) -> None:
    if not quiet:
        log.warning("l2sched: auto: ignoring the cache entry %s: %s; fitting again",
                    path, why)
    return None
