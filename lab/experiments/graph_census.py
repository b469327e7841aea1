"""Issue 48: what is in a captured decode step, node by node.

The bisection (``tax_bisect.py``) found that the lone-window loss comes with
the step's cuBLAS GEMMs: it stays when the CuTe fill is swapped for a Triton
read and goes when the GEMMs are swapped for streaming reads. This module
counts what a captured graph holds, so two rungs' graphs can be compared:
node types (kernel, memset, event record/wait, empty), edge types (default,
programmatic, launch-completion), kernel names, and the launch attributes
that change how CUDA dispatches a kernel node (thread-block cluster
dimensions, programmatic stream serialization, priority).

``keep_census(torch, folder, tag, limit)`` makes ``torch.cuda.CUDAGraph``
keep the first ``limit`` captured graphs of this process (``keep_graph``),
census each at ``capture_end`` and write ``folder/census-<tag>.json``; the
graph is then instantiated as usual (``tax_bisect.py --census K``). On the
CPU, ``python -m lab.experiments.graph_census A.json B.json`` compares two
such files (one census of each, ``--index``) as a markdown table. Needs ``cuda.bindings`` (12.3 or newer
for ``cuFuncGetName`` and edge data); a driver error is recorded in the
census, never raised. API: CUDA Driver API, "Graph Management"
(``cuGraphGetNodes``, ``cuGraphGetEdges_v2``, ``cuGraphKernelNodeGetParams``,
``cuGraphKernelNodeGetAttribute``) and ``cuFuncGetName``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

from lab.experiments.probe_output import write_probe


def summarize(nodes: list[dict], edges: list[str]) -> dict:
    """The census of one graph from its node records (``{"type": str,
    "kernel": str | None, "cluster": [x, y, z] | None, "pss": bool,
    "priority": int | None}``) and its edge types (one string per edge):
    counts per node type and edge type, the kernels by name (most first),
    the kernel nodes with a cluster larger than 1 and with programmatic
    stream serialization, and the priorities seen."""
    types = Counter(n["type"] for n in nodes)
    kernels = Counter(n["kernel"] or "?" for n in nodes if n["type"] == "KERNEL")
    clustered = Counter(n["kernel"] or "?" for n in nodes
                        if n.get("cluster") and max(n["cluster"]) > 1)
    pss = Counter(n["kernel"] or "?" for n in nodes if n.get("pss"))
    return {"nodes": len(nodes), "types": dict(types.most_common()),
            "edges": len(edges), "edge_types": dict(Counter(edges).most_common()),
            "kernels": dict(kernels.most_common()),
            "clustered_kernels": dict(clustered.most_common()),
            "programmatic_kernels": dict(pss.most_common()),
            "priorities": sorted({n["priority"] for n in nodes
                                  if n.get("priority") is not None})}


def _short(value) -> str:
    """``CU_GRAPH_NODE_TYPE_KERNEL`` -> ``KERNEL`` (enum names of the driver)."""
    name = getattr(value, "name", str(value))
    for prefix in ("CU_GRAPH_NODE_TYPE_", "CU_GRAPH_DEPENDENCY_TYPE_"):
        name = name.removeprefix(prefix)
    return name


def _check(out, what: str):
    """``out`` of a driver call without its status; ``RuntimeError`` when
    the status is not success."""
    from cuda.bindings import driver as drv
    if out[0] != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {out[0]}")
    return out[1:] if len(out) > 2 else out[1]


def _kernel_record(drv, node) -> dict:
    """Name and launch attributes of the kernel node ``node``."""
    p = _check(drv.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
    name = None
    for getter, handle in ((getattr(drv, "cuFuncGetName", None), getattr(p, "func", None)),
                           (getattr(drv, "cuKernelGetName", None), getattr(p, "kern", None))):
        if getter is None or handle is None or not int(handle):
            continue
        err, raw = getter(handle)
        if err == drv.CUresult.CUDA_SUCCESS:
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            break
    ids = getattr(drv, "CUkernelNodeAttrID", None) or drv.CUlaunchAttributeID
    rec = {"type": "KERNEL", "kernel": name, "cluster": None, "pss": False, "priority": None}
    err, v = drv.cuGraphKernelNodeGetAttribute(
        node, ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    if err == drv.CUresult.CUDA_SUCCESS:
        rec["cluster"] = [int(v.clusterDim.x), int(v.clusterDim.y), int(v.clusterDim.z)]
    err, v = drv.cuGraphKernelNodeGetAttribute(
        node, ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    if err == drv.CUresult.CUDA_SUCCESS:
        rec["pss"] = bool(int(v.programmaticStreamSerializationAllowed))
    err, v = drv.cuGraphKernelNodeGetAttribute(node, ids.CU_LAUNCH_ATTRIBUTE_PRIORITY)
    if err == drv.CUresult.CUDA_SUCCESS:
        rec["priority"] = int(v.priority)
    return rec


def _programmatic_pairs(nodes: list, records: list[dict], edges, edge_types: list[str]) -> dict:
    """``"FROM -> TO": count`` of the graph's programmatic edges by the kinds
    of their two nodes (kernel name, else node type); ``{"error": ...}``
    when the handles cannot be matched (the census keeps its counts)."""
    try:
        kind = {int(h): r.get("kernel") or r["type"] for h, r in zip(nodes, records)}
        pairs = Counter(f"{kind[int(a)]} -> {kind[int(b)]}"
                        for a, b, t in zip(edges[0], edges[1], edge_types)
                        if t == "PROGRAMMATIC")
        return dict(pairs.most_common())
    except Exception as e:  # a census must not stop the bench
        return {"error": f"{type(e).__name__}: {e}"}


def census(raw_graph: int) -> dict:
    """``summarize`` of the CUDA graph with handle ``raw_graph``
    (``torch.cuda.CUDAGraph.raw_cuda_graph()`` of a graph captured with
    ``keep_graph=True``). A driver error gives ``{"error": ...}``."""
    try:
        from cuda.bindings import driver as drv
        graph = drv.CUgraph(init_value=raw_graph)
        _, n = _check(drv.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
        nodes, n = _check(drv.cuGraphGetNodes(graph, n), "cuGraphGetNodes")
        records = []
        nodes = list(nodes)[:n]
        for node in nodes:
            kind = _check(drv.cuGraphNodeGetType(node), "cuGraphNodeGetType")
            if kind == drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                records.append(_kernel_record(drv, node))
            else:
                records.append({"type": _short(kind), "kernel": None})
        get_edges = getattr(drv, "cuGraphGetEdges_v2", None) or drv.cuGraphGetEdges
        out = _check(get_edges(graph, 0), "cuGraphGetEdges")
        count = out[-1]
        out = _check(get_edges(graph, count), "cuGraphGetEdges")
        data = list(out[2])[:out[-1]] if len(out) == 4 and out[2] is not None else []
        edge_types = ([_short(drv.CUgraphDependencyType(int(e.type))) for e in data]
                      if data else ["DEFAULT (no edge data)"] * int(out[-1]))
        got = summarize(records, edge_types)
        if data:
            got["programmatic_pairs"] = _programmatic_pairs(nodes, records, out, edge_types)
        return got
    except Exception as e:  # a census must not stop the bench
        return {"error": f"{type(e).__name__}: {e}"}


def dot_dump(raw_graph: int, path: str) -> str | None:
    """Write the CUDA graph ``raw_graph`` as Graphviz DOT to ``path``.gz
    (``cuGraphDebugDotPrint``, verbose: every node's type, kernel
    parameters and launch attributes, every edge's type); the path written,
    or None after a driver error (printed, never raised)."""
    try:
        import gzip
        import shutil

        from cuda.bindings import driver as drv
        flags = int(drv.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)
        _check((drv.cuGraphDebugDotPrint(drv.CUgraph(init_value=raw_graph),
                                         path.encode(), flags)[0], None), "cuGraphDebugDotPrint")
        with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(path)
        return path + ".gz"
    except Exception as e:  # a dump must not stop the bench
        print(f"graph_census: no DOT dump for {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def keep_census(torch, folder: str, tag: str, limit: int, dot: int = 0) -> None:
    """Make ``torch.cuda.CUDAGraph`` census the first ``limit`` graphs this
    process captures (in capture order) into ``folder/census-<tag>.json``
    (a list, rewritten after each one), then instantiate them as torch would
    have at ``capture_end``. The first ``dot`` of them (at most ``limit``)
    are also written as ``folder/graph-<tag>-<i>.dot.gz`` (``dot_dump``)."""
    base = torch.cuda.CUDAGraph
    path = os.path.join(folder, f"census-{tag}.json")
    seen: list[dict] = []

    class CensusGraph(base):
        kept = 0  # graphs made with keep_graph so far (this process)

        def __new__(cls, *args, **kwargs):
            keep = CensusGraph.kept < limit
            if keep:
                CensusGraph.kept += 1
                kwargs["keep_graph"] = True
            graph = super().__new__(cls, *args, **kwargs)
            graph.census_kept = keep  # torch keeps keep_graph in C++ only
            return graph

        def __init__(self, *args, **kwargs):
            # the C++ graph is built by __init__ (pybind) from the call's own
            # arguments, not those __new__ passed on
            if self.census_kept:
                kwargs["keep_graph"] = True
            super().__init__(*args, **kwargs)

        def capture_end(self):
            super().capture_end()
            if self.census_kept and len(seen) < limit:
                try:
                    raw = self.raw_cuda_graph()
                except RuntimeError as e:  # a census must not stop the bench
                    raw, record = None, {"error": f"raw_cuda_graph: {e}"}
                seen.append(census(raw) if raw is not None else record)
                if raw is not None and len(seen) <= dot:
                    dot_dump(raw, os.path.join(folder, f"graph-{tag}-{len(seen) - 1}.dot"))
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(seen, f, indent=1)
                self.instantiate()  # as capture_end does without keep_graph

    torch.cuda.CUDAGraph = CensusGraph


def compare(a: dict, b: dict, names: tuple[str, str], top: int = 15) -> list[str]:
    """Markdown lines comparing two censuses ``a`` and ``b`` (``summarize``
    results, or error records) under the column names ``names``: node and
    edge counts per type, clustered and programmatic kernel nodes, and the
    ``top`` kernels by count in either."""
    lines = [f"| | {names[0]} | {names[1]} |", "|---|---|---|"]
    for c, n in ((a, names[0]), (b, names[1])):
        if "error" in c:
            lines.append(f"| error ({n}) | {c['error']} | |")
    if "error" in a or "error" in b:
        return lines
    lines.append(f"| nodes | {a['nodes']} | {b['nodes']} |")
    lines.append(f"| edges | {a['edges']} | {b['edges']} |")
    for key in ("types", "edge_types"):
        for t in sorted(set(a[key]) | set(b[key])):
            lines.append(f"| {key[:-1]} {t} | {a[key].get(t, 0)} | {b[key].get(t, 0)} |")
    for key in ("clustered_kernels", "programmatic_kernels"):
        lines.append(f"| {key.replace('_', ' ')} | {sum(a[key].values())} | "
                     f"{sum(b[key].values())} |")
    both = Counter(a["kernels"]) + Counter(b["kernels"])
    for name, _ in both.most_common(top):
        lines.append(f"| `{name[:90]}` | {a['kernels'].get(name, 0)} | "
                     f"{b['kernels'].get(name, 0)} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="compare two census files (CPU)")
    ap.add_argument("first", help="census-<rung>.json (tax_bisect.py --census)")
    ap.add_argument("second", help="another census file")
    ap.add_argument("--index", type=int, default=0,
                    help="which captured graph of each file (capture order; default 0)")
    ap.add_argument("-o", "--output", default="census-compare.json", help="JSON written")
    ap.add_argument("--md-output", default="", help="markdown written (default: none)")
    a = ap.parse_args(argv)
    picked = []
    for path in (a.first, a.second):
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)
        if not -len(runs) <= a.index < len(runs):
            ap.error(f"{path}: no census {a.index} (it has {len(runs)})")
        picked.append(runs[a.index])
    names = (os.path.basename(a.first), os.path.basename(a.second))
    write_probe({"files": list(names), "index": a.index, "censuses": picked},
                compare(picked[0], picked[1], names), a.output, a.md_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
