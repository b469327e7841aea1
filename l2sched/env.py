"""Environment variables with a yes/no meaning, read one way everywhere.

``L2SCHED_NO_TVM_FFI=0`` means "no", not "set, so yes"; a value that is
neither a yes nor a no word is an error naming the variable, never
silently true.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from l2sched.errors import L2sUsageError

#: Words (case-insensitive, surrounding blanks ignored) that mean yes / no.
#: An empty value means the variable is not set.
YES_WORDS = ("1", "true", "yes", "on")
NO_WORDS = ("0", "false", "no", "off")


def env_flag(name: str, environ: Mapping[str, str] | None = None,
             default: bool = False) -> bool:
    """The yes/no value of environment variable ``name`` (in ``environ``,
    default ``os.environ``): ``YES_WORDS`` -> True, ``NO_WORDS`` -> False,
    unset or empty -> ``default``. Raises ``L2sUsageError`` naming the
    variable and its value for anything else."""
    env = os.environ if environ is None else environ
    text = (env.get(name) or "").strip().lower()
    if not text:
        return default
    if text in YES_WORDS:
        return True
    if text in NO_WORDS:
        return False
    raise L2sUsageError(f"{name}={env.get(name)!r}: expected one of "
                        f"{'/'.join(YES_WORDS)} (yes) or {'/'.join(NO_WORDS)} (no)")


def env_path(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The path environment variable ``name`` holds (in ``environ``,
    default ``os.environ``), surrounding blanks dropped and a leading ``~``
    expanded; ``None`` when it is unset or blank."""
    env = os.environ if environ is None else environ
    text = (env.get(name) or "").strip()
    return Path(os.path.expanduser(text)) if text else None
