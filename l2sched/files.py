"""Writing output files safely (``fmt``, ``compile -o``, ``timeline -o``).

A write goes to a temporary file in the target's directory and replaces the
target in one ``os.replace``: a crash or a full disk never leaves a
half-written schedule or plan. Symlinks are written through (the link stays a
link), an existing file keeps its permission bits, a new file gets the
process umask's default mode. Failures are one-line ``L2sInputError``s.
"""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import Diagnostic, L2sInputError, Span


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Replace the contents of ``path`` with UTF-8 ``text`` atomically.

    Raises ``L2sInputError`` (``path:1:1: cannot write: reason``) when the
    directory is missing or unwritable, ``path`` is a directory, or the disk
    is full; the original file is then unchanged."""
    shown = str(path)
    target = os.path.realpath(path)  # write through symlinks
    try:
        if os.path.isdir(target):
            raise IsADirectoryError(21, "is a directory")
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        fd, tmp = tempfile.mkstemp(prefix=".l2sched-", dir=os.path.dirname(target))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise L2sInputError(Diagnostic(f"cannot write: {e.strerror or e}",
                                       Span.point(shown))) from None
