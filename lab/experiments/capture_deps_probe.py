"""Issue 36 diagnostic: do cuStreamGetCaptureInfo / cuStreamUpdateCaptureDependencies,
as runtime.capture_nodes.CaptureDeps calls them, leave a kernel launched between a
get and a set-back as a leaf of the captured graph? Three kernels on one capturing
stream: k1, then k2 between get() and set(saved), then k3. Prints the saved, after-k2
and after-set dependency handles, the edges of the graph and the bindings' version.
A leaf k2 has no outgoing edge; k3 depends on k1 only. Usage (GPU machine):
python3 -m lab.experiments.capture_deps_probe [--out PROBE.json]
"""

import argparse
import json

import torch

from l2sched.runtime.capture_nodes import CaptureDeps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="", help="also write what is printed as JSON here")
    out_path = p.parse_args(argv).out
    import cuda.bindings
    from cuda.bindings import driver as drv
    from cuda.bindings import runtime as cudart
    print("cuda.bindings", getattr(cuda.bindings, "__version__", "?"),
          "v3:", hasattr(drv, "cuStreamGetCaptureInfo_v3"))
    cd = CaptureDeps()
    x = torch.zeros(1024, device="cuda")
    y = torch.zeros(1024, device="cuda")
    g = torch.cuda.CUDAGraph(keep_graph=True)
    log = {}
    with torch.cuda.graph(g):
        h = torch.cuda.current_stream().cuda_stream
        x.add_(1)                                  # k1
        saved = cd.get(h)
        log["saved"] = [int(n) for n in saved[0]]
        log["saved_edges"] = [None if e is None else (int(e.from_port), int(e.to_port), int(e.type))
                              for e in saved[1]]
        y.mul_(2)                                  # k2, the "fill"
        after = cd.get(h)
        log["after_k2"] = [int(n) for n in after[0]]
        log["saved_again"] = [int(n) for n in saved[0]]
        cd.set(h, *saved)
        log["after_set"] = [int(n) for n in cd.get(h)[0]]
        x.add_(1)                                  # k3
    for k, v in log.items():
        print(k, v)
    graph = cudart.cudaGraph_t(init_value=g.raw_cuda_graph())
    out = cudart.cudaGraphGetEdges(graph, 0)
    out = cudart.cudaGraphGetEdges(graph, out[-1])
    m = out[-1]
    log["edges"] = [(int(f), int(t)) for f, t in zip(out[1][:m], out[2][:m])]
    print("edges", log["edges"])
    err, _, n = cudart.cudaGraphGetNodes(graph, 0)
    err, nodes, n = cudart.cudaGraphGetNodes(graph, n)
    log["nodes"] = [(int(nd), int(cudart.cudaGraphNodeGetType(nd)[1])) for nd in nodes[:n]]
    print("nodes", log["nodes"])
    if out_path:
        with open(out_path, "w") as f:
            json.dump(log, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
