"""Issue 43, a new user's first hour: ``--model-config`` and a plan's
``meta.model_config`` get the checks and messages a schedule's
``model_config`` line gets (another model's config, an unknown name, a
quoted shipped name), and ``fit`` records a shipped config by its name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from l2sched.cli import main

ROOT = Path(__file__).resolve().parent.parent
QWEN = str(ROOT / "schedules" / "qwen3-30b-a3b-h200-tp1.l2s")
GLM = str(ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s")
QWEN_CONFIG = str(ROOT / "l2sched" / "data" / "qwen3-30b-a3b-config.json")


@pytest.mark.parametrize("command", ["check", "lint", "compile", "timeline"])
@pytest.mark.parametrize("schedule, config, own, model", [
    (QWEN, "glm53-flash", "glm5next", "qwen3_moe"),
    (GLM, "qwen3-30b-a3b", "qwen3_moe", "glm5next"),
    (GLM, QWEN_CONFIG, "qwen3_moe", "glm5next"),
])
def test_issue43_model_config_option_of_another_model_is_one_line(
        tmp_path, capsys, command, schedule, config, own, model):
    """The in-file form's message, naming the option instead of a position
    (was a raw KeyError name, or 16 'missing key' lines)."""
    out = ["-o", str(tmp_path / "out")] if command in ("compile", "timeline") else []
    assert main([command, schedule, "--model-config", config] + out) == 1
    err = capsys.readouterr().err
    name = "qwen3-30b-a3b" if config == QWEN_CONFIG else config  # a shipped file: its name
    want = (f"--model-config: model config '{name}' is a config of model {own}, "
            f"the schedule's model is {model}")
    assert want in err.splitlines()
    assert "missing key" not in err and "num_experts'" not in err


def test_issue43_model_config_option_finding_names_the_option_in_json(capsys):
    assert main(["lint", "--format", "json", QWEN, "--model-config", "glm53-flash"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["span"] is not None and finding["span"]["path"] == "--model-config"
    assert finding["message"] == ("model config 'glm53-flash' is a config of model "
                                  "glm5next, the schedule's model is qwen3_moe")


@pytest.mark.parametrize("command", ["check", "lint", "inventory"])
def test_issue43_unknown_model_config_name_names_the_option_and_suggests(capsys,
                                                                        command):
    files = [] if command == "inventory" else [GLM]
    assert main([command, *files, "--model-config", "qwen3-235b"]) == 1
    err = capsys.readouterr().err
    assert ("--model-config: unknown model config 'qwen3-235b'; did you mean "
            "'qwen3-235b-a22b'? (shipped: deepseek-v4-flash, glm53-flash, "
            "qwen3-235b-a22b, qwen3-30b-a3b; "
            "or a file: a config.json or model directory)") in err.splitlines()
    assert main([command, *files, "--model-config", "nope"]) == 1
    assert "--model-config: unknown model config 'nope' (shipped:" in \
        capsys.readouterr().err


def test_issue43_quoted_shipped_model_config_says_write_it_without_quotes(tmp_path,
                                                                         capsys):
    bad = tmp_path / "x.l2s"
    bad.write_text('schedule x\n\nmodel glm5next\ndevice h200\ntp 4\n'
                   'model_config "glm53-flash"\n')
    assert main(["check", str(bad)]) == 1
    assert (f"{bad}:6:14: model config file 'glm53-flash' does not exist; for the "
            "shipped config write glm53-flash without quotes") in capsys.readouterr().err


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """A GLM and a Qwen plan compiled from the shipped schedules."""
    d = tmp_path_factory.mktemp("plans")
    out = {}
    for key, schedule in (("glm", GLM), ("qwen", QWEN)):
        out[key] = d / f"{key}.json"
        assert main(["compile", schedule, "-o", str(out[key])]) == 0
    return out


def _with_meta(plans, tmp_path, key: str, value) -> str:
    d = json.loads(plans[key].read_text("utf-8"))
    d["meta"] = {"model_config": value}
    path = tmp_path / f"{key}-meta.json"
    path.write_text(json.dumps(d, indent=1), "utf-8")
    return str(path)


def _at(path: str, err: str, field: str) -> str:
    """The message of the error at the plan's ``field`` (path:line:col: field: ...)."""
    m = re.search(re.escape(path) + r":\d+:\d+: " + re.escape(field) + r": (.*)", err)
    assert m, err
    return m.group(1)


def test_issue43_explain_model_config_option_of_another_model(plans, capsys):
    """Was: the table, exit 0."""
    path = str(plans["glm"])
    assert main(["explain", path, "--model-config", "qwen3-30b-a3b"]) == 1
    err = capsys.readouterr().err
    assert _at(path, err, "model") == ("--model-config: the given model config is a "
                                       "config of model qwen3_moe, the plan's model "
                                       "is glm5next")
    assert main(["explain", path, "--model-config", "glm53-flash"]) == 0


@pytest.mark.parametrize("key, value, message", [
    ("glm", "qwen3-30b-a3b", "model config 'qwen3-30b-a3b' is a config of model "
                             "qwen3_moe, the plan's model is glm5next"),
    ("qwen", "glm53-flash", "model config 'glm53-flash' is a config of model "
                            "glm5next, the plan's model is qwen3_moe"),
    ("glm", 5, "expected a string, got integer 5"),
])
def test_issue43_plan_meta_model_config_is_checked(plans, tmp_path, capsys, key, value,
                                                   message):
    """Was: exit 0 for each."""
    path = _with_meta(plans, tmp_path, key, value)
    assert main(["explain", path]) == 1
    assert _at(path, capsys.readouterr().err, "meta.model_config") == message


def test_issue43_fit_command_names_a_shipped_config_by_its_name(tmp_path, capsys):
    """The shipped config's path exists only in a checkout: the header's
    command names it as the shipped files do."""
    out = tmp_path / "fit.l2s"
    assert main(["fit", "--device", "h200", "--tp", "1", "--tokens", "1", "--quick",
                 "-q", "--model-config", QWEN_CONFIG, "-o", str(out)]) == 0
    text = out.read_text("utf-8")
    assert "--model-config qwen3-30b-a3b --quick -o" in text
    assert "-config.json" not in text
    for shipped in ("qwen3-235b-a22b-sm120-tp4-fit.l2s", "qwen3-30b-a3b-h200-tp1-fit.l2s"):
        header = (ROOT / "schedules" / shipped).read_text("utf-8")
        assert re.search(r"^# Command: .*--model-config qwen3-[a-z0-9-]+ -o ", header,
                         re.M), shipped
