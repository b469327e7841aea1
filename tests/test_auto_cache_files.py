"""Issue 43: where ``"schedule": "auto"`` caches its answers
(``l2sched.vllm.auto``). Entry file names come from the key's digest with a
sanitized readable prefix (a dotted profile name kept every entry of that
profile in one file before), and a user with no home directory (no ``HOME``,
no passwd entry) caches in a private temporary directory with one WARNING
line instead of failing with ``RuntimeError``. The fits are the real
``l2sched fit`` search (``Search.run`` wrapped only to count its calls);
the entries are ``l2sched.vllm.auto_cache``'s."""

from __future__ import annotations

import json
import logging
import os
import pwd
import stat
import tempfile
from pathlib import Path

import pytest

from l2sched.device import load_device
from l2sched.fit import Search
from l2sched.vllm.auto import auto_schedule, default_cache_dir

ROOT = Path(__file__).resolve().parent.parent
CONFIG = json.loads((ROOT / "l2sched/data/glm53-flash-config.json").read_text())


@pytest.fixture(scope="module")
def dotted(tmp_path_factory):
    """``(profile, device_name)``: the measured h200 profile renamed
    ``h200.sxm5``, in a file the fitted schedule's ``device`` line names
    (as the plugin passes a ``.toml`` profile: its absolute path)."""
    text = (ROOT / "l2sched/data/devices/h200.toml").read_text()
    assert text.count('\nname = "h200"\n') == 1
    path = tmp_path_factory.mktemp("profiles") / "h200.sxm5.toml"
    path.write_text(text.replace('\nname = "h200"\n', '\nname = "h200.sxm5"\n'))
    profile = load_device(path)
    assert profile.name == "h200.sxm5" and profile.is_measured
    return profile, str(path)


@pytest.fixture
def fits(monkeypatch):
    """The token counts of every run of the fit's search (the real one)."""
    calls = []
    real = Search.run

    def counted(self):
        calls.append((self.opts.tp, self.opts.tokens))
        return real(self)

    monkeypatch.setattr(Search, "run", counted)
    return calls


def _auto_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "l2sched.vllm.auto"]


def test_a_dotted_profile_name_keeps_one_entry_per_tp(dotted, tmp_path, fits, caplog):
    """Starts at TP1 and TP2 in turn: each fits once, then both read the
    cache, with no "ignoring the cache entry" line; the files of the two
    entries are distinct and named by a prefix without the dot."""
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        tp1 = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                            cache_dir=tmp_path)
        tp2 = auto_schedule(CONFIG, 2, False, *dotted, tokens=(1,),
                            cache_dir=tmp_path)
        again1 = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                               cache_dir=tmp_path)
        again2 = auto_schedule(CONFIG, 2, False, *dotted, tokens=(1,),
                               cache_dir=tmp_path)
    assert fits == [(1, (1,)), (2, (1,))], "a start refitted"
    assert again1.cached and again2.cached
    assert _auto_lines(caplog) == []
    assert tp1.path != tp2.path and again1.path == tp1.path and again2.path == tp2.path
    assert tp1.path.name == f"h200-sxm5-tp1-{tp1.key}.l2s"
    assert tp2.path.name == f"h200-sxm5-tp2-{tp2.key}.l2s"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"h200-sxm5-tp{t}-{c.key}{s}" for t, c in ((1, tp1), (2, tp2))
                           for s in (".l2s", ".json", "-config.json", ".lock"))


@pytest.mark.parametrize("profile_name", ["a.b.c", "../up", "x y/z", "...", "é.toml"])
def test_entry_names_are_the_key_and_a_sanitized_prefix(profile_name):
    from l2sched.vllm.auto_cache import CacheEntry

    key = "0123456789abcdef" * 2
    entry = CacheEntry.of(Path("/c"), profile_name, 4, False, key)
    for suffix in (".l2s", ".json", "-config.json", ".lock"):
        path = entry.file(suffix)
        assert path.parent == Path("/c") and path.name.endswith(f"-tp4-{key}{suffix}")
        prefix = path.name[:-len(f"-tp4-{key}{suffix}")]
        assert prefix and all(ch.isascii() and (ch.isalnum() or ch in "_-")
                              for ch in prefix), prefix


def test_an_entry_of_the_old_format_is_a_miss_not_a_crash(dotted, tmp_path, fits, caplog):
    """The file a format-1 start wrote for the dotted profile (``h200.json``
    and ``h200.l2s``: the name cut at its dot) is not read: a fit, no line."""
    (tmp_path / "h200.json").write_text(json.dumps(
        {"format": 1, "key": "0" * 32, "l2sched": "0", "prefetch": False,
         "summary": "old", "l2s_sha256": "0" * 64}))
    (tmp_path / "h200.l2s").write_text("schedule old\n")
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        got = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                            cache_dir=tmp_path)
    assert not got.cached and len(fits) == 1 and _auto_lines(caplog) == []


@pytest.fixture
def no_home(monkeypatch):
    """A user with no home directory: ``HOME`` unset and no passwd entry
    for the user id (only that lookup is replaced)."""
    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(RuntimeError):  # what the old code called
        Path.home()


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """``tempfile.gettempdir()`` answering a fresh directory."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def test_no_home_caches_in_a_private_temporary_directory(dotted, no_home, private_tmp, fits,
                                                          caplog):
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        where = default_cache_dir({})
        got = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                            environ={})
    mine = private_tmp / f"l2sched-{os.getuid()}"
    assert where == mine / "auto"
    assert stat.S_IMODE(os.lstat(mine).st_mode) == 0o700
    lines = _auto_lines(caplog)
    assert len(lines) == 2, lines  # one per call, each one line
    assert all("no home directory (HOME is unset and user id" in ln
               and f"caching fitted schedules in {mine / 'auto'}" in ln
               and "L2SCHED_CACHE_DIR" in ln and "\n" not in ln for ln in lines)
    assert got.path is not None and got.path.parent == mine / "auto" and len(fits) == 1
    caplog.clear()
    again = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                          environ={})
    assert again.cached and len(fits) == 1


def test_no_home_never_uses_a_directory_another_user_can_write(no_home, private_tmp,
                                                                caplog):
    planted = private_tmp / f"l2sched-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # not private: someone could plant entries there
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        where = default_cache_dir({})
    assert where is not None and where.parent != planted
    assert where.parent.parent == private_tmp
    assert stat.S_IMODE(os.lstat(where.parent).st_mode) == 0o700
    lines = _auto_lines(caplog)
    assert len(lines) == 1 and str(where) in lines[0]


def test_no_home_and_no_temporary_directory_is_an_uncached_fit(dotted, no_home, monkeypatch,
                                                              fits, caplog, tmp_path):
    def none_usable():
        raise FileNotFoundError(2, "No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", none_usable)
    with caplog.at_level(logging.WARNING, logger="l2sched.vllm.auto"):
        got = auto_schedule(CONFIG, 1, False, *dotted, tokens=(1,),
                            environ={})
    lines = _auto_lines(caplog)
    assert len(lines) == 1 and "no usable temporary directory" in lines[0] \
        and "used uncached" in lines[0], lines
    assert got.path is None and "not cached" in got.summary and len(fits) == 1
