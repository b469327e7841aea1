"""Static API-drift scan: which ``torch.*`` / ``triton.*`` / ``tl.*`` dotted
names that vLLM's Python files use exist in one installed torch/triton but not
in another.

    python benchmarks/vllm_gpu/api_drift.py names VLLM_DIR > names.json
        (run once, any Python: every dotted name per file)
    python benchmarks/vllm_gpu/api_drift.py check names.json > present.json
        (run under each torch/triton pair: which names resolve)
    python benchmarks/vllm_gpu/api_drift.py diff new.json old.json names.json [PREFIX...]
        (names that resolve in new but not in old, with the files using them,
        restricted to files under the given vLLM path prefixes)

A name resolves when getattr along its dots succeeds, importing submodules on
the way. Names used only behind a version check still show up: read the
listed lines before concluding. Used for docs/vllm.md ("GPU run").
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys

_NAME = re.compile(r"\b(torch|triton|tl)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def names(root: str) -> dict[str, list[str]]:
    """``{dotted name: [relative file:line, ...]}`` for every .py under root
    (``tl.`` is spelled ``triton.language.``)."""
    out: dict[str, list[str]] = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".py"):
                continue
            p = os.path.join(d, f)
            with open(p, encoding="utf-8", errors="replace") as fh:
                for i, line in enumerate(fh, 1):
                    if line.lstrip().startswith("#"):
                        continue
                    for m in _NAME.finditer(line):
                        base = "triton.language" if m.group(1) == "tl" else m.group(1)
                        out.setdefault(base + m.group(2), []).append(
                            f"{os.path.relpath(p, root)}:{i}")
    return out


def _resolves(name: str) -> bool:
    parts = name.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(".".join(parts[: i + 1]))
        except Exception:
            return False
    return True


def check(names_file: str) -> dict[str, bool]:
    """``{name: resolves}`` in this interpreter. A name whose prefix is
    already missing counts as missing once (the prefix)."""
    with open(names_file, encoding="utf-8") as f:
        all_names = json.load(f)
    out = {}
    for n in sorted(all_names):
        try:
            out[n] = _resolves(n)
        except Exception:
            out[n] = False
    return out


def diff(new_file: str, old_file: str, names_file: str,
         prefixes: list[str]) -> dict[str, list[str]]:
    """Names resolving in ``new`` but not ``old`` (shortest missing prefix
    only), with the use sites under ``prefixes``."""
    with open(new_file) as f:
        new = json.load(f)
    with open(old_file) as f:
        old = json.load(f)
    with open(names_file) as f:
        sites = json.load(f)
    missing = sorted(n for n in new if new[n] and not old.get(n, False))
    short = [n for n in missing
             if not any(n.startswith(m + ".") for m in missing if m != n)]
    out = {}
    for n in short:
        uses = [s for m in missing if m == n or m.startswith(n + ".")
                for s in sites.get(m, [])
                if not prefixes or any(s.startswith(p) for p in prefixes)]
        if uses:
            out[n] = sorted(set(uses))
    return out


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "names":
        json.dump(names(argv[1]), sys.stdout, indent=0, sort_keys=True)
    elif len(argv) >= 2 and argv[0] == "check":
        json.dump(check(argv[1]), sys.stdout, indent=0, sort_keys=True)
    elif len(argv) >= 4 and argv[0] == "diff":
        json.dump(diff(argv[1], argv[2], argv[3], argv[4:]), sys.stdout, indent=1)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
