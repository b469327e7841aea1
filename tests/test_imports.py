"""Imports sit at the top of a module (issue 47): an import inside a function
of the product is either of an optional dependency, which a CPU-only
install lacks (torch, CuTe DSL, the CUDA bindings, vLLM, Triton, rich), or
it carries a comment, on its line or the line above, saying what forces it
(a cycle, vLLM pulled in by the plugin module, a command's start-up time,
a POSIX-only module). Docstrings and comments are not searched."""

from __future__ import annotations

import ast
from pathlib import Path

PRODUCT = Path(__file__).resolve().parent.parent / "l2sched"

#: Top-level packages no install of l2sched is guaranteed to have (pyproject:
#: the ``gpu`` and ``vllm`` extras, and rich, which only draws progress).
OPTIONAL = {"torch", "cutlass", "cuda", "vllm", "triton", "rich"}


def function_imports(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, module, commented)`` of each import statement inside a
    function of ``path``; ``module`` is the first module named (``.`` for
    a relative import); ``commented``: a ``#`` on its line or a comment
    line right above."""
    text = path.read_text("utf-8")
    lines = text.split("\n")
    seen: dict[int, tuple[int, str, bool]] = {}
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
            elif isinstance(node, ast.Import):
                module = node.names[0].name
            else:
                continue
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            commented = "#" in lines[node.lineno - 1] or above.startswith("#")
            seen[node.lineno] = (node.lineno, module, commented)
    return sorted(seen.values())


def test_function_imports_are_optional_dependencies_or_say_why():
    bad = []
    for path in sorted(PRODUCT.rglob("*.py")):
        for line, module, commented in function_imports(path):
            if module.split(".")[0] in OPTIONAL or commented:
                continue
            bad.append(f"{path.relative_to(PRODUCT.parent)}:{line}: {module}")
    assert bad == [], ("imports inside functions with no comment saying what "
                       "forces them (move them to the top, or say which cycle "
                       "or optional dependency): " + ", ".join(bad))


def test_the_check_sees_an_uncommented_function_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\n\n\ndef f():\n    from l2sched import units\n"
                   "    # a cycle: units imports m\n    from l2sched import errors\n"
                   "    import torch\n    return units, errors, torch, os\n")
    assert function_imports(src) == [(5, "l2sched", False), (7, "l2sched", True),
                                     (8, "torch", False)]
