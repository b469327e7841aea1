"""Issue 47: every option and argument of every ``l2sched`` command says
what it does,
and the path a command writes is spelled one way: ``-o/--output`` (a second
file in another format: ``--FORMAT-output``, ``profile --md-output``); the
spellings before it stay as aliases, so nothing users type breaks."""

from __future__ import annotations

import argparse
import re

import pytest

from l2sched.cli.main import build_parser

#: Options whose name says "output" but that name no path: ``verify
#: --output-len`` is tokens generated per request (vllm bench latency's name).
NOT_A_PATH = {"--output-len"}
#: An option string that names an output path: ``--out``, ``--output``,
#: ``--md-out``, ``--output-json``, ``-o``, ...
OUTPUT_WORD = re.compile(r"^(-o|--(\w+-)*out(put)?(-\w+)*)$")
#: The primary spellings of an output path option.
PRIMARY = re.compile(r"^--(\w+-)?output$")
#: Spellings each command took before issue 47 -> the option that now has it.
ALIASES = {("profile",): {"--out": "--output", "--md-out": "--md-output"},
           ("bench", "run"): {"--out": "--output"},
           ("bench", "tp"): {"--out": "--output"},
           ("verify",): {"--output-json": "--output"}}


def command_arguments(parser, path=()):
    """``(command path, action)`` for every option and positional argument
    of every (sub)command of ``parser``, ``--help`` left out."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_arguments(sub, path + (name,))
        elif action.dest != "help":
            yield path, action


def subparser(path):
    """The argparse parser of ``l2sched PATH...``."""
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def output_spelling_problems(options) -> list[str]:
    """One line per output-path option among ``options`` whose primary name
    (its first long option string) is not ``--output``/``--FORMAT-output``,
    or whose main ``--output`` has no ``-o``."""
    problems = []
    for path, action in options:
        names = [s for s in action.option_strings if s not in NOT_A_PATH]
        if not any(OUTPUT_WORD.match(s) for s in names):
            continue
        primary = next(s for s in action.option_strings if s.startswith("--"))
        where = f"l2sched {' '.join(path)} {'/'.join(action.option_strings)}"
        if not PRIMARY.match(primary):
            problems.append(f"{where}: the primary name is {primary}")
        elif primary == "--output" and "-o" not in action.option_strings:
            problems.append(f"{where}: no -o")
    return problems


def test_every_argument_says_what_it_does():
    """13 options and 6 positional arguments had no help text before issue 47."""
    missing = [f"l2sched {' '.join(path)} {'/'.join(a.option_strings) or a.dest}"
               for path, a in command_arguments(build_parser()) if not a.help]
    assert missing == []


def test_every_output_path_option_is_spelled_output():
    assert output_spelling_problems(command_arguments(build_parser())) == []


@pytest.mark.parametrize("path", sorted(ALIASES))
def test_the_old_output_spellings_still_parse(path):
    actions = subparser(path)._option_string_actions
    for old, new in ALIASES[path].items():
        assert actions[old] is actions[new], f"l2sched {' '.join(path)} {old}"


def test_the_spelling_check_finds_the_old_names():
    def option(*names):
        return (("cmd",), argparse.Action(list(names), dest="x", help="h"))

    assert output_spelling_problems([option("--out"), option("--md-out"),
                                     option("--output-json"), option("--output"),
                                     option("--output-len"),
                                     option("-o", "--output", "--out"),
                                     option("--md-output", "--md-out")]) == [
        "l2sched cmd --out: the primary name is --out",
        "l2sched cmd --md-out: the primary name is --md-out",
        "l2sched cmd --output-json: the primary name is --output-json",
        "l2sched cmd --output: no -o"]
