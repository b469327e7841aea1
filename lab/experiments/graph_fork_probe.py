"""What does a fork to a side stream cost the main stream of a captured CUDA
graph, and does the order in which the capture records the fork's two
children matter?

    python3 lab/experiments/graph_fork_probe.py --out probe.json [--md-out probe.md]

Why: in the bench's decode step one window alone costs the step 2-7 us per
fill whatever the fill moves (0.5 or 5 MB, any kernel), the cost is not
additive over windows, and a torch.profiler trace of such a replay showed
main-stream kernels running on the side branch's stream
(benchmarks/results/h200-2026-12-01-diag-fork.md). Hypothesis: when CUDA
turns the graph into streams, the child a node got FIRST continues on the
node's stream and later children move to other streams. The runtime
captures the fill right after the fork, before the main stream's next
kernel, so the fill would take the main stream's place and every later
main-stream kernel would wait across streams.

Method: a synthetic decode-like chain of ``--layers`` layers, each
``mm1 (16 x 4096 x 2048 bf16), add, spin (all-reduce stand-in), mm2, add``
with (``aux``) or without a side branch per layer (a GEMM on a second stream
forked after the first add and joined before mm2, like the shared experts).
Arms fork a tiny kernel (a 1-element add) onto a third stream at one
position per layer (``after_mm1`` or ``before_spin``) and capture it either
before the main stream's next kernel (``first``, as the runtime does) or
after it (``deferred``); the side stream joins the main stream at the end.
Each arm is one captured graph; replays are interleaved round by round,
timed by events on the launching stream around the untimed replay (a spin
ahead of each, so the host launch is not timed). Cost = median(arm) -
median(none) of the same branch structure, per fork (us).
Needs torch with CUDA.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from probe_output import write_probe  # noqa: E402

from l2sched.bench.timing import stats  # noqa: E402


class Chain:
    """The synthetic layer chain and its capture (module docstring)."""

    def __init__(self, layers: int, spin_us: float, aux: bool):
        self.layers, self.aux_on = layers, aux
        props = torch.cuda.get_device_properties(0)
        self.spin_cycles = int(spin_us * getattr(props, "clock_rate", 1980000) / 1e3)
        self.x = torch.randn(16, 4096, dtype=torch.bfloat16, device="cuda")
        self.w1 = [torch.randn(2048, 4096, dtype=torch.bfloat16, device="cuda") * 0.01
                   for _ in range(layers)]
        self.w2 = [torch.randn(4096, 2048, dtype=torch.bfloat16, device="cuda") * 0.01
                   for _ in range(layers)]
        self.wa = torch.randn(1024, 4096, dtype=torch.bfloat16, device="cuda") * 0.01
        self.h = torch.empty(16, 2048, dtype=torch.bfloat16, device="cuda")
        self.y = torch.empty(16, 4096, dtype=torch.bfloat16, device="cuda")
        self.a_out = torch.empty(16, 1024, dtype=torch.bfloat16, device="cuda")
        self.tick = torch.zeros(1, device="cuda")
        self.aux = torch.cuda.Stream()
        self.side = torch.cuda.Stream()

    def step(self, fork_at: str | None, order: str) -> None:
        """One step on the current stream (capturable)."""
        main = torch.cuda.current_stream()
        pending = None

        def fork():
            self.side.wait_stream(torch.cuda.current_stream())
            if order == "first":
                with torch.cuda.stream(self.side):
                    self.tick.add_(1)
                return None
            return True

        def after_next():
            if pending:
                with torch.cuda.stream(self.side):
                    self.tick.add_(1)

        for i in range(self.layers):
            torch.matmul(self.x, self.w1[i].t(), out=self.h)
            if fork_at == "after_mm1":
                pending = fork()
            self.h.add_(1)
            after_next()
            pending = None
            if self.aux_on:
                self.aux.wait_stream(main)
                with torch.cuda.stream(self.aux):
                    torch.matmul(self.x, self.wa.t(), out=self.a_out)
            if fork_at == "before_spin":
                pending = fork()
            torch.cuda._sleep(self.spin_cycles)
            after_next()
            pending = None
            if self.aux_on:
                main.wait_stream(self.aux)
            torch.matmul(self.h, self.w2[i].t(), out=self.y)
            self.y.add_(1)
        if fork_at is not None:
            main.wait_stream(self.side)

    def capture(self, fork_at, order) -> torch.cuda.CUDAGraph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.step(fork_at, order)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.step(fork_at, order)
        torch.cuda.synchronize()
        return g


def replay_times(graphs: dict, rounds: int, lead_cycles: int) -> dict:
    """Per arm, the event-timed untimed replays (us), interleaved."""
    names = list(graphs)
    out = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        evs = []
        for n in order:
            torch.cuda._sleep(lead_cycles)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[n].replay()
            e1.record()
            evs.append((n, e0, e1))
        torch.cuda.synchronize()
        for n, e0, e1 in evs:
            out[n].append(e0.elapsed_time(e1) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", default="")
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--spin-us", type=float, default=15.0)
    args = ap.parse_args()
    lead = int(3000 * torch.cuda.get_device_properties(0).clock_rate / 1e3)
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "layers": args.layers, "rounds": args.rounds,
           "spin_us": args.spin_us, "structures": {}}
    lines = [f"# Fork order in a captured CUDA graph ({out['device']}, {out['date']})", "",
             f"Command: `{out['command']}`. torch {out['torch']}, CUDA {out['cuda']}. "
             f"{args.layers} layers, one fork per layer; medians of {args.rounds} interleaved "
             "replays (p10-p90); cost = arm - none of the same structure.", "",
             "| structure | arm | step us (p10-p90) | cost us | per fork us |",
             "|---|---|---|---|---|"]
    for aux in (False, True):
        chain = Chain(args.layers, args.spin_us, aux)
        arms = {"none": (None, "first")}
        for at in ("after_mm1", "before_spin"):
            for order in ("first", "deferred"):
                arms[f"{at}/{order}"] = (at, order)
        graphs = {n: chain.capture(*a) for n, a in arms.items()}
        times = replay_times(graphs, args.rounds, lead)
        base = stats(times["none"])["median"]
        key = "aux" if aux else "plain"
        rec = out["structures"][key] = {}
        for n, ts in times.items():
            s = stats(ts)
            cost = s["median"] - base
            rec[n] = {"step_us": s, "all_us": ts, "cost_us": cost,
                      "per_fork_us": cost / args.layers if n != "none" else 0.0}
            lines.append(f"| {key} | {n} | {s['median']:.1f} ({s['p10']:.1f}-{s['p90']:.1f})"
                         f" | {cost:+.1f} | {rec[n]['per_fork_us']:+.2f} |")
        del graphs
    write_probe(out, lines, args.out, args.md_out)


if __name__ == "__main__":
    main()
