"""``l2sched verify`` on a CPU: its statistics, the interleaving of the
arms, the report files, and the command's refusals before any engine
starts. The engine itself (vLLM's ``LLM`` with the switch worker extension)
runs on the GPU: benchmarks/verify_gpu.sh."""

from __future__ import annotations

import json

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
                 "--batch-size", "0,4"]) == 2
    assert "--batch-size takes distinct positive integers" in capsys.readouterr().err
    assert main(["verify", str(tmp_path), "--schedule", "x.l2s",
                 "--batch-size", "4,4"]) == 2
    assert main(["verify", str(cfg), "--schedule", "x.l2s", "--output-len", "4"]) == 2
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
    (["--tp", "0"], "--tp must be at least 1, got 0"),
    (["--input-len", "0"], "--input-len must be at least 1"),
    (["--engine-arg", "tensor_parallel_size=2"], "set by verify itself"),
    (["--engine-arg", "compilation_config={bad"], "the value is not JSON"),
    (["--output-json", "/dev/null"], "--output-json: a .json file path"),
    (["--output-json", "report.md"], "--output-json: a .json file path"),
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
