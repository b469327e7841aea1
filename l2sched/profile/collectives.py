"""The collective part of ``l2sched profile`` (``--collectives N``).

``run_collectives`` runs ``bench tp``'s all-reduce measurements, and only
those (``tp.run_tp`` with ``collectives_only``: no decode steps), across N
GPUs of this box: one process per GPU, NCCL, NVLink multicast off. Each
message of the op table's M and of ``bench tp``'s extra sizes (128..4096
tokens) is timed eagerly and inside a CUDA graph
(``tp_allreduce.measure_allreduce``), and per M the all-reduce is timed alone
and beside a fill of each fill kernel (``measure_allreduce_fill``, the
``bench tp --ar-fill-mb`` default size). The result is kept in the profile's
state (``results["collectives"]``), so a resumed run does not repeat it.

``tp_profile.collective_terms_text`` writes what ``bench tp-report
--update-profile`` writes from a ``bench tp`` result (``[allreduce.tpN]`` and
each ``fill.MODE.allreduce_slowdown``) into the profile text ``l2sched
profile`` is about to write. Units: us, bytes.
torch is imported inside functions only.
"""

from __future__ import annotations

import argparse
import os

from l2sched.bench.options import tp_arguments
from l2sched.bench.tp import run_tp
from l2sched.profile.collective_terms import allreduce_points
from l2sched.profile.tp_interference import fill_lines

#: Where the collective part's result sits in the profile's state.
STATE_KEY = "collectives"


def collective_args(world_size: int, *, tp: int, tokens: list[int], base: str,
                    iters: int, dry: bool = False) -> argparse.Namespace:
    """The ``bench tp`` options of the collective part: ``bench tp``'s own
    defaults (its parser, ``options.tp_arguments``) for ``world_size`` ranks,
    modelled TP ``tp``, messages of ``tokens``, the fill shapes of profile
    ``base``, ``iters`` calls per message; ``dry``: the CPU (gloo) path."""
    p = argparse.ArgumentParser()
    tp_arguments(p)
    argv = ["--world-size", str(world_size), "--tp", str(tp),
            "--tokens", ",".join(map(str, tokens)), "--device-profile", base,
            "--ar-iters", str(iters), "--no-spin-arms"]
    a = p.parse_args(argv + (["--dry"] if dry else []))
    a.collectives_only = True
    return a


def run_collectives(world_size: int, *, tp: int, tokens: list[int], base: str,
                    iters: int, dry: bool = False) -> dict:
    """Measure the collective part (see the module docstring) and return the
    ``bench tp`` result (``collectives_only``: no ``per_m`` records). Raises
    ``ValueError`` for unusable options (fewer than 2 GPUs, more ranks than
    GPUs, ``world_size`` above ``tp``) and
    ``torch.multiprocessing.ProcessRaisedException`` when a rank fails."""
    return run_tp(collective_args(world_size, tp=tp, tokens=tokens, base=base,
                                  iters=iters, dry=dry))


def collectives_markdown(result: dict) -> list[str]:
    """The report section of the collective part: every all-reduce message
    (graph and eager medians over ranks) and the all-reduce with a fill."""
    out = [f"## Collectives ({result['world_size']} GPUs, NCCL, multicast off)", "",
           "| bytes | graph us | eager us |", "|---|---|---|"]
    graph = dict(allreduce_points(result, max_bytes=None, source="graph"))
    eager = dict(allreduce_points(result, max_bytes=None, source="eager"))
    for b in sorted(set(graph) | set(eager)):
        g, e = graph.get(b), eager.get(b)
        out.append(f"| {b} | {'-' if g is None else f'{g:.1f}'} | "
                   f"{'-' if e is None else f'{e:.1f}'} |")
    return out + [""] + fill_lines(result)


def state_source(state_path: str) -> str:
    """How the written profile names where the collective result is kept."""
    where = os.path.basename(state_path) if state_path else "its state"
    return f"l2sched profile --collectives ({where}: results.{STATE_KEY})"
