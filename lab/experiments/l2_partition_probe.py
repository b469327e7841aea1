"""Does it matter WHICH SMs bring a weight into the H200's L2?

    python3 lab/experiments/l2_partition_probe.py --out probe.json [--md-out probe.md]

Why: a copy-mode fill recovers 0.4-0.95 of a following GEMM's cold->hot gap,
and the share moves with the weight's placement and the wait after the fill
(benchmarks/results/h200-kernel-2026-12-01-means.md). Hypothesis: the L2 is
two partitions, each caching lines for the SMs next to it (NVIDIA H100
whitepaper, "L2 cache"), so lines a fill brought in through some SMs are
slower for other SMs than lines those SMs read themselves.

Method: a buffer (16 / 32 MB) is read by the SMs of a set S ("touch"), then
read by the SMs of a set T ("read", timed with CUDA events), behind a 1 GiB
read flush. Only CTAs whose ``%smid`` is in the set work; they share the
buffer through an atomic work queue of 64 KiB chunks (``ld.global.cg``, L2
only), so every byte is read once by some SM of the set. Sets: all SMs, even
/ odd SM ids, the lower / upper half of the SM ids. Cases per (S, T): cold
(flush, read T), self (flush, read T, read T again: the second is timed),
cross (flush, touch S, read T). Interleaved over rounds; means with p10-p90.
If cross(S, T) with S and T disjoint is as fast as self(T), the reader's
partition does not matter; if it lies between self and cold, it does, and
the split whose cross is slowest is closest to the partition map.
Needs cupy and a CUDA GPU.
"""

import argparse
import os
import sys
import time

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from probe_output import write_probe  # noqa: E402

from l2sched.bench.timing import stats  # noqa: E402

SRC = r"""
extern "C" __global__ void read_set(const int4* __restrict__ buf, long long n16,
                                    unsigned long long* counter,
                                    const unsigned char* mask, int* sink) {
  unsigned int smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (!mask[smid]) return;
  __shared__ long long chunk;
  const long long CH = 4096;  // int4 per chunk: 64 KiB
  int acc = 0;
  while (true) {
    if (threadIdx.x == 0) chunk = (long long)atomicAdd(counter, 1ULL);
    __syncthreads();
    long long c = chunk;
    __syncthreads();
    if (c * CH >= n16) break;
    long long end = min(n16, (c + 1) * CH);
    for (long long i = c * CH + threadIdx.x; i < end; i += blockDim.x) {
      int4 v = __ldcg(buf + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x7fffffff) sink[0] = acc;
}
"""


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", default="")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--sizes", default="16,32", help="MB (10^6 B)")
    args = ap.parse_args(argv)

    dev = cp.cuda.Device(0)
    sms = dev.attributes["MultiProcessorCount"]
    kern = cp.RawKernel(SRC, "read_set", options=("-std=c++17",))
    flush = cp.ones(1 << 28, dtype=cp.float32)
    sink = cp.zeros(1, dtype=cp.int32)
    counter = cp.zeros(1, dtype=cp.uint64)
    ids = list(range(sms))
    sets = {"all": ids, "even": ids[0::2], "odd": ids[1::2],
            "low": ids[: sms // 2], "high": ids[sms // 2:]}
    masks = {}
    for name, members in sets.items():
        m = cp.zeros(256, dtype=cp.uint8)
        m[cp.asarray(members)] = 1
        masks[name] = m
    pairs = [("all", "all"), ("even", "even"), ("odd", "even"), ("low", "low"),
             ("high", "low"), ("even", "odd"), ("low", "high")]
    grid, block = sms * 4, 256
    out = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "sms": sms, "rounds": args.rounds, "command": " ".join(sys.argv),
           "date": time.strftime("%Y-%m-%d"), "sizes": {}}

    def do_flush():
        cp.sum(flush)

    def launch(buf, setname):
        kern((grid,), (block,), (buf, cp.int64(buf.size // 4), counter, masks[setname], sink))

    def read(buf, setname):
        counter.fill(0)
        launch(buf, setname)

    for mb in (int(s) for s in args.sizes.split(",")):
        buf = cp.ones(mb * 10**6 // 4, dtype=cp.int32)
        cases = {}
        for t in sorted({t for _, t in pairs}):
            cases[f"cold:{t}"] = (do_flush, t)
            cases[f"self:{t}"] = ((lambda t=t, b=buf: (do_flush(), read(b, t))), t)
        for s, t in pairs:
            cases[f"cross:{s}->{t}"] = ((lambda s=s, b=buf: (do_flush(), read(b, s))), t)
        names = list(cases)
        times = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            evs = []
            for n in order:
                setup, t = cases[n]
                setup()
                counter.fill(0)  # outside the timed region
                e1, e2 = cp.cuda.Event(), cp.cuda.Event()
                e1.record()
                launch(buf, t)
                e2.record()
                evs.append((n, e1, e2))
            cp.cuda.Device().synchronize()
            for n, e1, e2 in evs:
                times[n].append(cp.cuda.get_elapsed_time(e1, e2) * 1e3)
        out["sizes"][mb] = {n: stats(v) for n, v in times.items()}
        print(f"{mb} MB", file=sys.stderr, flush=True)
        del buf

    lines = [f"# Which SMs brought the lines in: L2 reads on {out['device']} ({out['date']})",
             "", f"`{out['command']}`; means of {args.rounds} interleaved rounds (p10-p90), "
             "us. Read by the SMs of T; 'self' = T read it just before; 'cross S->T' = the "
             "SMs of S read it just before; 'cold' = after the flush only.", ""]
    for mb, rows in out["sizes"].items():
        lines += [f"## {mb} MB", "", "| case | us | p10-p90 |", "|---|---|---|"]
        for n, st in rows.items():
            lines.append(f"| {n} | {st['mean']:.2f} | {st['p10']:.2f}-{st['p90']:.2f} |")
        lines.append("")
    write_probe(out, lines, args.out, args.md_out)


if __name__ == "__main__":
    main()
