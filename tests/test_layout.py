"""The package layout shows the pipeline, and keeps doing so: the layer
contract in ``pyproject.toml`` holds (``lint-imports``), the import graph
has no cycle, no module imports another module's private name, the
generated documents are current, and modules and functions stay short
unless they say why."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "l2sched"

#: Longest module (lines) and function (lines) without a written reason:
#: a module docstring containing "Long module:", a function docstring
#: containing "Long function:".
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path, ast.parse(path.read_text(encoding="utf-8"))


def test_layer_contract_holds():
    """``lint-imports`` (import-linter) with the contract of pyproject.toml."""
    r = subprocess.run([sys.executable, "-c",
                        "import sys; from importlinter.cli import lint_imports; "
                        "sys.exit(lint_imports())"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "0 broken" in r.stdout


def test_import_graph_has_no_cycles():
    import grimp
    import networkx as nx

    graph = grimp.build_graph("l2sched")
    g = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            g.add_edge(module, imported)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == []


def test_no_module_imports_a_private_name_of_another():
    """``from l2sched.x import _name`` and ``module_alias._name`` across
    modules are refused: what a stage offers another is public."""
    found = []
    for name, path, tree in _modules():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "l2sched"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{path}:{node.lineno}: {node.module}.{a.name}")
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("l2sched"):
                        aliases[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{path}:{node.lineno}: {node.value.id}.{node.attr}")
    assert found == []


def test_no_stage_imports_the_cli():
    offenders = [f"{path}" for name, path, tree in _modules()
                 if not name.startswith(("l2sched.cli", "l2sched.__main__"))
                 for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("l2sched.cli")]
    assert offenders == []


def test_generated_docs_are_current():
    from l2sched.cli.docs import hooks_md_text, lint_md_text

    hooks = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    assert hooks == hooks_md_text(), "regenerate: l2sched docs hooks"
    lint = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    assert lint == lint_md_text(lint), "regenerate: l2sched docs lint"


def test_python_dash_m_l2sched_works():
    r = subprocess.run([sys.executable, "-m", "l2sched", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage: l2sched" in r.stdout, r.stderr


@pytest.mark.parametrize("text, lines", [
    ("a\r\nb\rc\u2028d\x85e\x0cf\n", ["a", "b", "c\u2028d\x85e\x0cf", ""]),
    ("", [""]),
    ("x", ["x"]),
])
def test_one_line_splitter(text, lines):
    from l2sched.errors import line_col, source_lines

    assert source_lines(text) == lines
    assert "".join(source_lines(text, keepends=True)) == text
    assert line_col(text, len(text)) == (len(lines), len(lines[-1]) + 1)


def test_modules_and_functions_are_short_or_say_why():
    long = []
    for name, path, tree in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        doc = ast.get_docstring(tree) or ""
        if lines > MAX_MODULE_LINES and "Long module:" not in doc:
            long.append(f"{path}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and "Long function:" not in (
                        ast.get_docstring(node) or ""):
                    long.append(f"{path}:{node.lineno}: {node.name} {n} lines")
    assert long == []


