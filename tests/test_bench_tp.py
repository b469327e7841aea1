"""``l2sched bench tp`` on the CPU: 2 spawned ranks, gloo, meta tree, dry-run runtime.

The multi-process path CI can run: each rank's fill order equals
``explain_step`` of its own compiled plan, every all-reduce really sums over
both ranks, the side stream joins once per forward, rank 0 writes one JSON
with both ranks' records.
"""

import json

import pytest
from extras import TORCH_MISSING

torch = pytest.importorskip("torch", reason=TORCH_MISSING)

from l2sched.bench.run import SCHEDULE
from l2sched.cli import main
from l2sched.compiler.compile import compile_plan
from l2sched.lang.resolve import load_schedule
from l2sched.model.adapters import glm5next as ad
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory
from l2sched.runtime.dry_run import explain_step
from l2sched.runtime.gate import StepInfo
from lab import main as lab_main

TOKENS = (1, 2)
REPLAYS, WARMUP = 2, 1


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp") / "tp.json"
    rc = main(["bench", "tp", "--dry", "--world-size", "2", "--tokens", ",".join(map(str, TOKENS)),
               "--replays", str(REPLAYS), "--warmup", str(WARMUP), "--ar-iters", "2",
               "--ar-extra-tokens", "16", "--out", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


def _collectives_per_step(inv):
    n = len(inv.layers)
    return sum(1 for i, kind in enumerate(inv.kinds) for op in ad.decode_timeline(kind)
               if op.cls == "collective"
               and ad.condition_holds(op.condition, i, n, inv.tp, inv.ep))


def test_rank0_wrote_both_ranks(result):
    assert result["kind"] == "l2sched bench tp"
    assert result["world_size"] == 2 and result["tp"] == 4 and result["backend"] == "gloo"
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert result["p2p"] == "on" and "NCCL_P2P_DISABLE" not in result["env_set"]
    assert [a["name"] for a in result["arms"]] == ["none", "compiled"]
    assert [r["tp_rank"] for r in result["ranks"]] == [0, 1]
    for r in result["ranks"]:
        assert sorted(r["per_m"]) == sorted(map(str, TOKENS))
        assert [a["bytes"] for a in r["allreduce"]] == sorted(
            t * 4096 * 2 for t in TOKENS + (16,))


def test_issue_log_is_explain_step_of_the_ranks_plan(result):
    cfg = load_model_config(None)
    sched = load_schedule(SCHEDULE, [])
    for r in result["ranks"]:
        inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=r["tp_rank"])
        plan = compile_plan(sched, inv, r["tp_rank"])
        assert r["plan"]["issues"] == len(plan.issues) > 0
        for M in TOKENS:
            want = [e.__dict__ for e in explain_step(
                plan, StepInfo(num_tokens=M, graph_mode="full"))]
            got = r["per_m"][str(M)]["arms"]["compiled"]["issue_log"]
            assert got == want
            assert sum(e["op"] == "launch" for e in got) == len(plan.issues)


def test_allreduces_summed_across_ranks(result):
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    calls = _collectives_per_step(inv)
    assert calls > 0
    for r in result["ranks"]:
        for M in TOKENS:
            for arm in ("none", "compiled"):
                c = r["per_m"][str(M)]["arms"][arm]["allreduce_check"]
                # every rank filled rank + 1: the sum over 2 ranks is 3
                assert c["expected_sum"] == 3
                assert c["calls"] == calls and c["passed"] == calls


def test_join_once_per_forward(result):
    for r in result["ranks"]:
        for M in TOKENS:
            arms = r["per_m"][str(M)]["arms"]
            assert arms["compiled"]["allreduce_check"]["joins"] == 1
            assert arms["compiled"]["joins_per_forward"] == [1] * (REPLAYS + WARMUP)
            assert arms["none"]["allreduce_check"]["joins"] == 0
            assert arms["compiled"]["graph_step_us"]["n"] == REPLAYS
            assert arms["compiled"]["runtime_stats"]["skipped"] == {}


def test_report_renders(result, tmp_path):
    from l2sched.profile.collective_terms import update_profile
    from lab.bench.tp_report import markdown
    text = markdown(result, lint=False)
    assert "passed on every rank, M and arm" in text
    assert "| 2 | 1 |" in text          # M=2, rank 1 row
    with pytest.raises(ValueError, match="CPU"):
        update_profile(result, "x.json", str(tmp_path / "never.toml"))


@pytest.mark.parametrize("argv", [["--dry", "--world-size", "1"],
                                  ["--dry", "--backend", "nccl"],
                                  ["--dry", "--world-size", "8"]])
def test_bad_options_are_usage_errors(argv, capsys):
    assert main(["bench", "tp", *argv, "--tokens", "1"]) == 2
    assert "l2sched bench tp:" in capsys.readouterr().err


def test_results_of_runs_over_different_tokens_merge(result):
    import copy

    from lab.bench.tp_report import markdown, merge
    a, b = copy.deepcopy(result), copy.deepcopy(result)
    for r in a["ranks"]:  # a: M=1 only; b: M=2 only, with an extra all-reduce size
        del r["per_m"]["2"]
    a["tokens"] = [1]
    for r in b["ranks"]:
        del r["per_m"]["1"]
        extra = dict(r["allreduce"][-1], bytes=10**9, tokens=-1)
        r["allreduce"].append(extra)
    b["tokens"] = [2]
    m = merge([b, a])
    assert m["tokens"] == [1, 2]
    for r, orig in zip(m["ranks"], result["ranks"]):
        assert list(r["per_m"]) == ["1", "2"]
        assert r["per_m"] == orig["per_m"]
        assert [x["bytes"] for x in r["allreduce"]] == \
            sorted({x["bytes"] for x in orig["allreduce"]} | {10**9})
    assert "Merged from 2 runs" in m["note"]
    text = markdown(m, lint=False, caveats=("only two ranks",))
    assert "- only two ranks" in text and "| 2 | 1 |" in text
    with pytest.raises(ValueError, match="M=1"):
        merge([a, a])
    c = copy.deepcopy(b)
    c["world_size"] = 4
    with pytest.raises(ValueError, match="world_size"):
        merge([a, c])


# -------------------------------------------------------------------------
# input handling of the bench commands (no torch needed, no tracebacks)


def _bench(tmp_path, *argv, no_torch=False, lab=False):
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parent.parent)
    code = ("import sys\n"
            + ("sys.modules['torch'] = None\n" if no_torch else "")
            + (f"sys.path.insert(0, {root!r})\nfrom lab import main\n" if lab
               else "from l2sched.cli import main\n")
            + "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", code, "bench", *argv],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "Traceback" not in r.stderr
    return r.returncode, r.stderr


NEEDS_TORCH = ("needs torch: pip install 'l2sched[vllm]' (in a checkout: pip install -e "
               "'.[vllm]') or a torch wheel\n")


@pytest.mark.parametrize("argv, code, err", [
    (["tp", "--dry", "--world-size", "2", "--tokens", "1"], 2,
     "l2sched bench tp: error: " + NEEDS_TORCH),
    (["run", "--dry", "--tokens", "1"], 2, "l2sched bench run: error: " + NEEDS_TORCH),
    (["tp", "--dry", "--world-size", "1"], 2,
     "l2sched bench tp: error: --world-size must be >= 2, got 1\n"),
    (["tp", "--dry", "--tokens", "0"], 2,
     "l2sched bench tp: error: --tokens must be at least 1, got 0\n"),
    (["run", "--dry", "--tokens", "4,0"], 2,
     # one bound for every M read (cli.options.check_token_counts), the option as written
     "l2sched bench run: error: --tokens must be at least 1, got 4,0\n"),
])
def test_bench_without_torch_or_with_bad_options(tmp_path, argv, code, err):
    assert _bench(tmp_path, *argv, no_torch=True) == (code, err)


@pytest.mark.parametrize("cmd", ["tp-report", "report"])
def test_bench_reports_of_bad_files_are_one_line(tmp_path, cmd):
    extra = ["--json-out", "o.json", "--md-out", "o.md"] if cmd == "report" else []
    (tmp_path / "bin.json").write_bytes(b"\x80\x81 not text")
    (tmp_path / "text.json").write_text("not json\n")
    (tmp_path / "list.json").write_text("[1]\n")
    what = "`l2sched bench tp` result" if cmd == "tp-report" else \
        "`l2sched bench run` result"
    for name, message in [
            ("/nonexistent.json", "/nonexistent.json: no such result file"),
            ("bin.json", "bin.json: not valid UTF-8 (byte 0x80 at offset 0)"),
            ("text.json", "text.json: not valid JSON: Expecting value: line 1 "
                          "column 1 (char 0)"),
            ("list.json", f"list.json: not a {what}")]:
        assert _bench(tmp_path, cmd, name, *extra, lab=True) == \
            (1, f"python -m lab bench {cmd}: {message}\n")


def test_tp_report_never_overwrites_its_input_and_names_broken_results(result, tmp_path,
                                                                      capsys):
    src = tmp_path / "tp.json"
    src.write_text(json.dumps(result))
    before = src.read_text()
    assert lab_main(["bench", "tp-report", "--no-lint", str(src), "--md-out", str(src)]) == 1
    assert src.read_text() == before
    assert "refusing to overwrite the input file" in capsys.readouterr().err
    bad = dict(result)
    del bad["ranks"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(bad))
    assert lab_main(["bench", "tp-report", "--no-lint", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "not a usable `l2sched bench tp` result (KeyError: 'ranks')" in err
    assert lab_main(["bench", "tp-report", "--no-lint", str(src), str(src)]) == 1
    assert "measured in two runs" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--set", "window.Z.budget=1MB"], "unknown window 'Z'"),
    (["--device-profile", "nosuch"], "unknown device profile 'nosuch'"),
    (["--tp", "3"], "not divisible by the TP size 3"),
])
def test_bad_schedule_or_profile_fails_before_spawning(extra, message, capsys):
    assert main(["bench", "tp", "--dry", "--world-size", "2", "--tokens", "1"] + extra) == 1
    err = capsys.readouterr().err
    assert err.startswith("l2sched bench tp: ") and message in err
    assert "Traceback" not in err and "ProcessExited" not in err
