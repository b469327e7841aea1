"""Writing output files safely (``fmt``, ``compile -o``, ``timeline -o``).

A write goes to a temporary file in the target's directory and replaces the
target in one ``os.replace``: a crash or a full disk never leaves a
half-written schedule or plan; several outputs of one command (timeline's
trace and SVG) are all written or none. Symlinks are written through (the
link stays a link), an existing file keeps its permission bits, a new file
gets the process umask's default mode; a device or FIFO (``-o /dev/null``)
is written to and stays what it is. Failures are one-line
``L2sInputError``s.

No command overwrites a file it reads. While a command runs
(``command_inputs``, entered by the command line's ``dispatch``), the
readers of input files record each file they read (``note_input``: a
schedule and every schedule it extends, a device profile, a model config, a
bench result, a trace, a probe state, a document), and every output check
(``check_output_path``, run by each command before its work and again by the
writers here) refuses an output that is one of them, or one of the paths a
command names as ``protect``: the same file by device and inode (so also
through a symlink or a hard link). The refusal is a usage error (exit 2)
naming the output and the input, and nothing is written. A write that
updates an input on purpose says so (``in_place``: ``fmt``, ``docs lint``,
``profile --state``, a profile's fitted tables).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import stat
import tempfile
from importlib import resources
from pathlib import Path

from l2sched.errors import Diagnostic, L2sInputError, L2sUsageError, Span

#: The input files the running command has read: ``(st_dev, st_ino)`` ->
#: ``(path as given, what it is)``; ``None`` outside ``command_inputs``.
_INPUTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "l2sched_command_inputs", default=None)


@contextlib.contextmanager
def command_inputs():
    """Record the input files read (``note_input``) while the block runs: one
    command of the command line. Outside it (the vLLM plugin, a library
    call) nothing is recorded and only ``protect`` paths are refused."""
    token = _INPUTS.set({})
    try:
        yield
    finally:
        _INPUTS.reset(token)


def note_input(path: str | os.PathLike, what: str = "input file") -> None:
    """Record that the running command read regular file ``path`` (``what``
    names it in a refusal: ``device profile``, ``schedule``, ...), so that
    no output of the command replaces it. Nothing outside
    ``command_inputs``; a path that cannot be looked up is not recorded.
    Never raises."""
    seen = _INPUTS.get()
    if seen is None:
        return
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # gone already, or a NUL in the name
        return
    if stat.S_ISREG(st.st_mode):
        seen.setdefault((st.st_dev, st.st_ino), (os.fspath(path), what))


def _input_named(target: str, protect, read: bool) -> tuple[str, str] | None:
    """``(path, what)`` of the input that output ``target`` (resolved) is:
    one of ``protect``, or (with ``read``) a file the command read; None for
    neither (a target that does not exist is neither)."""
    try:
        st = os.stat(target)
    except (OSError, ValueError):
        return None
    known = (_INPUTS.get() or {}).get((st.st_dev, st.st_ino)) if read else None
    if known is not None:
        return known
    for p in protect:
        try:
            if os.path.samefile(p, target):
                return os.fspath(p), "input file"
        except (OSError, ValueError):
            continue
    return None


def packaged_dir(package: str, source_dir: str) -> Path:
    """Directory of a data package shipped in the wheel (``l2sched.grammar``,
    ``l2sched.schedules``), or its source folder at the repository root when
    running from a checkout."""
    source = Path(__file__).resolve().parent.parent / source_dir
    if source.is_dir():
        return source
    return Path(str(resources.files(package)))


def read_input_text(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of input file ``path`` (a device profile, a benchmark
    result or header). Raises ``L2sInputError`` with one line naming the
    file when it is missing (``no such WHAT``), not a regular file (a FIFO
    would block the read), unreadable, or not UTF-8 (with the byte and its
    offset). Schedules go through ``syntax.read_source``, which also gives
    line:col."""
    shown = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(shown).st_mode):
            raise _file_error(shown, "not a regular file")
        with open(shown, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise _file_error(shown, f"no such {what}") from None
    except OSError as e:
        raise _file_error(shown, f"cannot read {what}: {e.strerror or e}") from None
    note_input(shown, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _file_error(shown, f"not valid UTF-8 (byte 0x{data[e.start]:02x} "
                                 f"at offset {e.start})") from None


def parse_json_text(text: str, shown: str, prefix: str = ""):
    """``json.loads(text)`` of input file ``shown`` (a plan, a bench result).
    Raises ``L2sInputError`` ``PREFIXnot JSON: ...`` at the line:col of the
    problem, or at the file for values nested too deeply to read or an
    integer literal of thousands of digits."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise L2sInputError(Diagnostic(f"{prefix}not JSON: {e.msg}",
                                       Span.point(shown, e.lineno, e.colno))) from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise L2sInputError(Diagnostic(f"{prefix}not JSON: values nested too deeply "
                                       "to read", Span.file(shown))) from None
    except ValueError as e:  # int() of a literal of thousands of digits
        raise L2sInputError(Diagnostic(f"{prefix}not JSON: {str(e).split(';')[0]}",
                                       Span.file(shown))) from None


def _file_error(shown: str, message: str) -> L2sInputError:
    """``shown: message``, located at the whole file (``Span.file``)."""
    return L2sInputError(Diagnostic(message, Span.file(shown)))


def _error(shown: str, message: str) -> L2sInputError:
    return L2sInputError(Diagnostic(message, Span.point(shown)))


def is_stream(target: str) -> bool:
    """True for an existing character/block device, FIFO or socket: those
    are written to, never replaced (``-o /dev/null`` must stay a device)."""
    try:
        m = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not stat.S_ISREG(m) and not stat.S_ISDIR(m)


def check_output_path(path, protect=(), in_place: bool = False) -> tuple[str, str]:
    """The one check of an output path, shared by every output option of
    every command (``-o/--output`` of compile, timeline, fit, profile,
    verify and bench run, ``profile --md-output``, the lab's ``bench report
    --json-out/--md-out``, ...), run before the command's work (after it has
    read its inputs) and again by the writers here. Returns ``(shown,
    target)``: the path as the user wrote it and the file that will be
    written (symlinks resolved; a device, FIFO or socket as given). Raises
    ``L2sUsageError`` (exit 2) ``OUT: refusing to overwrite the input file
    IN (the WHAT the command reads); nothing was written`` when the output is
    the same file as one of ``protect`` or as an input the command read
    (``note_input``; not with ``in_place``, a write that updates its input
    on purpose); else ``L2sInputError`` with one line, the same for every
    option: ``<empty>:1:1: cannot write: the output path is empty``,
    ``PATH:1:1: cannot write: is a directory`` (``.``, ``/``, ``dir/``),
    ``PATH:1:1: cannot write: no such directory D`` / ``... directory D is
    not writable``, or ``PATH:1:1: cannot write: REASON`` (a symlink loop, a
    name too long)."""
    shown = os.fspath(path) if path is not None else ""
    if not shown:
        raise _error("<empty>", "cannot write: the output path is empty")
    if shown.endswith(os.sep) and not os.path.isdir(shown):
        raise _error(shown, "cannot write: the path ends with a separator (a "
                            "directory), not a file name")
    try:
        if is_stream(path):
            # open the name as given: /dev/stdout on a pipe resolves to
            # 'pipe:[N]', which is not a path
            return shown, os.fspath(path)
        target = os.path.realpath(path, strict=False)  # write through symlinks
        read = _input_named(target, protect, not in_place)
        if read is not None:
            raise L2sUsageError(f"{shown}: refusing to overwrite the input file "
                                f"{read[0]} (the {read[1]} the command reads); nothing "
                                "was written: choose another output path")
        if os.path.isdir(target):
            raise _error(shown, "cannot write: is a directory")
        parent = os.path.dirname(target) or "."
        if not os.path.isdir(parent):
            raise _error(shown, f"cannot write: no such directory {parent}")
        if not os.access(parent, os.W_OK):  # also a read-only file system
            raise _error(shown, f"cannot write: directory {parent} is not writable")
    except OSError as e:  # a symlink loop, a name too long, ...
        raise _error(shown, f"cannot write: {e.strerror or e}") from None
    return shown, target


def write_texts_atomically(outputs, protect=(), in_place: bool = False) -> None:
    """Write every ``(path, text)`` of ``outputs`` (UTF-8) or none of them.

    Every text goes to a temporary file beside its target first; only when
    all are written are they moved into place with ``os.replace``, so a
    failure (missing or unwritable directory, a directory in the way, a full
    disk) leaves every target unchanged. Symlinks are written through, an
    existing file keeps its permission bits, a new one gets the umask's
    default mode. A target that is a device, FIFO or socket is written to
    directly, after the regular files are in place. Raises ``L2sInputError``
    (``path:1:1: ...``) for a failure, for two outputs naming the same file,
    and ``L2sUsageError`` for an output that is one of the ``protect``
    paths or an input the command read (``check_output_path``; ``in_place``:
    the outputs update the inputs they were read from on purpose)."""
    checked = []
    seen: dict[str, str] = {}
    for path, text in outputs:
        shown, target = check_output_path(path, protect, in_place)
        if target in seen:
            raise _error(shown, f"two outputs would go to the same file ({seen[target]})")
        seen[target] = shown
        checked.append((shown, target, text))
    temps: list[tuple[str, str, str]] = []  # (shown, tmp, target)
    try:
        for shown, target, text in checked:
            if is_stream(target):
                continue
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            try:
                fd, tmp = tempfile.mkstemp(prefix=".l2sched-",
                                           dir=os.path.dirname(target))
            except OSError as e:
                raise _error(shown, f"cannot write: {e.strerror or e}") from None
            temps.append((shown, tmp, target))
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                os.chmod(tmp, mode)
            except OSError as e:
                raise _error(shown, f"cannot write: {e.strerror or e}") from None
        for shown, tmp, target in temps:
            try:
                os.replace(tmp, target)
            except OSError as e:
                raise _error(shown, f"cannot write: {e.strerror or e}") from None
        temps.clear()
        for shown, target, text in checked:
            if is_stream(target):
                try:
                    with open(target, "w", encoding="utf-8", newline="") as f:
                        f.write(text)
                except OSError as e:
                    raise _error(shown, f"cannot write: {e.strerror or e}") from None
    finally:
        for _, tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_text_atomically(path: str | os.PathLike, text: str, protect=(),
                          in_place: bool = False) -> None:
    """Replace the contents of ``path`` with UTF-8 ``text`` atomically (see
    ``write_texts_atomically``; a device or FIFO is written to, not
    replaced). Raises ``L2sInputError`` (``path:1:1: cannot write:
    reason``) when the directory is missing or unwritable, ``path`` is a
    directory or the disk is full, ``L2sUsageError`` when it is one of
    ``protect`` or (unless ``in_place``) an input the command read; the
    original file is then unchanged."""
    write_texts_atomically([(path, text)], protect, in_place)
