"""``l2sched verify`` on a CPU: its statistics, the interleaving of the
arms, the report files, and the command's refusals before any engine
starts. The engine itself (vLLM's ``LLM`` with the switch worker extension)
runs on the GPU: benchmarks/verify_gpu.sh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from l2sched.cli.main import main
from l2sched.vllm import verify as V


def test_spread_noise_and_verdict():
    assert V.spread([]) == {"median": None, "p10": None, "p90": None}
    assert V.spread([3.0, 1.0]) == {"median": 2.0, "p10": 1.0, "p90": 3.0}
    s = V.spread(range(1, 12))  # 1..11
    assert s["median"] == 6 and s["p10"] == pytest.approx(2.0) and s["p90"] == pytest.approx(10.0)
    assert V.noise_us([-4.0, 1.0, 2.0]) == pytest.approx(3.0)  # p10 -3, p90 1.8
    assert V.noise_us([]) is None
    assert V.verdict(5.0, 4.0) == "faster"
    assert V.verdict(-5.0, 4.0) == "slower"
    assert V.verdict(3.9, 4.0) == "same" and V.verdict(None, 1.0) == "same"
    assert V.step_us(2.0, 0.5, 64, 16) == pytest.approx(31250.0)
    with pytest.raises(ValueError):
        V.step_us(1.0, 1.0, 8, 8)


class ScriptedEngine:
    """An engine whose decode step is ``base_us`` with prefetch off and
    ``base_us - gain_us`` on, plus an alternating jitter of ``jitter_us``
    per call; records every call (the protocol ``verify.Engine``)."""

    def __init__(self, base_us=1000.0, gain_us=30.0, jitter_us=2.0, flip_tokens=False):
        self.base, self.gain, self.jitter = base_us, gain_us, jitter_us
        self.on = True
        self.calls = []
        self.flip = flip_tokens
        self._n = 0

    def switch(self, on):
        self.on = on
        self.calls.append(("switch", on))

    def generate(self, batch, max_tokens):
        self._n += 1
        step = self.base - (self.gain if self.on else 0.0) + \
            (self.jitter if self._n % 2 else -self.jitter)
        self.calls.append(("gen", batch, max_tokens, self.on))
        toks = [[7 + (1 if self.flip and self.on else 0)] * max_tokens] * batch
        return (5000.0 + step * max_tokens) * 1e-6, toks


def test_measure_interleaves_arms_and_finds_the_gain():
    eng = ScriptedEngine(gain_us=30.0, jitter_us=2.0)
    res = V.measure(eng, [1, 4], output_len=64, rounds=4, warmup=1)
    assert [r.batch for r in res] == [1, 4]
    switches = [c[1] for c in eng.calls if c[0] == "switch"]
    assert len(switches) == 2 * 5 * 3  # batches x (warm-up + rounds) x arms
    # rotated order: every arm leads one round of three
    firsts = [switches[i] for i in range(0, 15, 3)]
    assert firsts[:3] == [True, False, False]
    for r in res:
        s = r.summary()
        assert s["rounds"] == 4 and s["tokens_equal"]
        assert s["gain_us"]["median"] == pytest.approx(30.0, abs=5.0)
        assert s["noise_us"] < 10.0
        assert s["verdict"] == "faster"


def test_measure_says_slower_and_flags_token_differences():
    eng = ScriptedEngine(gain_us=-40.0, jitter_us=1.0, flip_tokens=True)
    (r,) = V.measure(eng, [16], output_len=16, rounds=3, warmup=0)
    s = r.summary()
    assert s["verdict"] == "slower" and not s["tokens_equal"]
    with pytest.raises(ValueError):
        V.measure(eng, [1], output_len=1, rounds=1)


def test_report_files_are_written_together(tmp_path):
    eng = ScriptedEngine()
    res = V.measure(eng, [1], output_len=32, rounds=3, warmup=0)
    res[0].predicted_gain_us = 12.5
    rep = V.Report("l2sched verify m --schedule s.l2s", {"tp": 1},
                   [{"installed": 1, "on": 1, "refused": 0, "schedules": ["s"]}],
                   [r.summary() for r in res])
    md = V.write_report(rep, tmp_path / "v.json")
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["batches"][0]["predicted_gain_us"] == 12.5
    text = md.read_text()
    assert "| 1 |" in text and "12.5" in text and "faster" in text


def test_cli_refuses_before_starting_an_engine(tmp_path, capsys):
    assert main(["verify", str(tmp_path), "--schedule", "x.l2s"]) == 2
    assert "no config.json" in capsys.readouterr().err
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["Glm5NextForCausalLM"]}))
    assert main(["verify", str(tmp_path), "--schedule", "x.l2s",
                 "--tokens", "0,4"]) == 2
    assert "--tokens takes distinct positive integers" in capsys.readouterr().err
    assert main(["verify", str(tmp_path), "--schedule", "x.l2s",
                 "--batch-size", "4,4"]) == 2
    assert main(["verify", str(cfg), "--schedule", "x.l2s", "--timing", "generate",
                 "--output-len", "4"]) == 2
    assert main(["verify", str(cfg), "--schedule", "x.l2s",
                 "--engine-arg", "noequals"]) == 2
    assert "--engine-arg takes KEY=JSON" in capsys.readouterr().err


def test_cli_bad_schedule_is_an_input_error_naming_the_file(tmp_path, capsys):
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    missing = tmp_path / "nope.l2s"
    assert main(["verify", str(tmp_path), "--schedule", str(missing),
                 "--output-json", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert "nope.l2s" in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("extra, words", [
    (["--num-iters", "0"], "--num-iters must be at least 1, got 0"),
    (["--replays", "0"], "--replays must be at least 1, got 0"),
    (["--tp", "0"], "--tp must be at least 1, got 0"),
    (["--input-len", "0"], "--input-len must be at least 1"),
    (["--engine-arg", "tensor_parallel_size=2"], "set by verify itself"),
    (["--engine-arg", "compilation_config={bad"], "the value is not JSON"),
    (["--output", "/dev/null"], "--output: a .json file path"),
    (["--output-json", "report.md"], "--output: a .json file path"),
    (["--schedule", "auto", "--set", "window.B.budget=1MB"], "not with --schedule auto"),
])
def test_cli_usage_errors_name_the_option(tmp_path, capsys, extra, words):
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    args = ["verify", str(tmp_path), "--schedule", "schedules/glm53-flash-h200-tp4.l2s"]
    assert main(args + extra) == 2
    assert words in capsys.readouterr().err


def test_cli_checks_the_markdown_path_and_the_model_config_up_front(tmp_path, capsys):
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    (tmp_path / "v.md").mkdir()
    args = ["verify", str(tmp_path), "--schedule", "schedules/glm53-flash-h200-tp4.l2s"]
    assert main(args + ["--output-json", str(tmp_path / "v.json")]) == 1
    assert "v.md:1:1: cannot write: is a directory" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    assert main(["verify", str(bad), "--schedule", "x.l2s",
                 "--output-json", str(tmp_path / "r.json")]) == 1
    assert "config.json:1:2" in capsys.readouterr().err
    assert main(args + ["--device", "nodev", "--output-json", str(tmp_path / "r.json")]) == 1
    assert "nodev" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_switch_words_are_strict():
    from l2sched.vllm.switch import PrefetchSwitchExtension, switch_value

    assert switch_value("OFF") is False and switch_value(" on ") is True
    assert switch_value(True) is True
    for bad in ("maybe", None, 2, 0):
        with pytest.raises(ValueError):
            switch_value(bad)
    assert PrefetchSwitchExtension().l2sched_set_prefetch("off")["installed"] == 0


def test_a_measurement_switch_without_an_installed_schedule_raises():
    """``set_prefetch_or_raise``: the replay A/B and the traced replays never
    time a switch that did not happen."""
    from l2sched.vllm.switch import set_prefetch_or_raise

    with pytest.raises(RuntimeError, match="no installed schedule to switch"):
        set_prefetch_or_raise(True)


# --------------------------------------------------------------------------
# --timing replay and the plugin's verify option (l2sched.vllm.replay,
# verify_startup): the statistics and the graph lookup on a CPU; the replays
# themselves run on the GPU (benchmarks/verify_gpu.py)


class ReplayScripted(ScriptedEngine):
    """``ScriptedEngine`` that also answers ``replay_ab``: ``base - gain``
    on, ``base`` off, the A/A pair ``jitter`` apart."""

    def replay_ab(self, batch, rounds, warmup, replays):
        self.calls.append(("replay_ab", batch, rounds, warmup, replays))
        base = self.base + batch
        return {"on": [base - self.gain] * rounds, "off": [base + self.jitter] * rounds,
                "off2": [base - self.jitter] * rounds}


def test_measure_replays_checks_tokens_per_arm_and_times_by_replay():
    eng = ReplayScripted(gain_us=20.0, jitter_us=1.0)
    res = V.measure_replays(eng, [1, 16], output_len=8, rounds=4, warmup=1, replays=7)
    assert [c for c in eng.calls if c[0] == "replay_ab"] == [
        ("replay_ab", 1, 4, 1, 7), ("replay_ab", 16, 4, 1, 7)]
    gens = [c for c in eng.calls if c[0] == "gen"]
    assert [g[3] for g in gens] == [True, False, False] * 2  # on, off, off2 per batch
    s = res[1].summary()
    assert s["on_us"]["median"] == 1016 - 20 and s["gain_us"]["median"] == 21.0
    assert s["noise_us"] == 2.0 and s["verdict"] == "faster" and s["tokens_equal"]
    flip = ReplayScripted(gain_us=-5.0, jitter_us=1.0, flip_tokens=True)
    (r,) = V.measure_replays(flip, [4], output_len=8, rounds=2)
    assert not r.tokens_equal and r.summary()["verdict"] == "slower"
    with pytest.raises(ValueError):
        V.measure_replays(eng, [1], output_len=8, rounds=1, replays=0)


def test_from_rounds_and_rotation():
    assert V.rotation(0) == ("on", "off", "off2")
    assert V.rotation(4) == ("off", "off2", "on")
    r = V.from_rounds(2, {"on": [9, 8], "off": [10, 10], "off2": [11, 10]})
    assert r.gains_us == [1.0, 2.0] and r.aa_us == [-1.0, 0.0]
    with pytest.raises(ValueError, match="one value per round"):
        V.from_rounds(2, {"on": [9], "off": [10, 10], "off2": [11, 10]})
    with pytest.raises(ValueError):
        V.from_rounds(2, {"on": [9], "off": [10]})


def test_worst_of_ranks_takes_the_slowest_rank_per_round():
    from l2sched.vllm.replay import worst_of_ranks

    a = {"4": {"on": [10, 12], "off": [20, 20], "off2": [20, 21]}}
    b = {4: {"on": [11, 11], "off": [19, 22], "off2": [20, 20]}}
    assert worst_of_ranks([a, b]) == {4: {"on": [11, 12], "off": [20, 22],
                                          "off2": [20, 21]}}
    with pytest.raises(ValueError, match="different rounds"):
        worst_of_ranks([a, {4: {"on": [1], "off": [1], "off2": [1]}}])
    with pytest.raises(ValueError):
        worst_of_ranks([])


class _Graph:
    def __init__(self, n):
        self.n = n

    def replay(self):
        pass


def test_full_decode_graphs_of_both_model_runners():
    """vLLM 0.33.0's real descriptor classes: the V2 runner's
    ``cudagraph_manager.graphs`` (FULL, one token per request, no LoRA, one
    micro-batch) and V1's FULL ``CUDAGraphWrapper`` entries (uniform, no
    LoRA); anything else is left out, and a runner without graphs gives
    nothing."""
    pytest.importorskip("vllm", reason="needs the vllm extra: pip install -e '.[vllm]'")
    import types

    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor as D

    from l2sched.vllm.replay import ReplayUnavailable, full_decode_graphs, graphs_for

    full = CUDAGraphMode.FULL
    graphs = {D(full, 1, 1, 1): _Graph(1), D(full, 4, 4, 1): _Graph(4),
              D(full, 8, 2, 4): _Graph(8),  # spec-decode shape: 4 tokens a request
              D(full, 16, 16, 1, num_active_loras=1): _Graph(16),
              D(full, 32, 32, 1, num_ubatches=2): _Graph(32),
              D(CUDAGraphMode.PIECEWISE, 64, None): _Graph(64)}
    v2 = types.SimpleNamespace(cudagraph_manager=types.SimpleNamespace(graphs=graphs))
    assert sorted(full_decode_graphs(v2)) == [1, 4]
    entries = {BatchDescriptor(2, 2, uniform=True): types.SimpleNamespace(cudagraph=_Graph(2)),
               BatchDescriptor(3, 3, uniform=False): types.SimpleNamespace(cudagraph=_Graph(3)),
               BatchDescriptor(5, 5, uniform=True): types.SimpleNamespace(cudagraph=None)}
    v1 = types.SimpleNamespace(model=types.SimpleNamespace(
        concrete_cudagraph_entries=entries, runtime_mode=full))
    assert sorted(full_decode_graphs(v1)) == [2]
    assert full_decode_graphs(types.SimpleNamespace()) == {}
    with pytest.raises(ReplayUnavailable, match="batch size 2, 16; captured: 1, 4"):
        graphs_for(v2, [1, 2, 16])


def test_replay_ab_rotates_arms_and_switches_before_each():
    import collections
    import types

    from l2sched.vllm.replay import ReplayUnavailable, replay_ab

    desc = collections.namedtuple("Desc", "cg_mode num_tokens num_reqs")
    graphs = {desc("FULL", n, n): _Graph(n) for n in (1, 4)}
    runner = types.SimpleNamespace(cudagraph_manager=types.SimpleNamespace(graphs=graphs))
    state, log = {"on": None}, []

    def switch(on):
        state["on"] = on
        log.append(on)

    def timer(graph, replays):
        return 100.0 * graph.n - (10.0 if state["on"] else 0.0) + replays

    got = replay_ab(runner, [4, 1], rounds=2, warmup=1, replays=3, switch=switch,
                    timer=timer)
    assert list(got) == [4, 1]
    assert got[4] == {"on": [393.0, 393.0], "off": [403.0, 403.0], "off2": [403.0, 403.0]}
    assert log[:9] == [True, False, False, False, False, True, False, True, False]
    with pytest.raises(ReplayUnavailable):
        replay_ab(runner, [2], rounds=1, warmup=0, replays=1, switch=switch, timer=timer)
    with pytest.raises(ValueError):
        replay_ab(runner, [1], rounds=0, warmup=0, replays=1, switch=switch, timer=timer)


def test_startup_batches_and_decision():
    from l2sched.vllm.verify_startup import decide, startup_batches

    vllm_default = [1, 2, 4] + list(range(8, 256 + 1, 8)) + list(range(272, 513, 16))
    assert startup_batches(vllm_default, 256) == [1, 8, 40, 256]
    assert startup_batches(vllm_default, 64) == [1, 4, 16, 64]
    assert startup_batches([1, 2, 4], 256) == [1, 2, 4]
    assert startup_batches([8, 16], 4) == []
    faster = {"on": [90, 91, 90], "off": [100, 101, 100], "off2": [100, 100, 101]}
    same = {"on": [100, 99, 101], "off": [100, 101, 100], "off2": [101, 100, 99]}
    slower = {"on": [110, 111, 110], "off": [100, 101, 100], "off2": [100, 100, 101]}
    assert decide({1: faster, 4: same}) == (
        True, "M=1 +10.0 us (noise 0.8) faster, M=4 +0.0 us (noise 1.0) same")
    on, text = decide({1: faster, 4: slower})
    assert not on and "M=4 -10.0 us (noise 0.8) slower" in text
    assert decide({1: same, "4": same})[0] is False


# --------------------------------------------------------------------------
# a new user's attack on verify and the start-up A/B (odd input)


@pytest.mark.parametrize("extra, words", [
    (["--schedule", " "], "--schedule: empty"),
    (["--timing", "generate", "--replays", "5"], "--replays: only with --timing replay"),
    (["--timing", "generate", "--output-len", "7"],
     "--output-len must be at least 8 (with --timing generate"),
    (["--output-len", "0"], "--output-len must be at least 1, got 0"),
    (["--engine-arg", "max_num_seqs=4", "--engine-arg", "max_num_seqs =8"],
     "--engine-arg max_num_seqs: given twice"),
])
def test_cli_odd_combinations_are_usage_errors(tmp_path, capsys, extra, words):
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    args = ["verify", str(tmp_path), "--schedule", "schedules/glm53-flash-h200-tp4.l2s",
            "--output-json", str(tmp_path / "r.json")]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "r.json").exists()


def test_cli_replay_takes_a_short_token_check_and_names_a_config_directory(
        tmp_path, capsys, monkeypatch):
    """``--output-len`` below 8 is only refused with ``--timing generate``
    (the replay timing's token check needs one token): the command gets as
    far as the GPU count; a ``config.json`` that is a directory is named."""
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    pytest.importorskip("vllm", reason="needs the vllm extra: pip install -e '.[vllm]'")
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    args = ["verify", str(tmp_path), "--schedule", "schedules/glm53-flash-h200-tp4.l2s",
            "--tp", "1", "--output-len", "1", "--output-json", str(tmp_path / "r.json")]
    assert main(args) == 2
    assert "needs 1 CUDA GPU; this machine has 0" in capsys.readouterr().err
    (tmp_path / "m" / "config.json").mkdir(parents=True)
    assert main(["verify", str(tmp_path / "m"), "--schedule", "auto"]) == 2
    assert "config.json is a directory" in capsys.readouterr().err


def test_worst_of_ranks_refuses_answers_that_do_not_match():
    from l2sched.vllm.replay import worst_of_ranks

    a = {4: {"on": [10, 12], "off": [20, 20], "off2": [20, 21]}}
    for answers, words in [
        ([a, {4: a[4], 8: a[4]}], "different batch sizes: rank 0 [4], rank 1 [4, 8]"),
        ([{}, a], "different batch sizes"),
        ([a, None], "rank 1 answered NoneType"),
        ([{"x": a[4]}], "batch size 'x' is not a whole number"),
        ([{4: a[4], "4": a[4]}], "batch size 4 answered twice"),
        ([{4: {"on": [1], "off": [1]}}], "need on, off, off2"),
        ([a, {4: dict(a[4], on=[float("nan"), 1])}], "rank 1: batch 4 on: nan is not"),
        ([a, {4: dict(a[4], off=[None, 1])}], "rank 1: batch 4 off: None is not"),
    ]:
        with pytest.raises(ValueError, match=words.replace("[", r"\[")):
            worst_of_ranks(answers)


def test_switch_extension_outside_a_worker_says_so():
    from l2sched.vllm.switch import PrefetchSwitchExtension

    ext = PrefetchSwitchExtension()
    with pytest.raises(RuntimeError, match="l2sched_replay_ab: no vLLM worker here"):
        ext.l2sched_replay_ab([1], 2, 1, 10)
    with pytest.raises(RuntimeError, match="l2sched_time_replays: no vLLM worker here"):
        ext.l2sched_time_replays([1], 10)
    ext.model_runner = object()
    with pytest.raises(ValueError, match="replays must be at least 1"):
        ext.l2sched_time_replays([1], 0)


def test_startup_batches_and_decide_with_odd_input():
    from l2sched.vllm.verify_startup import decide, startup_batches

    assert startup_batches([], 256) == [] and startup_batches([0, 0], 256) == []
    assert startup_batches([64, 1, 1, 8, 512, 2], 256) == [1, 2, 8, 64]
    assert startup_batches([1, 2, 4], 256, count=1) == [1]
    assert startup_batches([1, 2, 4], 256, count=0) == []
    assert decide({}) == (False, "no batch size measured")
    assert decide({1: {"on": [], "off": [], "off2": []}}) == (
        False, "M=1 n/a us (noise n/a) same")
    nan = float("nan")
    assert decide({1: {"on": [90.0] * 3, "off": [100.0] * 3, "off2": [nan] * 3}})[0] is False
    with pytest.raises(ValueError, match="one value per round"):
        decide({1: {"on": [90], "off": [100, 100], "off2": [100, 100]}})


def test_engine_names_the_batch_sizes_a_worker_has_no_decode_graph_for():
    """``l2sched verify --timing replay`` asks every worker for its captured
    FULL decode graph sizes before measuring anything (so an earlier size's
    measurement is not thrown away when a later one has no graph)."""
    from l2sched.vllm.verify_engine import SwitchFailed, VllmEngine

    class LLM:
        def __init__(self, answers):
            self.answers = answers

        def collective_rpc(self, method, args=()):
            assert method == "l2sched_decode_graph_sizes" and args == ()
            if isinstance(self.answers, Exception):
                raise self.answers
            return self.answers

    ok = VllmEngine(LLM([[1, 2, 4], [1, 2, 4]]), None, 8, 1000)
    assert ok.missing_graphs([1, 4]) == ""
    one = VllmEngine(LLM([[1, 2, 4], [1, 2]]), None, 8, 1000)
    assert one.missing_graphs([1, 4, 16]) == (
        "worker 0 has no FULL decode CUDA graph for batch size 16 (captured: 1, 2, 4)")
    eager = VllmEngine(LLM([[]]), None, 8, 1000)
    assert "captured: none: enforce_eager" in eager.missing_graphs([1])
    with pytest.raises(SwitchFailed, match="listing the decode graphs failed: OSError"):
        VllmEngine(LLM(OSError("gone")), None, 8, 1000).missing_graphs([1])


@pytest.mark.parametrize("text", ["1_0", "1,٤", "4, 16_0"])
def test_batch_sizes_take_plain_digits(tmp_path, capsys, text):
    """``int()`` reads '1_0' as 10 and Arabic-Indic digits; the CLI's number
    lists (``cli.options.numbers``) do not."""
    from l2sched.model.config import default_config

    (tmp_path / "config.json").write_text(json.dumps(default_config()))
    assert main(["verify", str(tmp_path), "--schedule", "schedules/glm53-flash-h200-tp4.l2s",
                 "--tokens", text]) == 2
    assert "--tokens takes comma-separated numbers" in capsys.readouterr().err


def test_issue36_capture_launch_reaches_the_plugin_section(tmp_path, capsys):
    """``--capture-launch`` becomes the plugin's ``capture_launch`` in the
    engine's ``additional_config``; without it the section has none (the
    runtime's default); an unknown choice is a usage error naming them."""
    import argparse

    from l2sched.cli.verify import _plugin_section
    base = dict(schedule="auto", device=None, capture_launch=None)
    assert "capture_launch" not in _plugin_section(argparse.Namespace(**base))
    got = _plugin_section(argparse.Namespace(**{**base, "capture_launch": "leaf"}))
    assert got == {"schedule": "auto", "on_predicted_loss": "warn", "capture_launch": "leaf"}
    with pytest.raises(SystemExit):
        main(["verify", str(tmp_path), "--schedule", "x.l2s", "--capture-launch", "leaves"])
    assert "invalid choice: 'leaves'" in capsys.readouterr().err


def test_verify_gpu_kills_a_verify_that_hangs_after_its_report(tmp_path, monkeypatch):
    """benchmarks/verify_gpu.py: a child that wrote its report and its last
    line but does not exit is sent SIGUSR1 (its stacks land in the log) and
    killed after the grace; the report's token check decides the status."""
    import subprocess
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import verify_gpu

    monkeypatch.setattr(verify_gpu, "EXIT_GRACE_S", 1)
    (tmp_path / "verify.json").write_text(json.dumps({"batches": [{"tokens_equal": True}]}))
    log = tmp_path / "verify.log"
    child = ("import faulthandler, signal, sys, time\n"
             "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
             "print('l2sched verify: wrote x.json and x.md', flush=True)\n"
             "time.sleep(120)\n")
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=f,
                                stderr=subprocess.STDOUT)
        assert verify_gpu._wait_for_exit(proc, log) == 0
    assert proc.returncode == -9  # killed, not exited
    assert "most recent call first" in log.read_text()  # the stacks SIGUSR1 dumped
    (tmp_path / "verify.json").write_text(json.dumps({"batches": [{"tokens_equal": False}]}))
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=f,
                                stderr=subprocess.STDOUT)
        assert verify_gpu._wait_for_exit(proc, log) == 1
