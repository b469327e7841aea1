"""What a fill costs kernels that run beside it (``bench_interference``),
for ``python -m lab bench kernel`` and ``l2sched profile``'s interference probe.

Needs torch with CUDA at call time (nothing is imported at module import).
"""

from __future__ import annotations

from l2sched.bench.timing import TimingBench, dependent_read, gemm_consumer, row_table, stats

MB = 10**6

#: The GEMM chain of ``bench_interference``: GEMMs per replay, the weight
#: (N, K) and the fill's bytes. 8.4 MB of weight + a 24 MB fill stay below
#: the H200's effective L2 for data all SMs read (40 MB, ``l2sched profile``'s
#: l2 probe), so the fill does not evict the chain's weight.
GEMM_CHAIN = (24, (4096, 1024), 24 * MB)


def _graph_of(torch, body):
    """``body()`` warmed on a side stream, then captured into a CUDA graph;
    returns the graph's ``replay``."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside the capture
        body()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def bench_interference(b: TimingBench, kern, fill_bytes: int = 50 * MB) -> dict:
    """Extra time (us) of three chains when a fill runs on a side stream at
    the same time, each interleaved with the chain alone: a latency-bound
    chain (200 tiny kernels) and a memory-bound chain (a 256 MiB read) under
    a fill of ``fill_bytes``, and a GEMM chain (``GEMM_CHAIN``: M=8 GEMMs
    over a weight that stays in L2) under a fill of its own size: what a
    fill costs kernels that do not wait on device memory (SMs, L2)."""
    torch = b.torch
    side = torch.cuda.Stream()
    small = torch.zeros(256, device="cuda")
    big = torch.ones(64 << 20, dtype=torch.int32, device="cuda")  # 256 MiB
    big_read, _ = dependent_read(torch, big)
    big_read()

    def tiny_chain():
        for _ in range(200):
            small.add_(1)
    n_gemms, (n, k), gemm_fill = GEMM_CHAIN
    mm = gemm_consumer(torch, n, k)[0]

    def gemm_chain():
        for _ in range(n_gemms):
            mm()
    chains = {"latency_chain_200_kernels": (_graph_of(torch, tiny_chain), fill_bytes),
              "memory_chain_256MiB_read": (big_read, fill_bytes),
              f"gemm_chain_{n_gemms}_hot": (_graph_of(torch, gemm_chain), gemm_fill)}
    out = {"fill_bytes": fill_bytes, "gemm_chain": {"gemms": n_gemms, "weight": [n, k],
                                                    "fill_bytes": gemm_fill}}
    for name, (chain, nbytes) in chains.items():
        w = torch.ones(nbytes // 4, dtype=torch.int32, device="cuda")
        tab = row_table(torch, w)
        # the GEMM chain's weight stays hot: no flush before it
        setup = None if name.startswith("gemm") else b.flush
        chain()

        def with_fill(chain=chain, tab=tab):
            side.wait_stream(torch.cuda.current_stream())
            kern.launch(tab.data_ptr(), 0, 1, side.cuda_stream)
            chain()
            torch.cuda.current_stream().wait_stream(side)
        alone, both = [], []
        for _ in range(b.reps):  # interleaved, so drift hits both alike
            alone += b.timed(setup, chain, reps=1)[1]
            both += b.timed(setup, with_fill, reps=1)[1]
        a, w_ = stats(alone)["median"], stats(both)["median"]
        out[name] = {"alone_us": stats(alone), "with_fill_us": stats(both),
                     "extra_us": w_ - a, "fill_bytes": nbytes}
        del w
    return out


def gemm_chain_record(interference: dict) -> dict | None:
    """The GEMM chain's record (``alone_us``, ``with_fill_us``, ``extra_us``,
    ``fill_bytes``) in a ``bench_interference`` result, or None in results
    made before it had one."""
    return next((v for k, v in interference.items() if k.startswith("gemm_chain_")), None)
