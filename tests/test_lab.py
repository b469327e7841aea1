"""The lab (lab/README.md) from a checkout, on the CPU: one smoke test per
experiment family that no other test runs, so that a script the product/lab
split moved and no longer imports or runs is caught.

Here: ``python -m lab`` (``bench --help``; ``bench run --dry --validation``
in a subprocess from the repository root), ``bench_run_touch.py`` and
``bench_run_streams.py`` (``--dry``), ``model_recal.py`` (committed runs D1
and D2, cut), ``trace_compare.py`` (synthetic traces), every GPU-only
script's ``--help``, and every script's imports of ``l2sched``, ``lab`` and
its sibling modules (by name, without running it: ``l2_partition_probe.py``
needs cupy).

Covered elsewhere: ``bench report`` and ``bench kernel``'s option checks
(tests/test_bench_timing.py), ``bench report --controls`` and ``bench run
--dry --controls decoy`` (tests/test_controls.py), ``bench calibrate``
(tests/test_bench_calibrate.py), ``bench tp --dry --validation``
(tests/test_bench_tp_validation.py), ``bench tp`` / ``tp-report``
(tests/test_bench_tp.py, tests/test_bench_tp_report.py),
``agreement_ceiling.py`` (tests/test_agreement_ceiling.py),
``fill_wait_probe.py`` (tests/test_fill_wait_probe.py),
``ship_step_fill.py`` (tests/test_step_gaps.py), ``perop_gain.py``
(tests/test_lab_perop_gain.py), ``lab/engine_tp``
(tests/test_lab_engine_tp.py)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from extras import TORCH_MISSING

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "lab" / "experiments"
SCRIPTS = sorted(p.name for p in EXPERIMENTS.glob("*.py"))
#: sibling modules the scripts import by bare name (their folder on sys.path)
SIBLINGS = {p.removesuffix(".py") for p in SCRIPTS}
#: scripts that need a CUDA GPU to do anything: ``--help`` is what the CPU can run
GPU_ONLY = ["capture_deps_probe.py", "fill_limits_probe.py", "fill_op_probe.py", "graph_fork_probe.py",
            "kernel_bench.py", "kernel_probe.py", "kernel_probe_l2.py",
            "kernel_probe_tlb.py", "kernel_search.py", "translation_probe.py"]
#: imported at the top of a script: no --help without it
TOP_LEVEL_TORCH = {"capture_deps_probe.py", "fill_limits_probe.py", "graph_fork_probe.py", "kernel_bench.py",
                   "kernel_probe.py", "kernel_probe_l2.py", "kernel_probe_tlb.py",
                   "kernel_search.py", "translation_probe.py", "bench_run_streams.py"}


def _run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def test_every_experiment_is_in_the_readme():
    readme = (ROOT / "lab" / "README.md").read_text(encoding="utf-8")
    for name in SCRIPTS:
        assert f"`{name}`" in readme, name
    for cmd in ("run", "tp", "report", "tp-report", "calibrate", "kernel"):
        assert f"**`bench {cmd}`**" in readme, cmd


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_scripts_imports_of_l2sched_and_the_lab_resolve(script, monkeypatch):
    """Every ``from X import a, b`` / ``import X`` of ``l2sched``, ``lab`` or a
    sibling script, at the top or inside a function, names a module and
    attributes that exist (third-party modules: torch, cupy, triton, are
    left out; so no GPU or cupy is needed)."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    monkeypatch.syspath_prepend(str(ROOT))
    tree = ast.parse((EXPERIMENTS / script).read_text(encoding="utf-8"))
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mod, names = node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            mod, names = None, [a.name for a in node.names]
        else:
            continue
        for m, attrs in ([(mod, names)] if mod else [(n, []) for n in names]):
            top = m.split(".")[0]
            if top not in ("l2sched", "lab") and top not in SIBLINGS:
                continue
            if top in SIBLINGS and not _has_torch() and script != top + ".py" and \
                    top in {s.removesuffix(".py") for s in TOP_LEVEL_TORCH}:
                pytest.skip(TORCH_MISSING)
            try:
                module = importlib.import_module(m)
            except ModuleNotFoundError as e:
                if e.name and e.name.split(".")[0] in ("torch", "triton", "cupy"):
                    pytest.skip(f"{m} needs {e.name}")
                raise
            for a in attrs:
                assert hasattr(module, a) or importlib.util.find_spec(f"{m}.{a}"), \
                    f"{script}: from {m} import {a}: no such name"
            checked += 1
    assert checked or script == "fill_wait_probe.py", f"{script}: no l2sched/lab import seen"


def test_python_m_lab_from_a_checkout():
    p = _run("-m", "lab", "bench", "--help")
    assert p.returncode == 0, p.stderr
    for cmd in ("run", "tp", "report", "tp-report", "calibrate", "kernel"):
        assert cmd in p.stdout


def test_python_m_lab_bench_run_dry_validation(tmp_path):
    """``python -m lab bench run --dry --validation`` in a subprocess from the
    repository root: the A/A arm, each other fill kernel and each window alone."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    out = tmp_path / "v.json"
    p = _run("-m", "lab", "bench", "run", "--dry", "--validation", "--tokens", "1",
             "--replays", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    arms = [a["name"] for a in d["arms"]]
    assert d["dry"] is True and d["tokens"] == [1]
    assert {"none", "none-aa", "compiled", "kernel-load"} <= set(arms)
    assert any(a.startswith("only-") for a in arms)
    assert len(arms) == len(set(arms)), arms
    assert set(d["per_m"]["1"]["arms"]) == set(arms)


def test_bench_run_touch_writes_window_b_groups_and_a_touch_arm(tmp_path):
    """``bench_run_touch.py``: window B's three target groups as one-window
    schedules, run as ``--bench-dir`` arms beside a ``touch/`` arm (--dry)."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    groups, out = tmp_path / "b", tmp_path / "t.json"
    p = _run("lab/experiments/bench_run_touch.py", "--window-b-groups", str(groups),
             "--touch", str(groups / "B-router.l2s"), "--bench-dir", str(groups),
             "--dry", "--tokens", "1", "--replays", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in groups.iterdir()) == [
        "B-mhc-norms.l2s", "B-next-attn.l2s", "B-router.l2s"]
    arms = {a["name"]: a for a in json.loads(out.read_text())["arms"]}
    assert {"none", "bench/B-mhc-norms", "bench/B-next-attn", "bench/B-router",
            "touch/B-router"} <= set(arms)
    assert arms["touch/B-router"]["runtime"]["mode"] == "touch"
    bad = _run("lab/experiments/bench_run_touch.py", "--touch-chunk", "33", "--dry")
    assert bad.returncode == 2 and "--touch-chunk must be" in bad.stderr


def test_bench_run_streams_patches_the_step_and_runs_dry(tmp_path):
    """``bench_run_streams.py``: its patches of the bench step apply (a renamed
    ``StepRunner`` method fails here) and the rest goes to ``lab bench run``."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    out = tmp_path / "s.json"
    p = _run("lab/experiments/bench_run_streams.py", "--shared-experts-on-main",
             "--fills-on-aux", "--side-priority", "-1", "--dry", "--bench-dir", "",
             "--tokens", "1", "--replays", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr
    arms = [a["name"] for a in json.loads(out.read_text())["arms"]]
    assert arms[0] == "none" and "compiled" in arms
    assert not any(a.startswith("bench/") for a in arms)


def test_model_recal_scores_a_run_with_another_runs_controls(tmp_path):
    """``model_recal.py`` on the committed runs D2 (scored) and D1 (controls),
    cut to two M and a few arms (tests/test_controls.py's ``_cut``): every
    scored pair carries both gains; D1's controls move the predictions."""
    from test_controls import KEEP_ARMS, KEEP_M, _cut

    d1, d2 = _cut(tmp_path, "D1"), _cut(tmp_path, "D2")
    alone, with_ctl = tmp_path / "alone.json", tmp_path / "ctl.json"
    p = _run("lab/experiments/model_recal.py", d2, "--json", str(alone))
    assert p.returncode == 0, p.stderr
    q = _run("lab/experiments/model_recal.py", d2, "--controls", d1, "--json", str(with_ctl))
    assert q.returncode == 0, q.stderr
    rows = json.loads(alone.read_text())[d2]["rows"]
    ctl = json.loads(with_ctl.read_text())[d2]["rows"]
    scored = {a for a in KEEP_ARMS if a not in ("none", "none-aa")}
    assert {(r["arm"], r["M"]) for r in rows} == {(a, int(M)) for a in scored for M in KEEP_M}
    for r in rows:
        assert isinstance(r["meas_gain_us"], float) and isinstance(r["pred_gain_us"], float)
        assert r["agree"] == (r["pred_verdict"] == r["meas_verdict"])
    moved = {(r["arm"], r["M"]): r["pred_gain_us"] for r in ctl}
    assert any(abs(moved[(r["arm"], r["M"])] - r["pred_gain_us"]) > 1 for r in rows)
    bad = _run("lab/experiments/model_recal.py", str(tmp_path / "missing.json"))
    assert bad.returncode != 0 and "missing.json" in bad.stderr


def _trace(path: Path, events) -> str:
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "tid": tid, "ts": ts, "dur": dur, "name": name}
        for tid, ts, dur, name in events]}))
    return str(path)


def test_trace_compare_splits_an_arms_extra_time(tmp_path):
    """``trace_compare.py`` on two synthetic traces: 5 us more on the main
    stream, 3 in a gap and 2 inside a GEMM; the fill stream reported apart."""
    base = _trace(tmp_path / "base.json",
                  [(7, 0, 10, "gemm"), (7, 11, 2, "add"), (7, 14, 10, "gemm")])
    arm = _trace(tmp_path / "arm.json", [(7, 0, 10, "gemm"), (9, 10, 3, "fill"),
                                         (7, 15, 2, "add"), (7, 17, 12, "gemm")])
    out, md = tmp_path / "cmp.json", tmp_path / "cmp.md"
    p = _run("lab/experiments/trace_compare.py", base, arm, "--json-out", str(out),
             "--md-out", str(md))
    assert p.returncode == 0, p.stderr
    got = json.loads(out.read_text())
    assert got["compare"]["span_us"] == [24.0, 29.0]
    assert got["compare"]["gap_us"] == 3.0 and got["compare"]["kernel_us"] == 2.0
    assert got["other_streams"] == {"9": {"kernels": 1, "busy_us": 3.0, "names": ["fill"]}}
    assert "+3.0 us" in md.read_text() and "gemm" in md.read_text()
    bad = _run("lab/experiments/trace_compare.py", base, str(tmp_path / "nope.json"))
    assert bad.returncode == 1 and "nope.json" in bad.stderr


@pytest.mark.parametrize("script", GPU_ONLY)
def test_a_gpu_only_script_starts(script):
    """``--help`` of each GPU-only script: its imports and options load."""
    if script in TOP_LEVEL_TORCH:
        pytest.importorskip("torch", reason=TORCH_MISSING)
    p = _run(f"lab/experiments/{script}", "--help", timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:") and "--out" in p.stdout


def _launch_table(gain: dict, floor=10.0, ideal=None, tokens=("4", "16")) -> dict:
    """A ``capture_launches_table.gains`` table with the same gains at every M."""
    return {m: {"none_us": 1000.0, "floor_us": floor, "ideal_us": ideal, "arms": dict(gain)}
            for m in tokens}


def test_capture_launches_rule_1_picks_the_candidate_the_docs_define():
    """docs/runtime.md's rule 1: lone windows within -floor at every M and a
    whole schedule at least fork's minus the floor; the largest such wins;
    a run cut short (an M missing) is no candidate."""
    from lab.experiments.capture_launches_decide import decide_run1
    lone = lambda launch, g: {f"{w}-{launch}": g for w in ("A0.5", "B0.5", "C0.5")}  # noqa: E731
    t = _launch_table({**lone("fork", -150.0), "full-fork": 30.0,
                       **lone("leaf", -9.0), "full-leaf": 21.0,
                       **lone("deferred", -11.0), "full-deferred": 90.0,
                       **lone("leaf-deferred", 2.0), "full-leaf-deferred": 19.0})
    cand, misses = decide_run1(t)
    assert cand == "leaf" and misses["leaf"] == [] and misses["leaf-deferred"]
    assert any("B0.5 at M=4: -11.0" in x for x in misses["deferred"])
    assert any("full at M=16: +19.0 us < fork +30.0" in x for x in misses["leaf-deferred"])
    lo = _launch_table({**lone("fork", -150.0), "full-fork": 30.0,
                        **lone("launch-order", 0.0), "full-launch-order": 40.0})
    assert decide_run1(t, lo)[0] == "launch-order"  # each table against its own fork
    short = _launch_table({**lone("fork", -150.0), "full-fork": 30.0,
                           **lone("leaf", 0.0), "full-leaf": 40.0}, tokens=("4",))
    cand, misses = decide_run1(short)
    assert cand is None and "M=16 not run" in misses["leaf"]


def test_capture_launches_rule_2_changes_the_default_only_when_it_holds():
    from lab.experiments.capture_launches_decide import judge_run2
    lone = {f"{w}-leaf": -5.0 for w in ("A0.5", "B0.5", "C0.5")}
    a = _launch_table(lone)
    tok = ("1", "4", "16", "64")
    b = _launch_table({"cand": 200.0, "compiled": 190.0}, ideal=250.0, tokens=tok)
    default, lines = judge_run2("leaf", a, b)
    assert default and "missed" in lines[-1]  # 80% of ideal: the mark missed, default changes
    b = _launch_table({"cand": 240.0, "compiled": 190.0}, ideal=250.0, tokens=tok)
    assert judge_run2("leaf", a, b)[1][-1].endswith("met")
    b = _launch_table({"cand": 150.0, "compiled": 190.0}, ideal=250.0, tokens=tok)
    assert not judge_run2("leaf", a, b)[0]  # below fork - floor
    a_bad = _launch_table({**lone, "C0.5-leaf": -40.0})
    b = _launch_table({"cand": 240.0, "compiled": 190.0}, ideal=250.0, tokens=tok)
    default, lines = judge_run2("leaf", a_bad, b)
    assert not default and "C0.5 at M=4: -40.0" in lines[0]
    assert not judge_run2("leaf", a, _launch_table({"cand": 240.0, "compiled": 190.0},
                                                   ideal=250.0, tokens=("1", "4")))[0]


def test_capture_launches_decide_reads_a_bench_run_json(tmp_path, capsys):
    """The CLI takes ``bench run`` JSON as well as table JSON: gains from the
    untimed replays, the floor from ``none`` and ``none-aa``."""
    from lab.experiments.capture_launches_decide import main
    steps = lambda us: [us + 0.1 * (i % 3) for i in range(20)]  # noqa: E731
    arms = {"none": steps(1000.0), "none-aa": steps(1000.0), "full-fork": steps(970.0),
            "full-leaf": steps(960.0)}
    arms.update({f"{w}-{launch}": steps(1000.0 + loss) for w in ("A0.5", "B0.5", "C0.5")
                 for launch, loss in (("fork", 150.0), ("leaf", 1.0))})
    run = {"per_m": {m: {"arms": {k: {"graph_step_us_all": v} for k, v in arms.items()}}
                     for m in ("4", "16")}}
    path = tmp_path / "run1.json"
    path.write_text(json.dumps(run))
    assert main(["run1", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "candidate: leaf" and "leaf: candidate" in out


def test_trace_streams_counts_the_models_kernels_moved_to_the_fill_stream(tmp_path):
    """``trace_streams.py`` on synthetic traces: with ``fork`` one model kernel (a
    GEMM) runs on the fills' stream (off main 1, named); with ``deferred`` each fill
    has a stream of its own and every model kernel stays on the main stream."""
    model = [(7, 0, 10, "gemm"), (7, 11, 2, "add"), (7, 14, 10, "gemm"), (8, 1, 3, "shared")]
    base = _trace(tmp_path / "none.json", model)
    fork = _trace(tmp_path / "fork.json",
                  [e for e in model if e[1] != 14]
                  + [(9, 10, 1, "kernel_cutlass_fill_kernel_x"), (9, 14, 10, "gemm")])
    deferred = _trace(tmp_path / "deferred.json", model + [
        (10, 10, 1, "kernel_cutlass_fill_kernel_x"), (11, 12, 1, "kernel_cutlass_fill_kernel_x")])
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    p = _run("lab/experiments/trace_streams.py", base, fork, deferred, "--json-out", str(out),
             "--md-out", str(md))
    assert p.returncode == 0, p.stderr
    got = json.loads(out.read_text())["summary"]
    assert got[fork] == {"off_main": 1, "fill_streams": 1, "fills": 1,
                         "moved_names": {"gemm": 1}}
    assert got[deferred] == {"off_main": 0, "fill_streams": 2, "fills": 2, "moved_names": {}}
    assert "| fork.json | 2 | 1 | 1 | 1 | gemm x1 |" in md.read_text()
    bad = _run("lab/experiments/trace_streams.py", base, str(tmp_path / "nope.json"))
    assert bad.returncode == 1 and "nope.json" in bad.stderr


def test_capture_launches_session_without_replays_names_no_candidate(tmp_path):
    """``capture_launches_session.sh`` with ``RUN_ARGS=--dry`` (no graph replays, so
    no gain table): run 1's verdict is "candidate: none (run 1 wrote no table)" and
    run 2 does not start (session 19's dry run started it); everything is in one
    archive. With ``CANDIDATE=NAME`` run 1 is skipped and run 2 runs for NAME."""
    if not _has_torch():
        pytest.skip(TORCH_MISSING)
    import os
    import tarfile
    env = dict(os.environ, RUN_ARGS="--dry", DEADLINE_S="300",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = tmp_path / "out"
    p = subprocess.run(["bash", "lab/experiments/capture_launches_session.sh"], cwd=ROOT,
                       env=dict(env, OUT=str(out)), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    verdict = (out / "verdict.txt").read_text()
    assert verdict.rstrip().endswith("candidate: none (run 1 wrote no table)"), verdict
    assert "run2" not in verdict
    with tarfile.open(out / "issue36.tgz") as t:
        names = {Path(n).name for n in t.getnames()}
    assert {"run1.json.gz", "run1lo.json.gz", "captest.txt"} <= names, names
    given = tmp_path / "given"
    p = subprocess.run(["bash", "lab/experiments/capture_launches_session.sh"], cwd=ROOT,
                       env=dict(env, OUT=str(given), CANDIDATE="deferred"),
                       capture_output=True, text=True, timeout=300)
    verdict = (given / "verdict.txt").read_text()
    assert "candidate: deferred (given: run 1 skipped)" in verdict and "run1 " not in verdict
    assert "run2a rc=0" in verdict and "run2b rc=0" in verdict, verdict


def test_capture_launches_table_names_a_bad_run_file(tmp_path, capsys):
    """``capture_launches_table.py``: a file that is not JSON (line and column), a
    missing one, and a run without graph step times (a ``--dry`` run) exit 2 with
    the file's name, no traceback."""
    from lab.experiments.capture_launches_table import main
    bad = tmp_path / "bad.json"
    bad.write_text('{"per_m": \n')
    dry = tmp_path / "dry.json"
    dry.write_text(json.dumps({"per_m": {"4": {"arms": {"none": {"ops": {}}}}}}))
    for path, msg in ((bad, "line 2 column 1"), (tmp_path / "nope.json", "No such file"),
                      (dry, "no untimed graph step times of arm 'none' at M=4")):
        with pytest.raises(SystemExit) as e:
            main([str(path)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{path}: ") and msg in err, err
