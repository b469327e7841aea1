"""Editing a device profile file as text: ``profile_table_header`` (the
table a line opens) and ``write_allreduce_model`` (the fitted all-reduce
table put into the file, everything else kept byte for byte)."""

from __future__ import annotations

import os
import re
from pathlib import Path

try:  # Python >= 3.11
    import tomllib as toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as toml  # type: ignore[no-redef]

from l2sched.device.allreduce import AllReduceModel, allreduce_table
from l2sched.device.parse import parse_device, profile_path, read_profile_text
from l2sched.errors import L2sInputError, source_lines
from l2sched.files import write_text_atomically

#: A table header line: ``[name]``, spaces inside the brackets and a ``#``
#: comment after them allowed (not an array value such as ``[[8, 0.5]]``).
_TABLE_HEADER = re.compile(r'^\s*\[\s*([A-Za-z_"][^\[\],]*?)\s*\]\s*(?:#.*)?$')


def profile_table_header(line: str) -> str | None:
    """The table name of a header line of a profile (``[ allreduce.tp2 ]  #
    x`` -> ``allreduce.tp2``; spaces around the dots dropped), else None.
    For the tools that edit a profile as text."""
    m = _TABLE_HEADER.match(line.rstrip("\r\n"))
    return None if m is None else "".join(m.group(1).split())


def write_allreduce_model(name_or_path: str | os.PathLike, degree: int,
                          model: AllReduceModel,
                          comments: tuple[str, ...] = ()) -> Path:
    """Put ``model`` into the profile file as ``[allreduce.tpDEGREE]``:
    the existing table of that degree is replaced (its comment lines inside
    the table too; comments above the next table stay), or a new one is
    added after the last ``[allreduce.tpN]`` table. Other tables and
    comments are kept byte for byte. The new text is validated as a profile
    before it is written. Returns the path. Raises ``L2sInputError`` when
    the file cannot be read or the result does not load, ``ValueError`` for
    ``degree < 2``."""
    if degree < 2:
        raise ValueError(f"an all-reduce model needs a TP degree >= 2, got {degree}")
    path = profile_path(name_or_path)
    text = read_profile_text(path)
    lines = source_lines(text, keepends=True)
    headers = [i for i, ln in enumerate(lines) if profile_table_header(ln) is not None]
    block = source_lines(allreduce_table(degree, model, comments), keepends=True)

    def table_end(h: int) -> int:
        """End of the table at line ``h``: the next header, less the blank
        and comment lines right above it (they belong to the next table)."""
        nxt = next((i for i in headers if i > h), len(lines))
        while nxt > h + 1 and (not lines[nxt - 1].strip()
                               or lines[nxt - 1].lstrip().startswith("#")):
            nxt -= 1
        return nxt

    want = f"allreduce.tp{degree}"
    here = next((i for i in headers if profile_table_header(lines[i]) == want), None)
    if here is not None:
        lines[here:table_end(here)] = block
    else:
        ars = [i for i in headers if profile_table_header(lines[i]).startswith("allreduce.tp")]
        at = table_end(ars[-1]) if ars else len(lines)
        if at and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        lines[at:at] = block
    new = "".join(lines)
    try:
        parse_device(toml.loads(new), str(path), new)
    except toml.TOMLDecodeError as e:  # pragma: no cover - we wrote valid TOML
        raise L2sInputError(f"{path}: the updated profile is not valid TOML: {e}") from None
    write_text_atomically(path, new, in_place=True)  # the profile read above
    return path
