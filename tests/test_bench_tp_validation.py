"""``python -m lab bench tp --validation`` on the CPU (2 spawned ranks, gloo, meta
tree, dry-run runtime): the validation arm set of ``bench run --validation``,
each arm's plan compiled for the rank's own TP rank with the profile's fill
kernels, the lockstep replay order (one shared seed, the same on every
rank), ``--p2p off`` and the all-reduce implementation in the result, and
the collective-interference measurement's shape."""

import json
import subprocess
import sys

import pytest

from extras import TORCH_MISSING  # noqa: E402

torch = pytest.importorskip("torch", reason=TORCH_MISSING)

from l2sched.bench import shipped_path
from l2sched.bench.arms import arm_specs
from l2sched.bench.options import SCHEDULE
from lab.bench.arms import validation_variants
from lab.bench.options import BENCH_DIR
from l2sched.bench.tp_allreduce import FILL_WARM_ROUNDS, replay_order
from l2sched.bench.arms import AA_ARM
from l2sched.cli import main
from l2sched.compiler.compile import compile_plan
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.runtime.dry_run import explain_step
from l2sched.runtime.gate import StepInfo
from lab import main as lab_main

REPLAYS, WARMUP, SEED, AR_ITERS = 2, 1, 7, 3
TOKENS = (1,)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("tpv") / "tpv.json"
    rc = lab_main(["bench", "tp", "--dry", "--world-size", "2", "--validation",
               "--tokens", ",".join(map(str, TOKENS)), "--replays", str(REPLAYS),
               "--warmup", str(WARMUP), "--seed", str(SEED), "--ar-iters", str(AR_ITERS),
               "--ar-extra-tokens", "", "--p2p", "off", "--out", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


def _names():
    return [a["name"] for a in arm_specs(SCHEDULE, shipped_path(BENCH_DIR), False,
                                         validation_variants(SCHEDULE), aa=True)]


def test_validation_arm_set_is_bench_runs(result):
    names = _names()
    assert names[:3] == ["none", AA_ARM, "compiled"]
    assert "evict_normal" in names and "kernel-copy" in names  # the h200 default is bulk
    assert any(n.startswith("bench/") for n in names)
    assert [a["name"] for a in result["arms"]] == names
    assert result["validation"] is True and result["seed"] == SEED
    for r in result["ranks"]:
        # the hardware-queue setting a controls run must share (None: CUDA's default)
        assert "cuda_device_max_connections" in r["machine"]
        for M in TOKENS:
            arms = r["per_m"][str(M)]["arms"]
            assert set(arms) == set(names)   # no spin arms off the GPU
            for name in names:
                a = arms[name]
                assert len(a["graph_step_us_all"]) == REPLAYS
                assert a["graph_step_us"]["n"] == REPLAYS
                c = a["allreduce_check"]
                assert c["calls"] == c["passed"] > 0


def test_each_arm_runs_its_own_plan_for_the_ranks_tp_rank(result):
    cfg = load_model_config(None)
    prof = load_device("h200")
    specs = {a["name"]: a for a in result["arms"]}
    for r in result["ranks"]:
        inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=r["tp_rank"])
        arms = r["per_m"]["1"]["arms"]
        for name, spec in specs.items():
            if spec["path"] is None:
                assert "issue_log" not in arms[name] and name not in r["plans"]
                continue
            plan = compile_plan(load_schedule(shipped_path(spec["path"]), spec["overrides"]),
                                inv, r["tp_rank"])
            want = [e.__dict__ for e in explain_step(
                plan, StepInfo(num_tokens=1, graph_mode="full"))]
            assert arms[name]["issue_log"] == want, name
            assert r["plans"][name]["issues"] == len(plan.issues)
        # fills get the device profile's kernels, as bench run and the lint
        assert arms["compiled"]["fill_kernels"] == [prof.fill_default] == ["bulk"]
        assert arms["kernel-copy"]["fill_kernels"] == ["copy"]
        assert arms["kernel-load"]["fill_kernels"] == ["load"]
        assert arms["evict_normal"]["fill_kernels"] == ["bulk"]


def test_replay_order_is_lockstep_and_seeded(result):
    r0, r1 = result["ranks"]
    for M in map(str, TOKENS):
        o0, o1 = r0["per_m"][M]["replay_order"], r1["per_m"][M]["replay_order"]
        assert o0 == o1
        assert len(o0) == WARMUP + REPLAYS
        names = sorted(r0["per_m"][M]["arms"])
        for rnd, order in enumerate(o0):
            assert sorted(order) == names
            assert order == replay_order(names, SEED, int(M), rnd)
        assert len({tuple(o) for o in o0}) > 1       # shuffled per round
    # another seed, another order
    names = _names()
    assert replay_order(names, SEED, 1, 0) != replay_order(names, SEED + 1, 1, 0)


def test_replay_order_does_not_depend_on_the_process():
    code = ("from l2sched.bench.tp_allreduce import replay_order;"
            "print(replay_order(['a', 'b', 'c', 'd', 'e', 'f'], 3, 16, 5))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": h},
                           check=True).stdout for h in ("1", "2")}
    assert outs == {str(replay_order(list("abcdef"), 3, 16, 5)) + "\n"}


def test_result_records_p2p_env_and_implementation(result):
    assert result["p2p"] == "off"
    assert result["env_set"] == {"NCCL_NVLS_ENABLE": "0",
                                 "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                 "NVSHMEM_DISABLE_NVLS": "1", "NCCL_P2P_DISABLE": "1"}
    assert result["multicast_env"]["NCCL_NVLS_ENABLE"] == "0"
    for r in result["ranks"]:
        assert r["nccl_env"]["NCCL_P2P_DISABLE"] == "1"
        assert r["nccl_env"]["NCCL_NVLS_ENABLE"] == "0"
    impl = result["allreduce_impl"]
    assert impl.startswith("torch.distributed.all_reduce") and "gloo" in impl
    assert "custom all-reduce" in impl and "not used" in impl
    assert "[fill]" in result["device_profile_toml"]


def test_collective_interference_shape(result):
    prof = load_device("h200")
    for r in result["ranks"]:
        f = r["allreduce_fill"]
        assert f["fill_bytes"] == result["ar_fill_bytes"] == 30 * 10**6
        assert sorted(f["modes"]) == sorted(prof.fill_modes)
        assert f["modes"]["copy"]["grid"] == prof.fill_modes["copy"].grid
        assert [row["tokens"] for row in f["rows"]] == list(TOKENS)
        for row in f["rows"]:
            assert row["bytes"] == row["tokens"] * 4096 * 2
            assert len(row["alone_us_all"]) == AR_ITERS
            for m, x in row["modes"].items():
                assert x["extra_us_all"] == [w - a for w, a in
                                             zip(x["with_fill_us_all"], row["alone_us_all"])]
                assert x["extra_us"]["n"] == AR_ITERS
    assert FILL_WARM_ROUNDS >= 1


def test_default_run_is_none_and_compiled_with_p2p_on(tmp_path):
    from l2sched.bench.tp import arms, env_set
    o = {"validation": False, "schedule": "s.l2s", "overrides": ["policy=evict_normal"],
         "p2p": "on", "bench_dir": BENCH_DIR}
    assert arms(o) == [{"name": "none", "path": None, "overrides": []},
                       {"name": "compiled", "path": "s.l2s",
                        "overrides": ["policy=evict_normal"]}]
    assert "NCCL_P2P_DISABLE" not in env_set(o)
    assert env_set({**o, "p2p": "off"})["NCCL_P2P_DISABLE"] == "1"
    # --set applies to every arm of --schedule, not to the bench/ schedules
    v = arms({**o, "validation": True, "schedule": SCHEDULE,
              "arm_variants": validation_variants(SCHEDULE)})
    for a in v:
        if a["path"] == SCHEDULE:
            assert a["overrides"][0] == "policy=evict_normal"
        elif a["path"]:
            assert a["overrides"] == []
    assert [a["name"] for a in v] == _names()


def test_the_ranks_runtime_launches_the_profiles_fill_kernels():
    """``timed_runtime`` (the CudaRuntime of every arm on the GPU) takes each
    issue's kernel and launch shape from the device profile, as bench run's
    runtime and the lint; without a profile it would be bulk."""
    from l2sched.bench.tp_step import timed_runtime
    prof = load_device("h200")
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=1)
    plan = compile_plan(load_schedule(SCHEDULE, []), inv, 1)
    fm = prof.fill_modes[prof.fill_default]
    rt = timed_runtime(plan, 1, False, prof)      # no GPU touched before prepare()
    assert {(s.mode, s.grid, s.threads, s.chunk, s.stages, s.policy) for s in rt.specs} \
        == {(prof.fill_default, fm.grid, fm.threads, fm.chunk, fm.stages, "evict_last")}
    bulk = timed_runtime(plan, 1, False, prof, mode="bulk")   # a kernel-mode arm
    assert {s.mode for s in bulk.specs} == {"bulk"}
    assert {s.mode for s in timed_runtime(plan, 1, False).specs} == {"bulk"}
