"""Options several ``l2sched`` subcommands share, and how a subcommand is
registered (so every one reports usage errors the same way)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable

from l2sched.errors import L2sInputError, L2sUsageError
from l2sched.lang.overrides import check_override_arg
from l2sched.model.config import read_config_arg
from l2sched.device import load_device, profile_path
from l2sched.lang.schedule import MAX_TOKENS_LIMIT


class SetAction(argparse.Action):
    """``--set KEY=VALUE`` (repeatable): a value that is not one line (a
    newline or other control character) is a usage error, exit 2."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest) or [])
        problem = check_override_arg(values)
        if problem is not None:
            parser.exit(2, f"{parser.prog}: error: --set #{len(items) + 1}: "
                           f"{problem}\n")
        setattr(namespace, self.dest, items + [values])


def add_command(sub, name: str, handler: Callable[[Any], int], **kw
                ) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to the argparse ``sub`` (a subparsers
    action); ``handler(args)`` returns the exit code. ``args.prog`` is the
    command's name as usage errors print it (``l2sched explain``);
    ``args.parser`` the subcommand's parser (its usage is printed for an
    unknown option)."""
    p = sub.add_parser(name, **kw)
    p.set_defaults(handler=handler, prog=p.prog, parser=p)
    # ``--weights -1,2`` is a value (the command's own range check names
    # it), not an unknown option: argparse takes only ``-1`` or ``-1.5`` for
    # a negative number (no option of l2sched looks like one)
    p._negative_number_matcher = NUMBER_LIST
    return p


#: A negative number, or a comma-separated list of numbers starting with
#: one (``-1``, ``-.5``, ``-1,2``, ``-1e3,4``): what argparse must read as an
#: option's value, not as an option.
NUMBER_LIST = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(,[-+]?[\w.]*)*$")


def add_schedule_args(p: argparse.ArgumentParser) -> None:
    """The options every schedule-reading subcommand takes: ``--set``
    overrides, ``--model-config`` and ``--device`` (a device profile in place
    of the schedule's; ``with_device``)."""
    p.add_argument("--set", dest="overrides", action=SetAction, default=[],
                   metavar="KEY=VALUE",
                   help="override a value, e.g. --set window.B.budget=25MB "
                        "(repeatable; applied after the file's own set lines)")
    p.add_argument("--model-config", metavar="PATH",
                   help="HF config.json, model directory or shipped config name, "
                        "in place of the schedule's model_config line (default: "
                        "that line's config, else the one embedded for its model)")
    p.add_argument("--device", metavar="NAME_OR_FILE",
                   help="device profile: a shipped name or a .toml file (default: "
                        "the schedule's device)")


def with_device(schedule, device: str | None):
    """``schedule`` with its ``device`` replaced by ``--device`` (a shipped
    profile name or a ``.toml`` path, read and validated here); unchanged
    when ``device`` is ``None``. Raises ``L2sInputError`` naming the profile
    file (or the unknown name, with a suggestion)."""
    if device is None:
        return schedule
    check_device_arg(device)
    return dataclasses.replace(schedule, device=device)


def check_device_arg(device: str | None):
    """The ``DeviceProfile`` ``--device`` names (a shipped name or a
    ``.toml`` file), read once before any schedule is; None for None. The
    one reader of ``--device`` for every command (check, lint, compile,
    explain, timeline, fit, verify), so each says the same and exits 1, as
    for the other options that name a file (``--model-config``,
    ``--calibrate``): a value that names no profile (an unknown name, a file
    that is not ``.toml``) is one line ``--device: ...``; a missing file, a
    directory or a profile with errors is reported at the file (every
    problem, ``file:line:col``). Raises ``L2sInputError``."""
    if device is None:
        return None
    try:
        profile_path(device)
    except L2sInputError as err:
        raise L2sInputError(f"--device: {err.diagnostics[0].message}") from None
    return load_device(device)


def check_token_counts(opt: str, tokens, given=None) -> None:
    """Every decode batch size M an option gives (``--tokens`` of lint,
    timeline, explain, profile, bench) lies in 1 .. ``MAX_TOKENS_LIMIT``
    (2,147,483,647 tokens per step: the int32 token counts of vLLM and the
    runtime's gate, the largest ``max_tokens`` a schedule takes; a
    ``# measured:`` line's M has the same bound). ``given``: the option's
    text as written (default: the numbers). Raises ``L2sUsageError``
    naming the option."""
    tokens = list(tokens)
    if not tokens or min(tokens) < 1:
        raise L2sUsageError(f"{opt} must be at least 1, got "
                            f"{given if given is not None else ','.join(map(str, tokens))}")
    if max(tokens) > MAX_TOKENS_LIMIT:
        raise L2sUsageError(f"{opt} {max(tokens)}: above {MAX_TOKENS_LIMIT:,} tokens per "
                            f"step, the most a decode step counts (int32; a schedule's "
                            f"max_tokens has the same bound)")


def model_config_arg(path: str | None) -> dict | None:
    """The validated config ``--model-config PATH`` names (a file, a model
    directory or a shipped config's name, ``config_file_arg``), or ``None``
    when not given (each stage then uses the schedule's ``model_config``,
    else the adapter's embedded config). Raises ``L2sModelError``
    (``read_config_arg``: an unknown name is one line naming the option,
    with the closest shipped name)."""
    return None if path is None else read_config_arg(path)[0]


def numbers(opt: str, text: str, kind=float) -> list:
    """The comma-separated numbers of option ``opt``; ``L2sUsageError``
    naming the option for anything else."""
    if any(not x.strip() for x in text.split(",")):
        raise L2sUsageError(f"{opt} takes comma-separated numbers, got {text!r}")
    # int()/float() also read '1_0' as 10 and non-ASCII digits
    if any(not x.strip().isascii() or "_" in x for x in text.split(",")):
        raise L2sUsageError(f"{opt} takes comma-separated numbers, got {text!r}")
    try:
        vals = [kind(x) for x in text.split(",")]
    except ValueError:
        raise L2sUsageError(f"{opt} takes comma-separated numbers, got {text!r}") from None
    if not vals:
        raise L2sUsageError(f"{opt} takes comma-separated numbers, got {text!r}")
    if any(v != v or v in (float("inf"), float("-inf")) for v in vals):
        raise L2sUsageError(f"{opt} takes finite numbers, got {text!r}")
    return vals
