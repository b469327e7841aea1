"""Metrics 1, 2, 3 and 6 for one tree: python ast_metrics.py TREE_ROOT [--json OUT]

TREE_ROOT is a checkout whose l2sched/ package is measured. Only the files
on disk under TREE_ROOT/l2sched/**/*.py are read (no imports are executed).
"""
from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
from collections import Counter, defaultdict
from pathlib import Path

import networkx as nx

PKG = "l2sched"
OPTIONAL = {"torch", "cutlass", "cuda", "vllm", "triton", "tvm_ffi", "cupy", "numpy"}


# ---------------------------------------------------------------- helpers
def py_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / PKG).rglob("*.py") if "__pycache__" not in p.parts)


def node_of_file(root: Path, f: Path) -> str:
    """First level below l2sched: the subpackage dir, or the top-level module."""
    rel = f.relative_to(root / PKG).parts
    if len(rel) == 1:
        return f"{PKG}.{rel[0][:-3]}"          # l2sched/errors.py -> l2sched.errors
    return f"{PKG}.{rel[0]}"                   # l2sched/lint/x.py -> l2sched.lint


def module_name(root: Path, f: Path) -> str:
    parts = list(f.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_type_checking_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return True
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return True
    return False


def walk_with_context(tree: ast.AST):
    """Yield (node, in_function, in_type_checking, in_class) for every node."""
    stack = [(tree, False, False, False)]
    while stack:
        node, in_fn, in_tc, in_cls = stack.pop()
        yield node, in_fn, in_tc, in_cls
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for ch in children:
                if not isinstance(ch, ast.AST):
                    continue
                fn = in_fn or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                cls = in_cls or isinstance(node, ast.ClassDef)
                tc = in_tc
                if isinstance(node, ast.If) and is_type_checking_test(node.test) and field == "body":
                    tc = True
                stack.append((ch, fn, tc, cls))


def resolve_relative(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_targets(node, mod: str, is_pkg: bool, top_nodes: set[str]) -> list[str]:
    """The l2sched first-level nodes an Import/ImportFrom node refers to."""
    out = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            base = resolve_relative(mod, is_pkg, node.level, node.module)
        if base == PKG:
            # from l2sched import X: X is a subpackage/module when it is one, else l2sched/__init__
            names = [f"{PKG}.{a.name}" if f"{PKG}.{a.name}" in top_nodes else PKG for a in node.names]
        else:
            names = [base]
    for n in names:
        parts = n.split(".")
        if parts[0] != PKG:
            continue
        if len(parts) == 1:
            out.append(f"{PKG}.__init__")
        else:
            first = f"{PKG}.{parts[1]}"
            out.append(first if first in top_nodes else f"{PKG}.__init__")
    return out


def is_internal(node, mod: str) -> bool:
    if isinstance(node, ast.ImportFrom) and node.level:
        return True
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return any(n == PKG or n.startswith(PKG + ".") for n in names)


def top_name(node) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name.split(".")[0]
    return (node.module or "").split(".")[0]


def comments_by_line(src: str) -> dict[int, str]:
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except tokenize.TokenError:
        pass
    return out


# ---------------------------------------------------------------- metric 1/3
def imports(root: Path):
    files = py_files(root)
    top_nodes = sorted({node_of_file(root, f) for f in files})
    top_set = set(top_nodes)
    edges_all: dict[tuple[str, str], list[str]] = defaultdict(list)
    edges_top: dict[tuple[str, str], list[str]] = defaultdict(list)
    edges_notc: dict[tuple[str, str], list[str]] = defaultdict(list)
    infn = []  # (file, line, category, text, comment_same, comment_prev, in_tc)
    counts = Counter()
    for f in files:
        src = f.read_text()
        tree = ast.parse(src, filename=str(f))
        mod = module_name(root, f)
        is_pkg = f.name == "__init__.py"
        src_node = node_of_file(root, f)
        lines = src.splitlines()
        comments = comments_by_line(src)
        for node, in_fn, in_tc, in_cls in walk_with_context(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            counts["import_nodes_total"] += 1
            where = f"{f.relative_to(root)}:{node.lineno}"
            for tgt in import_targets(node, mod, is_pkg, top_set):
                if tgt == src_node:
                    continue
                edges_all[(src_node, tgt)].append(where)
                if not in_tc:
                    edges_notc[(src_node, tgt)].append(where)
                if not in_fn and not in_tc:
                    edges_top[(src_node, tgt)].append(where)
            if in_fn and not in_tc:
                if is_internal(node, mod):
                    cat = "internal"
                elif top_name(node) in OPTIONAL:
                    cat = "optional"
                else:
                    cat = "other"
                infn.append({
                    "where": where, "cat": cat,
                    "text": lines[node.lineno - 1].strip(),
                    "comment_same": comments.get(node.lineno, ""),
                    "comment_prev": comments.get(node.lineno - 1, "")
                    if lines[node.lineno - 2].strip().startswith("#") else "",
                })
    return top_nodes, edges_all, edges_top, edges_notc, infn


def graph_stats(nodes, edges):
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    sccs = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    n_cycles = 0
    for _ in nx.simple_cycles(g):
        n_cycles += 1
    cond = nx.condensation(g)
    path = nx.dag_longest_path(cond)
    members = cond.graph["mapping"]
    inv = defaultdict(list)
    for n, c in members.items():
        inv[c].append(n)
    return {
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "has_cycles": n_cycles > 0,
        "simple_cycles": n_cycles,
        "nontrivial_sccs": sccs,
        "condensation_nodes": cond.number_of_nodes(),
        "floors": len(path),
        "longest_path": [sorted(inv[c]) for c in path],
    }


# ---------------------------------------------------------------- metric 2
def line_counts(root: Path):
    per = Counter()
    per_sloc = Counter()
    for f in py_files(root):
        src = f.read_text()
        n = len(src.splitlines())
        key = node_of_file(root, f)
        per[key] += n
        # non-blank, non-comment-only lines
        per_sloc[key] += sum(1 for l in src.splitlines() if l.strip() and not l.strip().startswith("#"))
    return per, per_sloc


# ---------------------------------------------------------------- metric 6
def ann_mentions_dp(ann) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "DeviceProfile" in ann.value
    return any(isinstance(n, ast.Name) and n.id == "DeviceProfile"
               or isinstance(n, ast.Attribute) and n.attr == "DeviceProfile"
               for n in ast.walk(ann))


def dp_tuple_positions(ann):
    """tuple[DeviceProfile, X] -> {0}; DeviceProfile -> None (whole value)."""
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "tuple":
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return {i for i, e in enumerate(elts) if ann_mentions_dp(e)}
    return None


def call_name(call) -> str | None:
    if not isinstance(call, ast.Call):
        return None
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def device_profile_names(root: Path):
    files = py_files(root)
    trees = {f: ast.parse(f.read_text()) for f in files}
    # loaders: functions whose return annotation mentions DeviceProfile, plus
    # the DeviceProfile constructor; then (fixpoint) functions that
    # `return <loader call>` directly (unannotated wrappers).
    loaders: dict[str, set | None] = {"DeviceProfile": None}
    funcs = []
    for f, t in trees.items():
        for n in ast.walk(t):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((f, n))
                if ann_mentions_dp(n.returns):
                    loaders[n.name] = dp_tuple_positions(n.returns)
    changed = True
    while changed:
        changed = False
        for f, fn in funcs:
            if fn.name in loaders:
                continue
            for r in ast.walk(fn):
                if isinstance(r, ast.Return) and r.value is not None:
                    if call_name(r.value) in loaders and loaders[call_name(r.value)] is None:
                        loaders[fn.name] = None
                        changed = True
                        break
                    if isinstance(r.value, ast.Tuple):
                        pos = {i for i, e in enumerate(r.value.elts)
                               if call_name(e) in loaders and loaders[call_name(e)] is None}
                        if pos:
                            loaders[fn.name] = pos
                            changed = True
                            break

    def value_is_dp(v, known: set[str]) -> bool:
        if isinstance(v, ast.Call) and call_name(v) in loaders and loaders[call_name(v)] is None:
            return True
        if isinstance(v, ast.Name) and v.id in known:
            return True
        if isinstance(v, ast.BoolOp):
            return any(value_is_dp(x, known) for x in v.values)
        if isinstance(v, ast.IfExp):
            return value_is_dp(v.body, known) or value_is_dp(v.orelse, known)
        return False

    def tname(t) -> str | None:
        if isinstance(t, ast.Name):
            return t.id
        if isinstance(t, ast.Attribute):
            return t.attr            # self.x / obj.x -> attribute name x
        return None

    found = []  # (name, kind, where)
    for f, t in trees.items():
        rel = f.relative_to(root)
        # class-level / module-level annotated names (dataclass fields, attributes)
        for n in ast.walk(t):
            if isinstance(n, ast.ClassDef):
                for s in n.body:
                    if isinstance(s, ast.AnnAssign) and ann_mentions_dp(s.annotation):
                        found.append((tname(s.target), "attribute(annotated field)", f"{rel}:{s.lineno}"))
        for fn in (n for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            known: set[str] = set()
            a = fn.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + ([a.vararg] if a.vararg else []) + ([a.kwarg] if a.kwarg else []):
                if ann_mentions_dp(arg.annotation):
                    known.add(arg.arg)
                    found.append((arg.arg, "parameter(annotated)", f"{rel}:{fn.lineno}"))
            # statements in source order within this function (not nested defs)
            body_nodes = []
            stack = list(fn.body)
            while stack:
                s = stack.pop(0)
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue
                body_nodes.append(s)
                stack[0:0] = [c for c in ast.iter_child_nodes(s)]
            for s in sorted((x for x in body_nodes if hasattr(x, "lineno")), key=lambda x: (x.lineno, x.col_offset)):
                if isinstance(s, ast.AnnAssign) and ann_mentions_dp(s.annotation):
                    nm = tname(s.target)
                    kind = "attribute(annotated)" if isinstance(s.target, ast.Attribute) else "local(annotated)"
                    found.append((nm, kind, f"{rel}:{s.lineno}"))
                    if isinstance(s.target, ast.Name):
                        known.add(nm)
                elif isinstance(s, (ast.Assign, ast.NamedExpr)):
                    targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                    v = s.value
                    for tg in targets:
                        if isinstance(tg, ast.Tuple) and isinstance(v, ast.Call) and \
                                call_name(v) in loaders and loaders[call_name(v)]:
                            for i in loaders[call_name(v)]:
                                if i < len(tg.elts) and tname(tg.elts[i]):
                                    nm = tname(tg.elts[i])
                                    kind = "attribute(assigned)" if isinstance(tg.elts[i], ast.Attribute) else "local(assigned from loader)"
                                    found.append((nm, kind, f"{rel}:{s.lineno}"))
                                    if isinstance(tg.elts[i], ast.Name):
                                        known.add(nm)
                        elif tname(tg) and value_is_dp(v, known):
                            nm = tname(tg)
                            if isinstance(tg, ast.Attribute):
                                kind = "attribute(assigned)"
                            elif isinstance(v, ast.Name):
                                kind = "local(alias of a profile name)"
                            else:
                                kind = "local(assigned from loader)"
                            # rebinding the same name to itself (x = x or load()) is still that name
                            found.append((nm, kind, f"{rel}:{s.lineno}"))
                            if isinstance(tg, ast.Name):
                                known.add(nm)
    # de-duplicate exact (name, kind, where) repeats
    found = sorted(set(found), key=lambda x: (x[2], x[0]))
    return loaders, found


DOC_PATTERNS = None


def docstring_described_params(root: Path):
    """Secondary, heuristic: parameters whose function docstring says they are
    a DeviceProfile (``NAME`` (a ``DeviceProfile``...) / ``NAME``: ``DeviceProfile`` /
    ``NAME`` (``DeviceProfile``) / the ``NAME`` DeviceProfile) and that carry no annotation."""
    import re
    out = []
    for f in py_files(root):
        t = ast.parse(f.read_text())
        for fn in (n for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            doc = ast.get_docstring(fn) or ""
            if "DeviceProfile" not in doc:
                continue
            a = fn.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                if arg.annotation is not None:
                    continue
                nm = re.escape(arg.arg)
                pats = [rf"``{nm}``\s*\(\s*(a\s+|the\s+)?``(device\.)?DeviceProfile",
                        rf"``{nm}``\s*:\s*(a\s+|the\s+)?``DeviceProfile",
                        rf"``{nm}``\s+DeviceProfile"]
                if any(re.search(p, doc.replace("\n", " ")) for p in pats):
                    out.append((arg.arg, f"{f.relative_to(root)}:{fn.lineno}"))
    return out


def main():
    root = Path(sys.argv[1]).resolve()
    res = {}
    nodes, e_all, e_top, e_notc, infn = imports(root)
    res["graph_all"] = graph_stats(nodes, list(e_all))
    res["graph_no_type_checking"] = graph_stats(nodes, list(e_notc))
    res["graph_top"] = graph_stats(nodes, list(e_top))
    res["nodes"] = nodes
    res["edges_all"] = {f"{a} -> {b}": v for (a, b), v in sorted(e_all.items())}
    res["edges_top"] = {f"{a} -> {b}": v for (a, b), v in sorted(e_top.items())}
    res["edges_only_in_functions_or_tc"] = {f"{a} -> {b}": v for (a, b), v in sorted(e_all.items())
                                            if (a, b) not in e_top}
    per, per_sloc = line_counts(root)
    total = sum(per.values())
    res["lines_total"] = total
    res["lines_total_sloc"] = sum(per_sloc.values())
    res["lines_per_node"] = per.most_common()
    res["sloc_per_node"] = per_sloc.most_common()
    res["infn_imports"] = infn
    res["infn_counts"] = dict(Counter(x["cat"] for x in infn))
    loaders, found = device_profile_names(root)
    res["dp_loaders"] = {k: (sorted(v) if v else None) for k, v in loaders.items()}
    res["dp_found"] = found
    res["dp_name_counts"] = Counter(n for n, _, _ in found).most_common()
    doc = docstring_described_params(root)
    res["dp_doc_params"] = doc
    res["dp_doc_name_counts"] = Counter(n for n, _ in doc).most_common()
    out = json.dumps(res, indent=1, default=list)
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(out)
    else:
        print(out)


if __name__ == "__main__":
    main()
