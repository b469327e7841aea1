"""The GLM-shaped decode step and its timing: ``l2sched bench run|tp``.

The bench tree (``tree``) is a GLM-5.3-Flash-shaped module tree and its step
(``step``) runs one decode step on it. ``l2sched bench run`` times a schedule
against no prefetch on that step on one GPU (``run``: arms from ``arms``,
decoys from ``controls``, the ideal gain from ``ideal``, each arm's set-aside
from ``isolation``, CUDA-graph timing in ``timed_graph``, kernel traces in
``trace``); ``l2sched bench tp`` with real all-reduces, one process per GPU
(``tp``, ``tp_rank``, ``tp_step``, ``tp_allreduce``). ``timing`` is the
event/trace timer the device-profile probes (``l2sched.profile``) use too.
Options live in ``options``. torch is imported inside functions only. This
package knows no vLLM (it installs plans with ``l2sched.runtime``) and no
probe. The research reports over these results are the lab's (``python -m
lab bench ...``), which this package never imports.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from l2sched.device import load_device_text
from l2sched.errors import L2sInputError
from l2sched.files import note_input, packaged_dir, read_input_text


def shipped_path(path: str) -> str:
    """``path`` as given when it exists; else, for a path under
    ``schedules/`` (the benchmark defaults and the arm paths results
    record), the shipped copy of that file or folder, so the benchmark and
    its reports work from any directory. Unchanged otherwise (the caller
    reports a missing file)."""
    p = Path(path)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] != "schedules":
        return path
    shipped = packaged_dir("l2sched.schedules", "schedules").joinpath(*p.parts[1:])
    return str(shipped) if shipped.exists() else path


def read_text_file(path: str, what: str = "file") -> str:
    """The UTF-8 text of ``path``; ``L2sInputError`` (one line, naming the
    file) when it is missing, not a regular file, unreadable or not UTF-8
    (``files.read_input_text``)."""
    return read_input_text(path, what)


def read_json_file(path: str, what: str = "result file"):
    """``read_text_file`` + JSON (a ``.gz`` path is gunzipped first: large
    results are committed compressed); ``L2sInputError`` when it is not
    JSON (or nested too deeply for the reader) or not gzip."""
    if str(path).endswith(".gz"):
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                text = f.read()
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise L2sInputError(f"{path}: cannot read {what}: {why}") from None
        note_input(path, what)
    else:
        text = read_text_file(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise L2sInputError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise L2sInputError(f"{path}: not valid JSON: values nested too deeply to read") from None


def recorded_profile(d: dict, where: str = "the result"):
    """The device profile a bench result ``d`` recorded (its
    ``device_profile_toml``, the profile the run's idle intervals and fill
    shapes came from), or None when it records none. Raises
    ``L2sInputError`` for an unusable copy, located at ``WHERE:
    device_profile_toml:LINE:COL`` (``where``: the result file)."""
    if not isinstance(d, dict) or not d.get("device_profile_toml"):
        return None
    return load_device_text(d["device_profile_toml"], f"{where}: device_profile_toml")
