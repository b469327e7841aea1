"""Where each value of a JSON text is: ``json`` keeps no positions, so
``json_spans`` scans the text (already accepted by ``json.loads``) once;
``path_text`` writes a JSON path as users read it; ``inline_refs`` flattens
a schema's ``$defs``. Used by ``compiler.plan_check`` to put every problem
of a plan.json at its ``path:line:col``.
"""

from __future__ import annotations

import re
from json.decoder import scanstring
from json.scanner import NUMBER_RE

#: JSON paths are tuples of keys (str) and list indices (int).
JsonPath = tuple

_WS = re.compile(r"[ \t\n\r]*")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


def inline_refs(schema: dict) -> dict:
    """``schema`` with every ``{"$ref": "#/$defs/NAME"}`` replaced by that
    definition (the plan schema's refs are not recursive) and ``$defs``
    dropped: the same checks, without a reference lookup per array item
    (half of the validation time of a plan with 100,000 ranges)."""
    defs = schema.get("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/") and len(node) == 1:
                return walk(defs[ref[len("#/$defs/"):]])
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def json_spans(text: str) -> tuple[dict, dict, list]:
    """Positions in ``text`` (valid JSON): ``values`` maps each JSON path to
    ``(start, end)`` character offsets of its value, ``keys`` each object
    member's path to the offset of its key, ``dups`` lists ``(path, key
    offset)`` of a key written twice in one object (``json.loads`` keeps the
    last, and so do ``values``/``keys``)."""
    values: dict = {}
    keys: dict = {}
    dups: list = []

    def ws(i: int) -> int:
        return _WS.match(text, i).end()

    def value(i: int, path: JsonPath) -> int:
        i = ws(i)
        start, c = i, text[i]
        if c == "{":
            i, seen = ws(i + 1), set()
            while text[i] != "}":
                kstart = i
                k, i = scanstring(text, i + 1)
                if k in seen:
                    dups.append((path + (k,), kstart))
                seen.add(k)
                keys[path + (k,)] = kstart
                i = ws(value(ws(i) + 1, path + (k,)))
                if text[i] == ",":
                    i = ws(i + 1)
            end = i + 1
        elif c == "[":
            i, n = ws(i + 1), 0
            while text[i] != "]":
                i = ws(value(i, path + (n,)))
                n += 1
                if text[i] == ",":
                    i = ws(i + 1)
            end = i + 1
        elif c == '"':
            end = scanstring(text, i + 1)[1]
        else:
            m = NUMBER_RE.match(text, i)
            end = m.end() if m else i + next(
                (len(w) for w in _LITERALS if text.startswith(w, i)), 1)
        values[path] = (start, end)
        return end

    try:
        value(0, ())
    except (RecursionError, IndexError, ValueError):  # nested too deep: no positions
        pass
    return values, keys, dups


def path_text(path: JsonPath) -> str:
    """``issues[3].ranges[0].nbytes`` for ``("issues", 3, "ranges", 0, "nbytes")``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out
