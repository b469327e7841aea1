"""The end of a probe script: print its markdown and write it with the JSON
result, both or neither (``l2sched.files.write_texts_atomically``)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.files import write_texts_atomically  # noqa: E402


def write_probe(out: dict, lines: list, json_path: str, md_path: str = "") -> None:
    """Print ``lines`` (markdown) and write ``out`` as JSON to ``json_path``
    and the markdown to ``md_path`` (skipped when empty). Raises
    ``L2sInputError`` naming the path when a file cannot be written."""
    text = "\n".join(lines) + "\n"
    print(text)
    write_texts_atomically([(json_path, json.dumps(out, indent=1) + "\n")]
                           + ([(md_path, text)] if md_path else []))
