"""Metric 6, variant C (flow): the names a DeviceProfile object is bound to in
l2sched/, found by a small intra-package value-flow over the AST.

python dp_names_flow.py TREE_ROOT [--list]

Seeds (same as variant A in ast_metrics.py):
  * parameters / class fields / locals annotated with DeviceProfile;
  * names assigned from a "loader" call: DeviceProfile(...), any function whose
    return annotation mentions DeviceProfile (tuple[...] -> that position only),
    and, to a fixpoint, any function that returns a loader call, a known profile
    name or dataclasses.replace(<profile>, ...).
Propagation (to a fixpoint over the whole package):
  * x = <profile value>   (Name known in scope, loader call, `a or b`, `a if c else b`,
                           dataclasses.replace(<profile>, ...), self.attr known for the class)
  * self.attr = <profile value> marks attr on the class (and `attr` as a name);
  * a call f(<profile value>, ...) / f(k=<profile value>) whose callee resolves
    inside l2sched (same-module def, `from l2sched.x import f` [following
    re-exports in __init__], `mod.f` for an imported l2sched module,
    self.method, ClassName(...) -> __init__) marks the callee's parameter;
  * a call to an l2sched class without __init__ (dataclass / NamedTuple) with a
    profile value marks that annotated field (positional by field order, or keyword);
  * nested functions see the enclosing function's profile names.
Not followed: attribute reads on other objects (x.field), loop/comprehension
variables, containers, lambdas.
Names are counted once per binding site (parameter of one def, one assignment
statement, one class attribute).
"""
from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path

PKG = "l2sched"


def ann_dp(ann) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "DeviceProfile" in ann.value
    return any((isinstance(n, ast.Name) and n.id == "DeviceProfile") or
               (isinstance(n, ast.Attribute) and n.attr == "DeviceProfile") for n in ast.walk(ann))


def tuple_pos(ann):
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "tuple":
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return frozenset(i for i, e in enumerate(elts) if ann_dp(e))
    return None


class Mod:
    def __init__(self, root: Path, f: Path):
        self.path = f
        self.rel = str(f.relative_to(root))
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        self.name = ".".join(parts)
        self.tree = ast.parse(f.read_text())
        self.funcs = {}      # module-level def name -> node
        self.classes = {}    # class name -> {method: node}
        self.imports = {}    # local name -> ("mod", modname) | ("obj", modname, objname)
        for s in self.tree.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs[s.name] = s
            elif isinstance(s, ast.ClassDef):
                self.classes[s.name] = {m.name: m for m in s.body
                                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for n in ast.walk(self.tree):   # imports at any level (lazy imports included)
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.asname:
                        self.imports[a.asname] = ("mod", a.name)
            elif isinstance(n, ast.ImportFrom) and n.module:
                for a in n.names:
                    self.imports[a.asname or a.name] = ("obj", n.module, a.name)


def main():
    root = Path(sys.argv[1]).resolve()
    files = sorted(p for p in (root / PKG).rglob("*.py") if "__pycache__" not in p.parts)
    mods = {m.name: m for m in (Mod(root, f) for f in files)}

    def lookup(modname, name, depth=0):
        """('func', mod, node) / ('class', mod, name) / ('mod', modname) / None"""
        if depth > 5:
            return None
        if f"{modname}.{name}" in mods:
            return ("mod", f"{modname}.{name}")
        m = mods.get(modname)
        if m is None:
            return None
        if name in m.funcs:
            return ("func", m, m.funcs[name])
        if name in m.classes:
            return ("class", m, name)
        imp = m.imports.get(name)
        if imp and imp[0] == "obj":
            return lookup(imp[1], imp[2], depth + 1)
        return None

    # all function defs with their context (module, class, enclosing function)
    defs = []   # (mod, cls or None, fn, parent_fn or None)

    def collect(m, body, cls, parent):
        for s in body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.append((m, cls, s, parent))
                collect(m, s.body, cls, s)
            elif isinstance(s, ast.ClassDef):
                collect(m, s.body, s.name, parent)
            else:
                for fld in ("body", "orelse", "finalbody", "handlers"):
                    sub = getattr(s, fld, None)
                    if isinstance(sub, list):
                        collect(m, [x for x in sub if isinstance(x, ast.AST)], cls, parent)
                if isinstance(s, ast.ExceptHandler):
                    collect(m, s.body, cls, parent)
    for m in mods.values():
        collect(m, m.tree.body, None, None)

    loaders: dict[int, object] = {}       # id(fn node) -> None (whole) | frozenset positions
    dp_params: dict[int, set] = defaultdict(set)     # id(fn) -> param names
    dp_attrs: dict[tuple, set] = defaultdict(set)    # (mod, cls) -> attr names
    sites: dict[tuple, tuple] = {}        # (rel, line, name, kind) -> 1
    fn_known: dict[int, set] = {}

    for m, cls, fn, parent in defs:
        if ann_dp(fn.returns):
            loaders[id(fn)] = tuple_pos(fn.returns)
        a = fn.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs:
            if ann_dp(arg.annotation):
                dp_params[id(fn)].add(arg.arg)
    for m in mods.values():
        for cname in m.classes:
            cnode = next(s for s in m.tree.body if isinstance(s, ast.ClassDef) and s.name == cname)
            for s in cnode.body:
                if isinstance(s, ast.AnnAssign) and ann_dp(s.annotation) and isinstance(s.target, ast.Name):
                    dp_attrs[(m.name, cname)].add(s.target.id)
                    sites[(m.rel, s.lineno, s.target.id, "attribute(annotated field)")] = 1

    def resolve_call(m, cls, call):
        """-> (fn node, offset, owner (mod, cls)) or ('DeviceProfile',) or None"""
        f = call.func
        target = None
        if isinstance(f, ast.Name):
            if f.id == "DeviceProfile":
                return ("DP",)
            if f.id in m.funcs:
                target = ("func", m, m.funcs[f.id])
            elif f.id in m.classes:
                target = ("class", m, f.id)
            else:
                imp = m.imports.get(f.id)
                if imp and imp[0] == "obj":
                    if imp[2] == "DeviceProfile":
                        return ("DP",)
                    target = lookup(imp[1], imp[2])
        elif isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and f.value.id in ("self", "cls") and cls:
                meth = m.classes.get(cls, {}).get(f.attr)
                if meth is not None:
                    return (meth, 1, (m.name, cls))
                return None
            if f.attr == "DeviceProfile":
                return ("DP",)
            if isinstance(f.value, ast.Name):
                imp = m.imports.get(f.value.id)
                modname = None
                if imp and imp[0] == "mod":
                    modname = imp[1]
                elif imp and imp[0] == "obj" and f"{imp[1]}.{imp[2]}" in mods:
                    modname = f"{imp[1]}.{imp[2]}"
                if modname:
                    target = lookup(modname, f.attr)
        if not target:
            return None
        if target[0] == "func":
            return (target[2], 0, None)
        if target[0] == "class":
            init = target[1].classes[target[2]].get("__init__")
            if init is not None:
                return (init, 1, (target[1].name, target[2]))
            return ("FIELDS", target[1], target[2])   # a dataclass/NamedTuple: its annotated fields
        return None

    def is_replace(call):
        f = call.func
        return (isinstance(f, ast.Attribute) and f.attr == "replace" and isinstance(f.value, ast.Name)
                and f.value.id == "dataclasses") or (isinstance(f, ast.Name) and f.id == "replace"
                                                     and True)

    changed = True
    rounds = 0
    while changed:
        changed = False
        rounds += 1
        for m, cls, fn, parent in defs:
            known = set(dp_params[id(fn)])
            if parent is not None:
                known |= fn_known.get(id(parent), set())
            attrs = dp_attrs[(m.name, cls)] if cls else set()

            def is_dp(v) -> bool:
                if isinstance(v, ast.Name):
                    return v.id in known
                if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
                    return v.attr in attrs
                if isinstance(v, ast.BoolOp):
                    return any(is_dp(x) for x in v.values)
                if isinstance(v, ast.IfExp):
                    return is_dp(v.body) or is_dp(v.orelse)
                if isinstance(v, ast.NamedExpr):
                    return is_dp(v.value)
                if isinstance(v, ast.Call):
                    if is_replace(v) and v.args and is_dp(v.args[0]):
                        return True
                    r = resolve_call(m, cls, v)
                    if r and r[0] == "DP":
                        return True
                    if r and r[0] == "FIELDS":
                        return False
                    if r and id(r[0]) in loaders and loaders[id(r[0])] is None:
                        return True
                return False

            def tuple_loader(v):
                if isinstance(v, ast.Call):
                    r = resolve_call(m, cls, v)
                    if r and r[0] not in ("DP", "FIELDS") and id(r[0]) in loaders and loaders[id(r[0])]:
                        return loaders[id(r[0])]
                return None

            # statements of this function, not of nested defs/classes, in source order
            nodes = []
            stack = list(fn.body)
            while stack:
                s = stack.pop(0)
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue
                nodes.append(s)
                stack[0:0] = list(ast.iter_child_nodes(s))
            nodes = sorted((x for x in nodes if hasattr(x, "lineno")), key=lambda x: (x.lineno, x.col_offset))
            for _ in range(2):   # twice: a name bound late but used in a loop above
                for s in nodes:
                    if isinstance(s, ast.AnnAssign) and ann_dp(s.annotation):
                        tg = s.target
                        if isinstance(tg, ast.Name):
                            known.add(tg.id)
                            sites[(m.rel, s.lineno, tg.id, "local(annotated)")] = 1
                        elif isinstance(tg, ast.Attribute) and cls:
                            if tg.attr not in attrs:
                                attrs.add(tg.attr); changed = True
                            sites[(m.rel, s.lineno, tg.attr, "attribute(annotated)")] = 1
                    elif isinstance(s, (ast.Assign, ast.NamedExpr, ast.AnnAssign)) and getattr(s, "value", None) is not None:
                        tgs = s.targets if isinstance(s, ast.Assign) else [s.target]
                        for tg in tgs:
                            if isinstance(tg, (ast.Tuple, ast.List)):
                                pos = tuple_loader(s.value)
                                if pos:
                                    for i in pos:
                                        if i < len(tg.elts) and isinstance(tg.elts[i], ast.Name):
                                            known.add(tg.elts[i].id)
                                            sites[(m.rel, s.lineno, tg.elts[i].id, "local(tuple from loader)")] = 1
                                elif isinstance(s.value, (ast.Tuple, ast.List)) and len(s.value.elts) == len(tg.elts):
                                    for e, v in zip(tg.elts, s.value.elts):
                                        if isinstance(e, ast.Name) and is_dp(v):
                                            known.add(e.id)
                                            sites[(m.rel, s.lineno, e.id, "local(assigned)")] = 1
                            elif is_dp(s.value):
                                if isinstance(tg, ast.Name):
                                    known.add(tg.id)
                                    sites[(m.rel, s.lineno, tg.id, "local(assigned)")] = 1
                                elif isinstance(tg, ast.Attribute) and isinstance(tg.value, ast.Name) \
                                        and tg.value.id == "self" and cls:
                                    if tg.attr not in attrs:
                                        attrs.add(tg.attr); changed = True
                                    sites[(m.rel, s.lineno, tg.attr, "attribute(self.x =)")] = 1
                    elif isinstance(s, ast.Call):
                        r = resolve_call(m, cls, s)
                        if not r or r[0] == "DP":
                            continue
                        if r[0] == "FIELDS":
                            cm, cname = r[1], r[2]
                            cnode = next(x for x in cm.tree.body if isinstance(x, ast.ClassDef) and x.name == cname)
                            fields = [x.target.id for x in cnode.body
                                      if isinstance(x, ast.AnnAssign) and isinstance(x.target, ast.Name)]
                            pairs = list(zip(fields, s.args)) + [(k.arg, k.value) for k in s.keywords if k.arg in fields]
                            for fname, v in pairs:
                                if not isinstance(v, ast.Starred) and is_dp(v) and fname not in dp_attrs[(cm.name, cname)]:
                                    dp_attrs[(cm.name, cname)].add(fname); changed = True
                                    fl = next(x.lineno for x in cnode.body if isinstance(x, ast.AnnAssign)
                                              and isinstance(x.target, ast.Name) and x.target.id == fname)
                                    sites[(cm.rel, fl, fname, "attribute(field, flow)")] = 1
                            continue
                        callee, off, _ = r
                        a = callee.args
                        params = a.posonlyargs + a.args
                        for i, v in enumerate(s.args):
                            if isinstance(v, ast.Starred):
                                break
                            j = i + off
                            if j < len(params) and is_dp(v):
                                if params[j].arg not in dp_params[id(callee)]:
                                    dp_params[id(callee)].add(params[j].arg); changed = True
                        names = {p.arg for p in params + a.kwonlyargs}
                        for kw in s.keywords:
                            if kw.arg and kw.arg in names and is_dp(kw.value):
                                if kw.arg not in dp_params[id(callee)]:
                                    dp_params[id(callee)].add(kw.arg); changed = True
                    elif isinstance(s, ast.Return) and s.value is not None and id(fn) not in loaders:
                        if is_dp(s.value):
                            loaders[id(fn)] = None; changed = True
                        elif isinstance(s.value, ast.Tuple):
                            pos = frozenset(i for i, e in enumerate(s.value.elts) if is_dp(e))
                            if pos:
                                loaders[id(fn)] = pos; changed = True
            if fn_known.get(id(fn)) != known:
                fn_known[id(fn)] = set(known)
                changed = True

    for m, cls, fn, parent in defs:
        for p in dp_params[id(fn)]:
            ann = next((x.annotation for x in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
                        if x.arg == p), None)
            kind = "parameter(annotated)" if ann_dp(ann) else "parameter(flow)"
            sites[(m.rel, fn.lineno, p, kind)] = 1
    rows = sorted(sites)
    counts = Counter(r[2] for r in rows)
    print(f"# {root.name}: {len(counts)} distinct names, {len(rows)} binding sites, fixpoint rounds {rounds}")
    for n, c in counts.most_common():
        kinds = Counter(r[3] for r in rows if r[2] == n)
        print(f"{n}\t{c}\t" + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
    if "--list" in sys.argv:
        for r in rows:
            print(f"  {r[0]}:{r[1]}\t{r[2]}\t{r[3]}")


if __name__ == "__main__":
    main()
