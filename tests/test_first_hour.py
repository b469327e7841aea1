"""Issue 17, item 21: the smaller faults a new user met in the first hour,
each a test named after it (``test_item21_*``)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from lab import main as lab_main
from l2sched.cli import main
from l2sched.lang.formatter import format_text

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"
SM120 = ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"


def test_item21_lint_takes_several_schedules(tmp_path, capsys):
    """``lint`` took one file while ``check``/``fmt`` take many."""
    assert main(["lint", str(H200), str(SM120), "--no-summary"]) == 0
    out = capsys.readouterr().out
    assert f"{H200}: 0 errors, " in out and f"{SM120}: 0 errors, " in out
    assert main(["lint", str(H200), str(SM120), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["path"] for d in doc["schedules"]] == [str(H200), str(SM120)]
    assert doc["errors"] == 0
    # a broken one is reported and the others are still linted
    bad = tmp_path / "bad.l2s"
    bad.write_text("schedule x\nmodel glm5next\ndevice h200\ntp 4\n"
                   "window A at nohook budget 1MB\n")
    assert main(["lint", str(bad), str(H200), "--no-summary"]) == 1
    cap = capsys.readouterr()
    assert f"{bad}:5:13: unknown hook point 'nohook'" in cap.err
    assert f"{H200}: 0 errors" in cap.out
    assert main(["lint", str(bad), str(H200), "--format", "sarif"]) == 1
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert {r["ruleId"] for r in results} >= {"L2S000", "L2S201"}


@pytest.mark.parametrize("argv", [
    ["lint", str(H200)], ["check", str(H200)], ["compile", str(H200)],
    ["timeline", str(H200), "-o", "x.json"], ["bench", "run"],
    ["bench", "tp"],
    ["explain", str(H200)], ["fmt", str(H200)], ["inventory"], ["docs", "lint"]])
def test_item21_unknown_option_prints_the_subcommand_usage(argv, capsys):
    """Unknown options printed the top-level usage instead of the
    subcommand's."""
    command = " ".join(argv[:2]) if argv[0] == "bench" else argv[0]
    with pytest.raises(SystemExit) as e:
        main(argv + ["--bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: l2sched {command} ")
    assert err.rstrip().endswith(f"l2sched {command}: error: unrecognized arguments: "
                                 f"--bogus")


def test_item21_bench_help_names_the_command_once(capsys):
    """``python -m l2sched.bench --help`` said "l2sched bench bench" (and that
    module no longer runs); every ``python -m MODULE`` the docs show runs."""
    for argv in (["bench"], ["bench", "run"], ["bench", "tp"]):
        with pytest.raises(SystemExit):
            main(argv + ["--help"])
        out = capsys.readouterr().out
        assert out.startswith(f"usage: l2sched {' '.join(argv)} ")
        assert "bench bench" not in out
    with pytest.raises(SystemExit):  # the lab's research commands: python -m lab bench
        lab_main(["bench", "tp-report", "--help"])
    assert capsys.readouterr().out.startswith("usage: python -m lab bench tp-report ")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for module in re.findall(r"python3? -m ([\w.]+)", doc.read_text()):
            if module in ("pip", "pytest"):
                continue
            spec = importlib.util.find_spec(module)
            assert spec is not None, (doc.name, module)
            if spec.submodule_search_locations:  # a package needs __main__
                assert importlib.util.find_spec(module + ".__main__"), (doc.name, module)


def test_item21_skip_reasons_name_the_extra():
    """Skip reasons pointed at a developer-only venv path and did not say
    which extra to install."""
    private = "/wo" + "rk/"  # the development machine's checkout root
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert private not in node.value, (path.name, node.value)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == \
                    "importorskip":
                assert any(k.arg == "reason" for k in node.keywords), (
                    path.name, node.lineno)
    sys.path.insert(0, str(ROOT / "tests"))
    import extras

    for reason in (extras.TORCH_MISSING, extras.GPU_MISSING, extras.VLLM_MISSING):
        assert re.search(r"pip install -e '\.\[[\w,]+\]'", reason), reason


@pytest.mark.parametrize("content,message", [
    ('{"a":1}', "1:1: not an l2sched plan: missing keys 'schedule', 'model', 'device'"),
    ('[]', "1:1: not an l2sched plan: expected a JSON object, got list"),
    ('{"issues": 3}', "1:1: not an l2sched plan: missing keys 'schedule', 'model'"),
    ('{\n "issues": [', "2:13: not an l2sched plan: not JSON: Expecting value"),
])
def test_item21_explain_names_what_is_wrong_with_a_plan(tmp_path, capsys, content,
                                                        message):
    """``explain x.json`` with ``{"a":1}`` said "not an l2sched plan:
    'issues'" (a raw KeyError)."""
    p = tmp_path / "x.json"
    p.write_text(content)
    assert main(["explain", str(p)]) == 1
    assert capsys.readouterr().err.startswith(f"{p}:{message}")


def test_item21_check_set_tp_names_the_setting_not_an_option(capsys):
    """``check --set tp=3`` printed "--tp 3: ... (<config>)"."""
    assert main(["check", str(H200), "--set", "tp=3"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first == ("--set #1:1:4: the model cannot run at tp 3: linear_head_dim*"
                     "linear_num_heads = 8192 is not divisible by the TP size 3")


def test_item21_counts_agree_with_their_nouns(tmp_path, capsys):
    """"1 windows"; "1 error(s)"."""
    from l2sched.units import plural

    assert plural(1, "window") == "1 window" and plural(0, "window") == "0 windows"
    p = tmp_path / "one.l2s"
    # a window the model predicts to pay on this device: no finding but the
    # info naming the profile's unmeasured terms (L2S112; the sm120 profile
    # is an estimate); on h200 it is predicted slower, L2S110
    p.write_text("schedule one\nmodel glm5next\ndevice sm120-rtx-pro-6000-maxq\ntp 4\n"
                 "window A at attn.after_first_proj budget 17MB layers kda & moe {\n"
                 "    this self_attn.o_proj\n}\n")
    assert main(["check", str(p)]) == 0
    assert "prefetch at <= 256 tokens, fill kernel default (bulk), 1 window\n" in capsys.readouterr().out
    assert main(["lint", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"{p}: 0 errors, 0 warnings, 1 info")
    assert out.count("info: L2S112") == 1
    assert "(1 token):" in out


def test_item21_no_negative_zero(tmp_path, capsys):
    """"-0.0" in reports ("+0.0% step time, -0.0% steps/s" for a window of
    100 KB): a value that rounds to zero has no sign to show."""
    from l2sched.units import format_signed

    assert format_signed(-0.04) == "+0.0"
    assert format_signed(-0.0004, "+.1%") == "+0.0%"
    assert format_signed(-0.06) == "-0.1"
    tiny = tmp_path / "tiny.l2s"
    tiny.write_text("schedule tiny\nmodel glm5next\ndevice h200\ntp 4\n"
                    "window T at attn.pre_all_reduce budget 100KB layers moe {\n"
                    "    this post_attention_layernorm\n}\n")
    main(["lint", str(tiny)])
    assert "(+0.0% step time, +0.0% steps/s)" in capsys.readouterr().out
    for path in sorted((ROOT / "schedules").glob("*.l2s")):
        for tokens in ("1", "16", "300"):
            main(["lint", str(path), "--tokens", tokens])
            out = capsys.readouterr().out
            assert not re.search(r"-0\.0+(?![0-9])", out), (path.name, tokens)


def test_item21_no_empty_lint_table_when_nothing_fills(capsys):
    """An empty lint table (a header alone) when no window fills."""
    assert main(["lint", str(H200), "--tokens", "300"]) == 0
    out = capsys.readouterr().out
    assert "layer kind  window" not in out
    assert ("no fills: a step of 300 tokens prefetches nothing (the schedule "
            "prefetches at <= 256 tokens, max_tokens)") in out


def _readme_block(after: str) -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(re.escape(after) + r".*?```\n(.*?)```", text, re.S).group(1)


def test_item21_readme_example_is_canonical_and_what_check_prints(tmp_path, capsys,
                                                                   monkeypatch):
    """README's own example was not ``fmt``-canonical; what it says ``check``
    prints is what ``check`` prints."""
    example = _readme_block("## A schedule in a dozen lines")
    assert format_text(example, "example.l2s") == example
    monkeypatch.chdir(tmp_path)
    Path("example.l2s").write_text(example)
    assert main(["fmt", "--check", "example.l2s"]) == 0
    assert main(["check", "example.l2s"]) == 0
    assert capsys.readouterr().out == _readme_block("`l2sched check example.l2s` prints:")
    Path("example.l2s").write_text(example.replace(
        "attn.pre_all_reduce budget 30MB", "attn.pre_allreduce budget 30"))
    assert main(["check", "example.l2s"]) == 1
    err = capsys.readouterr().err.splitlines()
    shown = _readme_block("every error of the file is reported in one run:").splitlines()
    for line in shown:
        if "..." in line:  # the README abbreviates the list of hook points
            assert any(e.startswith(line.split("...")[0]) for e in err), line
        else:
            assert line in err, line


def test_item21_select_lists_the_codes_instead_of_a_wrong_guess(capsys):
    """``--select L2S9`` suggested L2S201."""
    assert main(["lint", str(H200), "--select", "L2S9"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err
    assert "--select L2S9: no rule code starts with it (codes: L2S000-" in err


def test_item21_set_value_with_a_hash_is_an_error(capsys):
    """``--set window.B.budget=20MB#x`` was accepted silently (the '#' and
    what follows read as a comment)."""
    assert main(["check", str(H200), "--set", "window.B.budget=20MB#x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("--set #1:1:21: a --set value has no comments: '#' cannot "
                          "appear in it")


def test_item21_license_is_an_spdx_string():
    """``project.license`` as a TOML table is deprecated by setuptools (builds
    break after 2027-02-18): an SPDX expression string, setuptools >= 77, no
    license classifiers."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    assert isinstance(project["license"], str) and project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))
    req = next(r for r in data["build-system"]["requires"] if r.startswith("setuptools"))
    assert re.fullmatch(r"setuptools>=(\d+).*", req) and int(
        re.match(r"setuptools>=(\d+)", req).group(1)) >= 77
