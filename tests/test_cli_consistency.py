"""Issue 34 item 6: the commands agree. ``L2SCHED_PROGRESS`` reads yes/no
words like every l2sched env var (another value: usage error, exit 2) and
switches ``fit``'s phase lines too; a ``--tp`` the model cannot split at is
a usage error (exit 2) in ``inventory`` and ``fit``, a schedule's ``tp``
(or ``--set tp=``) an input error (exit 1) in check/lint/compile/explain;
``lint --tokens`` takes a list as ``fit --tokens`` does; a comma list
starting with a negative number is an option's value."""

from __future__ import annotations

import io
import json

import pytest

from l2sched import progress
from l2sched.cli import main

S = "schedules/glm53-flash-h200-tp4.l2s"


@pytest.fixture(autouse=True)
def _root(monkeypatch):
    from test_lint_golden import ROOT
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("value,shown", [("0", False), ("off", False), ("no", False),
                                         ("1", True), ("yes", True), ("TRUE", True)])
def test_progress_env_takes_yes_no_words(value, shown, monkeypatch):
    monkeypatch.setenv("L2SCHED_PROGRESS", value)
    assert progress.enabled(io.StringIO()) is shown


def test_unknown_progress_value_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("L2SCHED_PROGRESS", "banana")
    assert main(["check", "-q", S]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("l2sched check: error: "
                                               "L2SCHED_PROGRESS='banana'")


@pytest.mark.parametrize("value,phases", [("0", False), ("1", True)])
def test_fit_phase_lines_follow_the_progress_switch(value, phases, monkeypatch, capsys):
    monkeypatch.setenv("L2SCHED_PROGRESS", value)
    assert main(["fit", "--device", "h200", "--quick", "--tokens", "1", "--jobs", "1"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert ("evaluations" in "\n".join(err[:-1])) is phases
    assert err[-1].startswith("l2sched fit: ")  # the summary line either way


@pytest.mark.parametrize("argv,code", [
    (["inventory", "--tp", "3"], 2),
    (["fit", "--device", "h200", "--tp", "3", "--quick"], 2),
    (["check", S, "--set", "tp=3"], 1),
    (["lint", S, "--set", "tp=3"], 1),
    (["compile", S, "--set", "tp=3"], 1),
    (["explain", S, "--set", "tp=3"], 1),
])
def test_tp_the_model_cannot_split(argv, code, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "is not divisible by the TP size 3" in err
    if code == 2:  # an option: one usage line
        assert err.count("\n") == 1 and ": error: --tp 3: " in err


def test_lint_tokens_takes_a_list(capsys):
    assert main(["lint", S, "--tokens", "1"]) == 0
    one = capsys.readouterr().out
    assert main(["lint", S, "--tokens", "1,16"]) == 0
    both = capsys.readouterr().out
    assert both.startswith("--tokens 1:\n" + one + "--tokens 16:\n")
    assert both.count("predicted decode step on h200") == 2
    assert main(["lint", S, "--tokens", "1,16", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["tokens"] for d in doc["schedules"]] == [1, 16]
    assert main(["lint", S, "--tokens", "1,16", "--format", "sarif"]) == 0
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    keys = [(r["ruleId"], r["message"]["text"], json.dumps(r.get("locations")))
            for r in results]
    assert len(keys) == len(set(keys))  # a finding at both M is one result


@pytest.mark.parametrize("argv,message", [
    (["fit", "--device", "h200", "--weights", "-1,2", "--tokens", "1,4"],
     "--weights takes one number >= 0 per --tokens value"),
    (["fit", "--device", "h200", "--tokens", "-1,4"],
     "--tokens must be increasing whole numbers >= 1"),
    (["fit", "--device", "h200", "--noise-floor-us", "-2.5,1"],
     "--noise-floor-us takes one number >= 0"),
    (["lint", S, "--tokens", "-4,1"], "--tokens must be at least 1"),
    (["lint", S, "--tokens", "1,1"], "--tokens names an M twice"),
])
def test_negative_lists_get_the_tools_range_message(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err

