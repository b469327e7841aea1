"""`python -m lab bench run` with the step's streams changed: is the lone-window
loss an interaction between the fills' side stream and the shared experts'
aux stream?

    python3 lab/experiments/bench_run_streams.py [--shared-experts-on-main]
        [--side-priority P] [--fills-on-aux] BENCH-RUN-ARGS...

Why: with CUDA's default hardware queues, one window alone costs the decode
step 2-7 us per fill whatever it moves, and the loss is gone with one queue
(benchmarks/results/h200-2026-12-01-diag-connections.md). The bench step has
three streams: main, l2sched's side stream (the fills), and an aux stream on
which each MoE layer runs its shared experts (forked and joined per layer,
as vLLM overlaps them).

- ``--shared-experts-on-main``: ``StepRunner._moe_runner`` sees ``aux`` =
  the current stream, so the per-layer fork and join are no-ops and the
  captured step has no second branch besides the fills. The shared experts
  then no longer overlap the routing and the routed experts, so the
  no-prefetch step is slower: compare gains, not steps.
- ``--side-priority P``: l2sched's side stream is created with CUDA stream
  priority ``P`` (lower = higher priority; ``torch.cuda.Stream.priority_range``)
  before anything else creates it.
- ``--fills-on-aux``: l2sched's side stream IS the step's aux stream, so the
  fills and the shared experts share one stream order (one branch less).

Diagnostic only; results in benchmarks/results/h200-2026-12-01-diag-streams.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
import torch  # noqa: E402

from l2sched.bench import step  # noqa: E402
# `python -m lab bench run`: the product's bench run with the research arm sets
# (--validation, --perturbations, --controls, --bench-dir)
from lab import main  # noqa: E402
from l2sched.runtime import streams  # noqa: E402


def _fills_on_aux() -> None:
    init = step.StepRunner.__init__

    def on_aux(self, *a, **k):
        init(self, *a, **k)
        if self.cuda:
            streams._side_streams[self.device.index or 0] = self.aux
    step.StepRunner.__init__ = on_aux


def _shared_experts_on_main() -> None:
    moe_runner = step.StepRunner._moe_runner

    def on_main(self, lay, experts):
        if self.cuda:
            self.aux = torch.cuda.current_stream()
        return moe_runner(self, lay, experts)
    step.StepRunner._moe_runner = on_main


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every other argument goes to `python -m lab bench run` (see its --help).")
    ap.add_argument("--shared-experts-on-main", action="store_true")
    ap.add_argument("--side-priority", type=int, default=None)
    ap.add_argument("--fills-on-aux", action="store_true")
    opts, rest = ap.parse_known_args()
    if opts.shared_experts_on_main:
        _shared_experts_on_main()
    if opts.fills_on_aux:
        _fills_on_aux()
    if opts.side_priority is not None and torch.cuda.is_available():  # not with --dry
        streams._side_streams[0] = torch.cuda.Stream(device=0, priority=opts.side_priority)
    sys.exit(main(["bench", "run", *rest]))
