"""Metric 4: the l2sched CLI's argparse options, two ways.

Run from inside a tree:  cd TREE && PYTHONPATH=$PWD /work/main/.venv/bin/python /tmp/m47/cli_options.py [--list]

(A) introspection: l2sched.cli.main.build_parser(()) (every subcommand
    registered), walked recursively through _SubParsersAction choices; per
    command every optional action (option_strings non-empty) counts once
    (aliases together); "no help" = action.help is None or "" (argparse.SUPPRESS
    counted separately as hidden).
(B) --help text: `python -m l2sched [CMD [SUB]] --help` for every command path
    found in (A), run as a subprocess; the "options:" section is parsed: an
    entry is a line indented 2 spaces starting with '-'; it has help text when
    text follows the invocation on the same line (2+ spaces gap) or the next
    line is a deeper-indented continuation that is not a new entry.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from l2sched.cli.main import build_parser


def walk(parser, path=()):
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                # aliases map to the same parser object; keep the first name
                if any(sp is p for _, p in seen):
                    continue
                seen.append((name, sp))
                yield from walk(sp, path + (name,))


seen: list = []


def introspect():
    root = build_parser(())
    out = {}
    for path, p in walk(root):
        opts = []
        for a in p._actions:
            if not a.option_strings:
                continue
            hidden = a.help == argparse.SUPPRESS
            opts.append({"strings": list(a.option_strings), "dest": a.dest,
                         "help": None if hidden else (a.help or ""), "hidden": hidden,
                         "metavar": a.metavar if isinstance(a.metavar, str) else None})
        subs = any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
        out[" ".join(path) or "(root)"] = {"options": opts, "has_subcommands": subs}
    return out


def help_text_options(path):
    cmd = [sys.executable, "-m", "l2sched", *path, "--help"]
    env = dict(os.environ, COLUMNS="100")
    txt = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
    lines = txt.splitlines()
    entries = []
    in_opts = False
    for i, line in enumerate(lines):
        if re.match(r"^(options|optional arguments):\s*$", line):
            in_opts = True
            continue
        if in_opts and line and not line.startswith(" "):
            in_opts = False          # next section (epilog / other group)
        if re.match(r"^\S.*:\s*$", line) and not line.startswith("usage"):
            # argument groups also list options: treat any group header as an options section
            in_opts = not line.startswith("positional arguments")
            continue
        if not in_opts:
            continue
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$", line)
        if not m:
            continue
        inv, text = m.group(1), m.group(2)
        has_help = bool(text)
        if not has_help and i + 1 < len(lines):
            nxt = lines[i + 1]
            indent = len(nxt) - len(nxt.lstrip(" "))
            has_help = bool(nxt.strip()) and indent > 2 and not nxt.lstrip().startswith("-")
        strings = [s.split(" ")[0] for s in inv.split(", ")]
        entries.append({"strings": strings, "has_help": has_help})
    return entries


def main():
    data = introspect()
    result = {"commands": {}}
    for cmd, d in data.items():
        path = () if cmd == "(root)" else tuple(cmd.split(" "))
        opts = [o for o in d["options"] if "-h" not in o["strings"]]
        text = [e for e in help_text_options(path) if "-h" not in e["strings"]]
        result["commands"][cmd] = {
            "has_subcommands": d["has_subcommands"],
            "n_options": len(opts),
            "n_no_help": sum(1 for o in opts if not o["hidden"] and not o["help"]),
            "n_hidden": sum(1 for o in opts if o["hidden"]),
            "options": opts,
            "help_text_n_options": len(text),
            "help_text_n_no_help": sum(1 for e in text if not e["has_help"]),
            "help_text_no_help": [e["strings"] for e in text if not e["has_help"]],
        }
    cs = result["commands"].values()
    result["total_options"] = sum(c["n_options"] for c in cs)
    result["total_no_help"] = sum(c["n_no_help"] for c in cs)
    result["total_hidden"] = sum(c["n_hidden"] for c in cs)
    result["help_text_total_options"] = sum(c["help_text_n_options"] for c in cs)
    result["help_text_total_no_help"] = sum(c["help_text_n_no_help"] for c in cs)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
