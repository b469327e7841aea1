"""``l2sched bench tp``: the GLM-5.3-Flash-shaped decode step with real all-reduces.

One process per rank, started by ``torch.multiprocessing.spawn`` from the CLI
(not by ``torchrun``): ``l2sched bench tp --world-size N --output FILE``.
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

Arms (``arms``): ``none`` and ``compiled``; with ``--validation`` the arm
set of ``bench run --validation`` (``arms.arm_specs``: the A/A arm
``none-aa``, ``evict_normal``, each fill kernel, each window alone at two
budgets, the schedules of ``--bench-dir``). Every rank compiles each arm's
plan for its own TP rank; fills get their kernel and launch shape from the
device profile (as ``bench run`` and the lint). Per M (GPU), per arm: one
checked eager forward (every all-reduce's result is compared with the sum
over ranks), then one CUDA graph of the whole NCCL step; for ``none`` and
``compiled`` also the same step with per-op timing events inside the graph
(``torch.cuda.Event(external=True)``; skipped when torch lacks it) and,
unless ``--no-spin-arms``, the step with the single-GPU bench's
idle-interval all-reduces (``<arm>/spin``: a spin kernel of
``DeviceProfile.allreduce_us(tp, bytes)``). All step graphs of one M replay
interleaved, in rounds: each round's order is shuffled from ``--seed``, M
and the round (``tp_allreduce.replay_order``), the same on every rank (the
ranks check it), a barrier (gloo group) before every replay, CUDA events
around ``graph.replay()``; per arm the per-round times
(``graph_step_us_all``) and their stats (``graph_step_us``). The graphs of
one M are released before the next. Standalone all-reduces (message sizes
of ``--tokens`` and ``--ar-extra-tokens``) are timed per call, eager and
inside a captured graph, and (after the steps) per M of ``--tokens``,
alone and with a concurrent fill of each fill kernel (``--ar-fill-mb``; the
collective interference). Rank 0 gathers every rank's record and writes one JSON, also as a
checkpoint after each M and before the interference measurement (marked
``incomplete``), so a rank that fails late leaves what was measured.

``--p2p off`` sets ``NCCL_P2P_DISABLE=1`` in every rank before
``init_process_group``; the result records it (``p2p``, ``env_set``, every
``NCCL_*`` variable a rank saw: ``nccl_env``) and the all-reduce that ran
(``allreduce_impl``: torch.distributed's; vLLM's custom all-reduce is not
used). It also records the device profile's text (``device_profile_toml``),
which ``tp-report`` lints with.

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
from pathlib import Path

from l2sched.bench import shipped_path
from l2sched.bench.arms import arm_specs, schedule_text
from l2sched.bench.controls import add_controls
from l2sched.bench.tp_rank import rank_bench
from l2sched.files import write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory

#: Environment every rank sets before ``init_process_group``: no NVLink
#: multicast (NVLS) in NCCL, torch symmetric memory or NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}

#: Set with ``--p2p off``: NCCL moves no data over direct GPU peer access
#: (NVLink/PCIe P2P); intra-node traffic goes through host shared memory.
P2P_OFF = {"NCCL_P2P_DISABLE": "1"}

#: Said in every result and report: the all-reduce is not vLLM's.
NO_CUSTOM_AR = ("vLLM's custom all-reduce (and its symmetric-memory / quick "
                "all-reduce paths) is not used by this bench")

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
        "overrides", "device_profile", "expert_pools", "no_spin_arms",
        "seed", "p2p", "ar_fill_mb")}
    # the lab's research runs (python -m lab bench tp --validation) add these
    o["validation"] = bool(getattr(args, "validation", False))
    o["arm_variants"] = list(getattr(args, "arm_variants", []))
    o["bench_dir"] = getattr(args, "bench_dir", "")
    o["controls"] = bool(getattr(args, "controls", False))
    # l2sched profile --collectives: the all-reduce measurements only, no decode steps
    o["collectives_only"] = bool(getattr(args, "collectives_only", False))
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
    if o["controls"] and not o["validation"]:
        raise ValueError("--controls needs the A/A arm of --validation (a controls run "
                         "without it cannot be scored)")
    if o["replays"] < 1 or o["warmup"] < 0:
        raise ValueError(f"--replays must be >= 1 and --warmup >= 0, got "
                         f"{o['replays']} and {o['warmup']}")
    if o["ar_fill_mb"] < 0:
        raise ValueError(f"--ar-fill-mb must be >= 0, got {o['ar_fill_mb']:g}")
    # fail here, once, rather than in every spawned rank
    o["schedule"] = shipped_path(o["schedule"])
    o["arms"] = arms(o)
    for a in o["arms"]:
        if a["path"]:
            load_schedule(shipped_path(a["path"]), a["overrides"])  # raises L2sError
    device_profile = load_device(o["device_profile"])
    # the profile's text as the run read it: the report lints with it
    o["device_profile_toml"] = Path(device_profile.path).read_text(encoding="utf-8")
    o["ar_fill_bytes"] = int(o["ar_fill_mb"] * 10**6) // 16 * 16
    analytical_inventory(load_model_config(None), tp=o["tp"], ep=False)
    return o


def arms(o: dict) -> list[dict]:
    """The measured arms: ``none`` and ``compiled`` (``--schedule`` with
    ``--set``); for the lab's validation runs (``o["validation"]``) the
    arm set of ``arms.arm_specs`` with the A/A arm, ``o["arm_variants"]``
    and the schedules of ``o["bench_dir"]``, ``--set`` applied to every arm
    of ``--schedule``; with ``o["controls"]`` then the dispatch control of
    every schedule arm (``controls.control_arms``, after ``--set``). Each
    arm: ``{name, path, overrides}`` (``path`` None: no prefetch)."""
    if not o["validation"]:  # --controls needs --validation (``options``)
        return [{"name": "none", "path": None, "overrides": []},
                {"name": "compiled", "path": o["schedule"],
                 "overrides": list(o["overrides"])}]
    out = []
    for a in arm_specs(o["schedule"], shipped_path(o["bench_dir"]) if o["bench_dir"]
                       else "", False, o["arm_variants"], aa=True):
        ov = a.get("overrides", [])
        if a["path"] == o["schedule"]:
            ov = list(o["overrides"]) + ov
        out.append({"name": a["name"], "path": a["path"], "overrides": ov,
                    "schedule_text": schedule_text(a["path"])})
    return add_controls(out, "l2sched bench tp") if o.get("controls") else out


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


def env_set(o: dict) -> dict:
    """The environment every rank sets before ``init_process_group``:
    ``MULTICAST_OFF``, and ``NCCL_P2P_DISABLE=1`` with ``--p2p off``."""
    env = dict(MULTICAST_OFF)
    if o["p2p"] == "off":
        env.update(P2P_OFF)
    return env


def _worker(rank: int, o: dict, store: str) -> None:
    """One rank: init, benchmark, gather to rank 0, write."""
    os.environ.update(env_set(o))
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

        def save(rec: dict, pending: str = "") -> None:
            """Gather every rank's record to rank 0, which writes the result;
            ``pending``: what is still to be measured (a checkpoint)."""
            rec["nccl_env"] = {k: v for k, v in sorted(os.environ.items())
                               if k.startswith("NCCL_")}
            got = [None] * o["world_size"] if rank == 0 else None
            dist.gather_object(rec, got, dst=0, group=ctl)
            if rank == 0:
                res = _result(o, got, time.time() - t0)
                if pending:
                    res["incomplete"] = f"checkpoint: {pending} not measured (yet)"
                    res["tokens_requested"] = res["tokens"]
                    res["tokens"] = [t for t in o["tokens"] if str(t) in rec["per_m"]]
                _write(o["out_path"], res)
        rec = rank_bench(rank, o, ctl, checkpoint=save)
        save(rec)
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
            "p2p": o["p2p"], "env_set": env_set(o),
            "nccl_env": ranks[0].get("nccl_env", {}),
            "allreduce_impl": allreduce_impl(o["backend"]),
            "schedule": o["schedule"], "overrides": o["overrides"],
            "device_profile": o["device_profile"],
            "device_profile_toml": o["device_profile_toml"], "tokens": o["tokens"],
            "replays": o["replays"], "warmup": o["warmup"], "seed": o["seed"],
            "validation": o["validation"], "arms": o["arms"],
            "ar_fill_bytes": o["ar_fill_bytes"], "collectives_only": o["collectives_only"],
            "timed_reps": o["timed_reps"], "hidden": ranks[0]["hidden"],
            "ranks": ranks, "total_s": total_s}


def allreduce_impl(backend: str) -> str:
    """Which all-reduce the step ran (recorded in the result)."""
    return (f"torch.distributed.all_reduce (sum, bf16) on the {backend} process group"
            + (" (ProcessGroupNCCL: NCCL's own algorithm choice)" if backend == "nccl"
               else "") + "; " + NO_CUSTOM_AR)


def _write(path: str, out: dict) -> None:
    write_text_atomically(path, json.dumps(out, indent=1, default=str))
