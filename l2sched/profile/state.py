"""The state file of ``l2sched profile`` (``--state``): the raw results of
every probe run so far, read back to resume (``load_state``, checked before
any GPU work) and written after each probe (``save_state``)."""

from __future__ import annotations

import json
import os

from l2sched.profile.fill_fork import check_fill_fork
from l2sched.profile.step_fill import check_step_fill
from l2sched.errors import L2sInputError
from l2sched.files import note_input, write_text_atomically


def load_state(path: str, known: frozenset) -> dict:
    """The resumed state JSON at ``path`` (``{}`` when there is none):
    ``{"provenance": {...}, "results": {probe: record}}``. Raises
    ``L2sInputError`` (``PATH: message``, with line and column for bad JSON)
    when it cannot be read, is not JSON, is not an object with an object
    ``results``, names a result key not in ``known`` (the probe names,
    ``bench.profile.STATE_KEYS``), or has a
    ``step_fill`` or ``fill_fork`` record ``profile_write`` could not use
    (``step_fill.check_step_fill``, ``fill_fork.check_fill_fork``)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except OSError as e:
        raise L2sInputError(f"{path}: cannot read the state: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise L2sInputError(f"{path}: the state is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise L2sInputError(f"{path}:{e.lineno}:{e.colno}: the state is not JSON: "
                            f"{e.msg}") from None
    note_input(path, "probe state")  # only save_state writes it back
    results = state.get("results", {}) if isinstance(state, dict) else None
    if not isinstance(results, dict):
        raise L2sInputError(f"{path}: not an l2sched profile state (want an object with a "
                            "'results' object)")
    for name, rec in results.items():
        if name not in known:
            raise L2sInputError(f"{path}: results.{name}: not a probe of this version "
                                f"(known: {', '.join(sorted(known))})")
        if not isinstance(rec, dict):
            raise L2sInputError(f"{path}: results.{name}: want an object, got "
                                f"{type(rec).__name__}")
    for name, check in (("step_fill", check_step_fill), ("fill_fork", check_fill_fork)):
        try:
            check(results.get(name))
        except ValueError as e:
            raise L2sInputError(f"{path}: results.{name}{e}") from None
    return state


def save_state(path: str, got: dict) -> None:
    """Keep ``{provenance, results}`` in the state JSON ``path`` (atomic; none
    for ""): the state ``load_state`` read, updated in place."""
    if path:
        write_text_atomically(path, json.dumps(got, indent=1) + "\n", in_place=True)
