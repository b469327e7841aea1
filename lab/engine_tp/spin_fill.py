"""What a fill does to an idle interval of the TP emulation: the spin kernel
standing for an all-reduce, timed alone and with a concurrent fill of each
fill kernel of the profile, measured on the GPU that runs the emulation.

The same measurement as ``l2sched bench tp``'s collective interference
(``profile.tp_allreduce.measure_allreduce_fill``: per message one CUDA graph
per variant, in-graph events around the collective, the fill forked onto
l2sched's side stream right before it, its source switched and the L2
flushed before every replay), with the spin of the emulated all-reduce's
time in place of the NCCL all-reduce, and one more graph per mode: the
same fork with an empty fill (no rows: the fork and the grid, no bytes
read). The slowdown per mode is ``device.overlap.slowdown_for_extra`` of the
median extra time less the empty fill's (``interference_slowdown``): a spin
reads no memory, and the fork's fixed cost is not a slowdown of the
all-reduce (the lint charges it nowhere, docs/lint.md "Fork cost").
``write_measured`` puts the result into the emulation's
profile as measured ``fill.MODE.allreduce_slowdown`` terms, so ``fit`` and
``auto`` plan on a number measured for the idle intervals they plan around.

GPU only; torch is imported inside functions.
"""

from __future__ import annotations

import datetime
import re
import statistics

#: Fill bytes beside the spin (MB = 10^6 B): ``bench tp``'s (``AR_FILL_MB``).
FILL_MB = 30.0
#: Message sizes: the all-reduce of M = 1, 16 and 64 tokens of hidden 4096 in bf16.
MESSAGE_TOKENS = (1, 16, 64)
#: Suffix of the empty-fill arm of a mode (its fork and grid, no rows).
EMPTY = ":empty"


def measure(profile, tp: int, hidden: int, *, rounds: int = 30,
            policy: str = "evict_last") -> dict:
    """``{fill_bytes, rounds, rows: [{tokens, spin_us, alone_us, modes: {mode:
    {with_fill_us, extra_us (median), slowdown}}}], slowdown: {mode:
    median over rows}}`` on the current GPU; ``profile``: the emulation's
    ``DeviceProfile`` (spin length ``allreduce_us(tp, M * hidden * 2)``,
    the fill kernels). Modes whose kernel does not compile are named in
    ``errors``."""
    import torch

    from l2sched.bench.step import spin_cycles_per_us
    from l2sched.bench.tp_allreduce import FillSource, warm_fill
    from l2sched.bench.tp_step import CAPTURE_MODE, record_event
    from l2sched.runtime import kernel as K
    from l2sched.runtime.streams import side_stream

    dev = torch.cuda.current_device()
    fill_bytes = int(FILL_MB * 1e6)
    src = FillSource(torch, torch.device("cuda", dev), fill_bytes)
    side, cur = side_stream(dev), torch.cuda.current_stream()
    cycles = spin_cycles_per_us(torch)
    out: dict = {"fill_bytes": fill_bytes, "rounds": rounds, "policy": policy,
                 "cycles_per_us": cycles, "rows": [], "errors": {}}
    launches = {}
    for mode, fm in sorted(profile.fill_modes.items()):
        try:
            spec = K.KernelSpec(mode=mode, grid=fm.grid, threads=fm.threads,
                                chunk=fm.chunk, stages=fm.stages, policy=policy)
            kern = K.get_kernel(dev, spec)
            if kern is None:
                raise RuntimeError(K.disabled_reason() or f"{spec} did not compile")
            kern = warm_fill(torch, kern, src, side, cur)
            launches[mode] = (lambda k=kern: k.launch(src.table.data_ptr(), 0, 1,
                                                      side.cuda_stream))
            # the same launch with no rows: the fork and the grid, no bytes read
            launches[mode + EMPTY] = (lambda k=kern: k.launch(src.table.data_ptr(), 0, 0,
                                                              side.cuda_stream))
        except Exception as e:
            out["errors"][mode] = f"{type(e).__name__}: {e}"
    for M in MESSAGE_TOKENS:
        spin_us = profile.allreduce_us(tp, M * hidden * 2)
        graphs = {}
        for name, launch in [("alone", None)] + list(launches.items()):
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode=CAPTURE_MODE):
                c = torch.cuda.current_stream()
                e0 = record_event(torch, None, True)
                if launch is not None:
                    side.wait_stream(c)
                    launch()
                torch.cuda._sleep(max(1, int(spin_us * cycles)))
                e1 = record_event(torch, None, True)
                if launch is not None:
                    c.wait_stream(side)
            graphs[name] = (g, e0, e1)
        times: dict = {k: [] for k in graphs}
        order = list(graphs)
        for r in range(rounds + 3):
            order = order[1:] + order[:1]
            for k in order:
                g, e0, e1 = graphs[k]
                src.next()
                g.replay()
                torch.cuda.synchronize()
                if r >= 3:
                    times[k].append(e0.elapsed_time(e1) * 1000.0)
        alone = times.pop("alone")
        row = {"tokens": M, "bytes": M * hidden * 2, "spin_us": spin_us,
               "alone_us": statistics.median(alone), "modes": {}}
        for mode in [k for k in times if not k.endswith(EMPTY)]:
            ts, empty = times[mode], times.get(mode + EMPTY)
            extra = statistics.median(w - a for w, a in zip(ts, alone))
            fork = (None if empty is None else
                    statistics.median(e - a for e, a in zip(empty, alone)))
            fm = profile.fill_modes[mode]
            row["modes"][mode] = {
                "with_fill_us": statistics.median(ts), "extra_us": extra,
                "empty_fill_us": None if empty is None else statistics.median(empty),
                "fork_extra_us": fork,
                "slowdown": interference_slowdown(extra, fork, row["alone_us"], fm.launch_us,
                                                  fill_bytes / (fm.gbps * 1e3))}
        out["rows"].append(row)
        del graphs
    out["slowdown"] = {}
    for mode in [k for k in launches if not k.endswith(EMPTY)]:
        xs = [r["modes"][mode]["slowdown"] for r in out["rows"]
              if r["modes"][mode]["slowdown"] is not None]
        out["slowdown"][mode] = statistics.median(xs) if xs else 0.0
    return out


def interference_slowdown(extra_us: float, fork_extra_us: float | None, busy_us: float,
                          launch_us: float, read_us: float) -> float | None:
    """The slowdown (fraction) a fill's reads cause the spin: its extra
    (``extra_us``: with the fill minus alone, us) less the extra of the same
    fork with an empty fill (``fork_extra_us``: no rows, the same grid; None
    when not measured: nothing subtracted), through
    ``device.overlap.slowdown_for_extra`` (``busy_us``: the spin alone,
    ``launch_us``: the fill's launch, ``read_us``: its read time). The fork
    alone is a fixed cost per fill that the lint charges nowhere: measured
    on lone windows it is not additive over a schedule's fills
    (docs/lint.md, "Fork cost"), so it must not come back as a rate
    slowdown of every all-reduce a fill overlaps."""
    from l2sched.device.overlap import slowdown_for_extra

    reads = extra_us - (fork_extra_us or 0.0)
    return slowdown_for_extra(max(0.0, reads), busy_us, launch_us, read_us)


def write_measured(path: str, result: dict, where: str) -> dict:
    """Write ``result["slowdown"]`` (``measure``) into the profile file at
    ``path`` as ``fill.MODE.allreduce_slowdown``, each with a measured
    ``[origin]`` entry (probe, today's date, ``where``: the result file).
    Returns ``{mode: written fraction}``. Raises ``L2sInputError`` when the
    result does not load as a profile."""
    from pathlib import Path

    from l2sched.device import load_device_text
    from l2sched.files import write_text_atomically
    from l2sched.profile.tp_interference import write_allreduce_slowdown

    _, written, _ = write_allreduce_slowdown(
        path, result["slowdown"], comment="lab/engine_tp/spin_fill.py: the idle spin "
        f"with a concurrent {FILL_MB:g} MB fill, less an empty fill's fork ({where})")
    today = datetime.date.today().isoformat()
    text = Path(path).read_text(encoding="utf-8")
    for mode in written:
        entry = (f'"fill.{mode}.allreduce_slowdown" = {{ kind = "measured", probe = '
                 f'"lab/engine_tp/spin_fill.py (the emulation\'s idle spin with a '
                 f'concurrent {FILL_MB:g} MB fill, less an empty fill\'s fork)", '
                 f'date = "{today}", source = "{where}" }}')
        text, n = re.subn(rf'^"fill\.{mode}\.allreduce_slowdown" = .*$', entry, text,
                          flags=re.M)
        if n == 0:
            text = text.rstrip("\n") + "\n" + entry + "\n"
    load_device_text(text, path)
    write_text_atomically(path, text, in_place=True)
    return written
