"""Cross-check of metric 1's 'all imports' edges with grimp (import-linter's graph builder).
Run: cd TREE && PYTHONPATH=$PWD /work/main/.venv/bin/python /tmp/m47/grimp_check.py /tmp/m47/TREE.json"""
import json
import sys

import grimp

g = grimp.build_graph("l2sched", cache_dir=None)


def node(m):
    p = m.split(".")
    return "l2sched.__init__" if len(p) == 1 else "l2sched." + p[1]


E = {f"{node(m)} -> {node(d)}" for m in g.modules for d in g.find_modules_directly_imported_by(m)
     if node(m) != node(d)}
mine = set(json.load(open(sys.argv[1]))["edges_all"])
print(f"grimp {grimp.__version__ if hasattr(grimp, '__version__') else '?'}: {len(E)} edges; ast_metrics: {len(mine)}; "
      f"only grimp {sorted(E - mine)}; only ast_metrics {sorted(mine - E)}")
