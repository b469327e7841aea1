"""``l2sched bench tp``: the GLM-5.3-Flash-shaped decode step with real all-reduces.

One process per rank, started by ``torch.multiprocessing.spawn`` from the CLI
(not by ``torchrun``): ``l2sched bench tp --world-size N --out FILE``.
Rendezvous through a file store in a temporary directory; backend ``nccl``
(one GPU per rank, ``cuda:RANK``) or ``gloo`` (CPU; with ``--dry`` the tree
lives on the meta device and the runtime is ``DryRunRuntime``, the path CI
runs). Before ``init_process_group`` every rank sets ``MULTICAST_OFF``
(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1); nothing here creates multicast objects.

Each rank builds the bench tree (``tree.build_tree``) of TP rank
``rank % tp`` of the *modelled* TP (``--tp``, default 4: the per-GPU shapes of
TP4, as the single-GPU bench), compiles its own plan for that TP rank,
installs it with the vLLM plugin's installer on its own runtime and side
stream, and runs ``TPStepRunner`` (a ``StepRunner`` whose ``collective`` ops
are ``torch.distributed.all_reduce`` of an ``(M, hidden)`` bf16 buffer, the
real message, across ``world_size`` processes). So with 2 GPUs the weights
are TP4's and the all-reduces are 2-way: the JSON records both
``world_size`` and ``tp``.

Per M (GPU), per arm (``none``; ``compiled``): one checked eager forward
(every all-reduce's result is compared with the sum over ranks), then CUDA
graphs of the whole step: the NCCL step, the same step with per-op timing
events inside the graph (``torch.cuda.Event(external=True)``; skipped when
torch lacks it) and, unless ``--no-spin-arms``, the step with the single-GPU
bench's idle-interval all-reduces (``<arm>/spin``: a spin kernel of
``DeviceProfile.allreduce_us(tp, bytes)``). All step graphs of one M replay
interleaved (same shuffled order on every rank), a barrier (gloo group)
before every timed replay, CUDA events around ``graph.replay()``.
Standalone all-reduces (message sizes of ``--tokens`` and
``--ar-extra-tokens``) are timed per call, eager and inside a captured
graph. Rank 0 gathers every rank's record and writes one JSON.

This module starts the ranks (``options``, ``run_tp``) and writes rank 0's
JSON; ``tp_rank`` is one rank's benchmark, ``tp_step`` the step with real
all-reduces (``TPStepRunner``, the timed runtime) and ``tp_allreduce`` the
ranks' lockstep helpers and the standalone all-reduce measurement.

Units: us, bytes. torch is imported inside functions only.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
import traceback

from l2sched.bench import shipped_path
from l2sched.bench.tp_rank import rank_bench
from l2sched.files import write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.model.devices import load_device
from l2sched.model.inventory import analytical_inventory

#: Environment every rank sets before ``init_process_group``: no NVLink
#: multicast (NVLS) in NCCL, torch symmetric memory or NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}

TP_NOTE = ("all-reduces are real torch.distributed all-reduces of (M, hidden) "
           "bf16 across world_size processes; weights, plan and inventory are the "
           "modelled TP's per-GPU shapes (tp). '<arm>/spin' arms replace the "
           "all-reduces with the single-GPU bench's idle intervals (spin kernels "
           "of the device profile's collective model at tp)")


def options(args) -> dict:
    """The resolved options (a plain dict, sent to every rank). Raises
    ``ValueError`` for an unusable combination (nccl with --dry, fewer than 2
    ranks, more ranks than GPUs, a world size above the modelled TP)."""
    o = {k: getattr(args, k) for k in (
        "world_size", "backend", "dry", "out", "tokens", "replays", "warmup",
        "timed_reps", "ar_iters", "ar_extra_tokens", "tp", "schedule",
        "overrides", "device_profile", "expert_pools", "no_spin_arms")}
    import torch
    cuda = torch.cuda.is_available()
    if o["backend"] is None:
        o["backend"] = "nccl" if cuda and not o["dry"] else "gloo"
    if o["dry"] and o["backend"] == "nccl":
        raise ValueError("--dry runs on the CPU: use --backend gloo")
    if o["backend"] == "gloo" and not o["dry"]:
        raise ValueError("the gloo backend runs the CPU dry path only: add --dry")
    if not o["world_size"]:
        o["world_size"] = torch.cuda.device_count() if o["backend"] == "nccl" else 2
    ws = o["world_size"]
    if ws < 2:
        raise ValueError(f"--world-size must be >= 2, got {ws}")
    if o["backend"] == "nccl" and ws > torch.cuda.device_count():
        raise ValueError(f"--world-size {ws} but {torch.cuda.device_count()} GPU(s) visible")
    if ws > o["tp"]:
        raise ValueError(f"--world-size {ws} above the modelled --tp {o['tp']}")
    if not o["tokens"]:
        raise ValueError("--tokens is empty")
    # fail here, once, rather than in every spawned rank
    o["schedule"] = shipped_path(o["schedule"])
    load_schedule(o["schedule"], o["overrides"])  # raises L2sError
    load_device(o["device_profile"])
    analytical_inventory(load_model_config(None), tp=o["tp"], ep=False)
    return o


def run_tp(args) -> dict:
    """Spawn ``world_size`` ranks, run the benchmark, return rank 0's result
    dict (also written to ``args.out`` when given). Raises ``ValueError`` for
    bad options and ``torch.multiprocessing.ProcessRaisedException`` when a
    rank fails (the other ranks are terminated)."""
    import torch.multiprocessing as mp
    o = options(args)
    os.environ.update(MULTICAST_OFF)
    with tempfile.TemporaryDirectory(prefix="l2sched-tp-") as tmp:
        out = o["out"] or os.path.join(tmp, "result.json")
        o["out_path"] = out
        o["argv"] = list(sys.argv)
        mp.spawn(_worker, args=(o, os.path.join(tmp, "rendezvous")),
                 nprocs=o["world_size"], join=True)
        with open(out) as f:
            return json.load(f)


def _worker(rank: int, o: dict, store: str) -> None:
    """One rank: init, benchmark, gather to rank 0, write."""
    os.environ.update(MULTICAST_OFF)
    import torch
    import torch.distributed as dist
    gpu = o["backend"] == "nccl"
    kw = {}
    if gpu:
        torch.cuda.set_device(rank)
        kw["device_id"] = torch.device("cuda", rank)
    t0 = time.time()
    dist.init_process_group(o["backend"], init_method=f"file://{store}", rank=rank,
                            world_size=o["world_size"],
                            timeout=datetime.timedelta(minutes=10), **kw)
    try:
        ctl = dist.new_group(backend="gloo") if gpu else None
        rec = rank_bench(rank, o, ctl)
        got = [None] * o["world_size"] if rank == 0 else None
        dist.gather_object(rec, got, dst=0, group=ctl)
        if rank == 0:
            _write(o["out_path"], _result(o, got, time.time() - t0))
        dist.barrier(group=ctl)
    except BaseException:
        # a failed rank must not wait in destroy_process_group for peers
        # that wait in a collective for it (seen on 2 H200s): print, exit
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    dist.destroy_process_group()


def _result(o: dict, ranks: list, total_s: float) -> dict:
    return {"kind": "l2sched bench tp", "note": TP_NOTE,
            "date": datetime.date.today().isoformat(), "argv": o["argv"],
            "world_size": o["world_size"], "tp": o["tp"], "backend": o["backend"],
            "dry": o["dry"], "multicast_env": dict(MULTICAST_OFF),
            "schedule": o["schedule"], "overrides": o["overrides"],
            "device_profile": o["device_profile"], "tokens": o["tokens"],
            "replays": o["replays"], "warmup": o["warmup"],
            "timed_reps": o["timed_reps"], "hidden": ranks[0]["hidden"],
            "ranks": ranks, "total_s": total_s}


def _write(path: str, out: dict) -> None:
    write_text_atomically(path, json.dumps(out, indent=1, default=str))
