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
#: The attention-core chain (issue 45, the ``attention`` class): decode
#: attention calls (``scaled_dot_product_attention``, one query token, 8 heads
#: of 128 over 2048 cached tokens: 8.4 MB of bf16 K and V, as an MLA sparse
#: decode reads its 2048 selected KV rows), per replay, and the fill's bytes;
#: K/V + fill stay below the H200's 40 MB effective L2, as the GEMM chain's.
ATTENTION_CHAIN = (24, (8, 2048, 128), 24 * MB)
#: The routing chain (the ``routing`` class): rounds of sigmoid scores, top-k
#: and renormalized weights (``moe.routing``/``*.topk``'s work: 16 tokens, 256
#: experts, top-8) per replay, and the fill's bytes (as the latency chain's).
ROUTING_CHAIN = (40, (16, 256, 8), 50 * MB)
#: interference record key prefix -> the fill-mode field its extra us gives
#: (``profile.write.probe_slowdowns``); the kernel class of each is
#: ``device.schema``'s.
CLASS_CHAINS = (("latency_chain_", "slowdown"), ("gemm_chain_", "gemm_slowdown"),
                ("attention_chain_", "attention_slowdown"),
                ("routing_chain_", "routing_slowdown"))


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


def _attention_chain(torch):
    """``ATTENTION_CHAIN``'s calls as one function (K/V allocated here)."""
    calls, (heads, tokens, dim), _ = ATTENTION_CHAIN
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(1, heads, 1, dim, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(1, heads, tokens, dim, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)

    def chain():
        for _ in range(calls):
            sdpa(q, k, v)
    return chain


def _routing_chain(torch):
    """``ROUTING_CHAIN``'s rounds as one function (logits allocated here)."""
    rounds, (tokens, experts, top_k), _ = ROUTING_CHAIN
    logits = torch.randn(tokens, experts, device="cuda")

    def chain():
        for _ in range(rounds):
            w, _idx = logits.sigmoid().topk(top_k, dim=-1)
            w / w.sum(dim=-1, keepdim=True)
    return chain


def bench_interference(b: TimingBench, kern, fill_bytes: int = 50 * MB) -> dict:
    """Extra time (us) of five chains when a fill runs on a side stream at
    the same time, each interleaved with the chain alone: a latency-bound
    chain (200 tiny kernels) and a memory-bound chain (a 256 MiB read) under
    a fill of ``fill_bytes``; a GEMM chain (``GEMM_CHAIN``: M=8 GEMMs over a
    weight that stays in L2), an attention-core chain (``ATTENTION_CHAIN``:
    decode attention over an L2-resident KV cache) and a routing chain
    (``ROUTING_CHAIN``: sigmoid, top-k, renormalize) under fills of their own
    sizes: what a fill costs each kernel class (``CLASS_CHAINS``) besides
    the device-memory bandwidth it takes."""
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
    # the chains' operands must outlive their graphs: keep the bodies here
    attention, routing = _attention_chain(torch), _routing_chain(torch)
    chains = {"latency_chain_200_kernels": (_graph_of(torch, tiny_chain), fill_bytes),
              "memory_chain_256MiB_read": (big_read, fill_bytes),
              f"gemm_chain_{n_gemms}_hot": (_graph_of(torch, gemm_chain), gemm_fill),
              f"attention_chain_{ATTENTION_CHAIN[0]}_hot": (
                  _graph_of(torch, attention), ATTENTION_CHAIN[2]),
              f"routing_chain_{ROUTING_CHAIN[0]}_rounds": (
                  _graph_of(torch, routing), ROUTING_CHAIN[2])}
    out = {"fill_bytes": fill_bytes, "gemm_chain": {"gemms": n_gemms, "weight": [n, k],
                                                    "fill_bytes": gemm_fill}}
    for name, (chain, nbytes) in chains.items():
        w = torch.ones(nbytes // 4, dtype=torch.int32, device="cuda")
        tab = row_table(torch, w)
        # the GEMM and attention chains' operands stay hot: no flush before them
        setup = None if name.startswith(("gemm", "attention")) else b.flush
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


def chain_record(interference: dict, prefix: str) -> dict | None:
    """The record (``alone_us``, ``with_fill_us``, ``extra_us``,
    ``fill_bytes``) of the chain whose key starts with ``prefix``
    (``CLASS_CHAINS``) in a ``bench_interference`` result, or None in
    results made before it had one."""
    return next((v for k, v in interference.items() if k.startswith(prefix)), None)


def gemm_chain_record(interference: dict) -> dict | None:
    """The GEMM chain's record (``chain_record``), or None."""
    return chain_record(interference, "gemm_chain_")
