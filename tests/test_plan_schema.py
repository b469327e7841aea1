"""Issue 34 item 2: ``l2sched explain PLAN.json`` accepted nonsense plans
(``nbytes`` -5 or 10^40, layer 999 or -1, offset -4096, an unknown tensor,
hook, fill kernel, policy, model or device, ``tp`` 0, ``max_tokens`` -1,
``num_layers`` 1e9, a duplicated issue) and printed nonsense. A plan is
checked against ``l2sched/data/plan.schema.json`` and against its model
when read; every error is at the line and column of the value."""

from __future__ import annotations

import json

import pytest

from l2sched.cli import main
from l2sched.compiler.compile import compile_plan, schedule_inventory
from l2sched.compiler.plan import Plan
from l2sched.compiler.plan_check import json_spans, plan_schema
from l2sched.errors import L2sInputError, line_col
from l2sched.lang.resolve import load_schedule
from l2sched.units import CACHE_POLICIES, FILL_MODES

SCHEDULE = "schedules/glm53-flash-sm120-tp4.l2s"
MARK = "@@BAD@@"


@pytest.fixture(scope="module")
def plan_dict():
    s = load_schedule(SCHEDULE)
    return json.loads(compile_plan(s, schedule_inventory(s)).to_json())


def _bad_plan(tmp_path, d: dict, path: tuple, literal: str):
    """``d`` with the value at ``path`` written as ``literal`` (JSON text),
    as a file; returns the file and the ``line:col`` of that value,
    found by a plain text search (independent of the locator)."""
    d = json.loads(json.dumps(d))
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = MARK
    text = json.dumps(d, indent=1, sort_keys=True)
    at = text.index(json.dumps(MARK))
    text = text.replace(json.dumps(MARK), literal)
    line, col = line_col(text, at)
    f = tmp_path / "plan.json"
    f.write_text(text)
    return f, f"{line}:{col}"


def _explain_errors(capsys, f) -> list[str]:
    assert main(["explain", str(f)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing printed as if the plan were good
    return [line for line in captured.err.splitlines() if line.startswith(str(f))]


BAD = [
    # (path, literal, message)
    (("issues", 0, "ranges", 0, "nbytes"), "-5",
     "issues[0].ranges[0].nbytes: must be at least 1 (or -1 for the whole of a lazy "
     "tensor), got -5"),
    (("issues", 0, "ranges", 0, "nbytes"), str(10**40),
     "issues[0].ranges[0].nbytes: must be at most 1,000,000,000,000, got a 41-digit "
     "number"),
    (("issues", 0, "layer"), "999",
     "issues[0].layer: layer 999 does not exist; the model has layers 0..44"),
    (("issues", 0, "ranges", 1, "layer"), "999",
     "issues[0].ranges[1].layer: layer 999 does not exist; the model has layers 0..44"),
    (("issues", 0, "layer"), "-1", "issues[0].layer: must be at least 0, got -1"),
    (("issues", 0, "ranges", 0, "offset"), "-4096",
     "issues[0].ranges[0].offset: must be at least 0, got -4096"),
    (("issues", 0, "ranges", 0, "tensor"), '"self_attn.o_prj.weight"',
     "issues[0].ranges[0].tensor: no tensor 'self_attn.o_prj.weight' in layer 3 "
     "(mla+moe) of glm5next at TP4; did you mean 'self_attn.o_proj.weight'?"),
    (("issues", 0, "hook"), '"nope.hook"',
     "issues[0].hook: unknown hook point 'nope.hook' of glm5next"),
    (("issues", 0, "kernel"), '"dma"',
     "issues[0].kernel: unknown fill kernel \"dma\" (one of: \"\" (the device "
     "profile's default), bulk, copy, load)"),
    (("policy",), '"evict_lst"',
     "policy: unknown cache policy \"evict_lst\"; did you mean 'evict_last'? (one of: "
     "evict_last, evict_normal, evict_first)"),
    (("model",), '"gpt"', "model: unknown model adapter 'gpt'"),
    (("device",), '"nope"', "device: unknown device profile 'nope'"),
    (("tp",), "0", "tp: must be at least 1, got 0"),
    (("max_tokens",), "-1", "max_tokens: must be at least 1, got -1"),
    (("max_tokens",), "99999999999", "max_tokens: must be at most 2,147,483,647, got "
     "99999999999"),
    (("num_layers",), "1e9", "num_layers: expected an integer, got number 1000000000.0"),
    (("num_layers",), "1000000000", "num_layers: must be at most 100,000, got 1000000000"),
    (("num_layers",), "46", "num_layers: glm5next (GLM-5.3-Flash) has 45 decoder "
     "layers, not 46"),
    (("tp_rank",), "4", "tp_rank: TP rank 4 is outside 0..3 (tp is 4)"),
    (("tp",), "3", "tp: the model cannot run at tp 3: "),
    (("set_aside",), "-2", "set_aside: must be at least -1, got -2"),
    (("ep",), '"on"', "ep: expected true or false, got string \"on\""),
    (("issues", 0, "ranges", 0, "nbytes"), "0",
     "issues[0].ranges[0].nbytes: a range of 0 B"),
    (("issues", 0, "ranges", 0, "nbytes"), "-1",
     "issues[0].ranges[0].nbytes: -1 (the whole tensor) is only for a lazy range"),
    (("issues", 0, "ranges", 0, "nbytes"), "8388609",
     "issues[0].ranges[0].nbytes: offset 0 + nbytes 8,388,609 runs past the "
     "end of 'self_attn.kv_b_proj.weight' (8,388,608 B per rank at TP4)"),
    (("issues", 0, "ranges", 0, "offset"), "9000000",
     "issues[0].ranges[0].offset: offset 9,000,000 is past the end of "
     "'self_attn.kv_b_proj.weight'"),
    (("issues", 0, "ranges", 0, "lazy"), "true",
     "issues[0].ranges[0].lazy: 'self_attn.kv_b_proj.weight' is not a lazy tensor"),
    (("issues", 0, "budget"), "1000",
     "issues[0].budget: the fill fetches 35,999,744 B, more than its budget of 1,000 B"),
    (("issues", 0, "window"), '""', "issues[0].window: must not be empty"),
    (("left_over", 0, "tensor"), '"nope"', "left_over[0].tensor: no tensor 'nope' in "
     "layer 3"),
    (("left_over", 0, "nbytes"), str(10**11), "left_over[0].nbytes: 100,000,000,000 B "
     "is more than 'self_attn.o_proj.weight' holds"),
    (("meta",), "[]", "meta: expected an object, got list []"),
]


@pytest.mark.parametrize("path,literal,message", BAD,
                         ids=[f"{'.'.join(map(str, p))}={v[:12]}" for p, v, _ in BAD])
def test_a_nonsense_plan_is_refused_at_the_value(tmp_path, capsys, plan_dict, path,
                                                 literal, message):
    f, where = _bad_plan(tmp_path, plan_dict, path, literal)
    errors = _explain_errors(capsys, f)
    want = f"{f}:{where}: {message}"
    assert any(e.startswith(want) for e in errors), (want, errors)


def test_a_duplicated_issue_is_refused_at_the_copy(tmp_path, capsys, plan_dict):
    d = json.loads(json.dumps(plan_dict))
    d["issues"].insert(1, d["issues"][0])
    text = json.dumps(d, indent=1, sort_keys=True)
    f = tmp_path / "plan.json"
    f.write_text(text)
    lines = text.splitlines()
    # the second issue object: the second line that is exactly '  {' (4 spaces)
    starts = [i for i, s in enumerate(lines) if s == "  {"]
    errors = _explain_errors(capsys, f)
    want = (f"{f}:{starts[1] + 1}:3: issues[1]: duplicates issues[0]: window 'A_MLA' is "
            f"issued at attn.after_first_proj of layer 3 twice")
    assert want in errors, errors


def test_bytes_fetched_twice_in_a_step(tmp_path, capsys, plan_dict):
    """A range of one fill that another fill of the step fetched already."""
    d = json.loads(json.dumps(plan_dict))
    first = d["issues"][0]["ranges"][0]
    d["issues"][1]["ranges"].append(dict(first, offset=4096, nbytes=4096))
    f, where = _bad_plan(tmp_path, d, ("issues", 1, "ranges",
                                       len(d["issues"][1]["ranges"]) - 1, "offset"),
                         "4096")
    errors = _explain_errors(capsys, f)
    want = (f"{f}:{where}: issues[1].ranges[11].offset: bytes 4,096..8,192 of "
            f"'self_attn.kv_b_proj.weight' in layer 3 are fetched twice in one step "
            f"(also by issues[0].ranges[0])")
    assert want in errors, errors


def test_a_key_written_twice_and_unknown_and_missing_keys(tmp_path, capsys, plan_dict):
    text = json.dumps(plan_dict, indent=1, sort_keys=True)
    text = text.replace('"tp": 4,', '"tp": 4,\n "tp": 4,\n "tpp": 4,', 1)
    text = text.replace(' "max_tokens": 256,\n', "", 1)
    f = tmp_path / "plan.json"
    f.write_text(text)
    errors = _explain_errors(capsys, f)
    lines = text.splitlines()
    tp2 = [i for i, s in enumerate(lines) if s == ' "tp": 4,'][1] + 1
    tpp = lines.index(' "tpp": 4,') + 1
    assert f"{f}:{tp2}:2: tp: key written twice in one object (JSON keeps the last)" \
        in errors
    assert any(e.startswith(f"{f}:{tpp}:2: tpp: unknown key; did you mean 'tp'?")
               for e in errors), errors
    assert f"{f}:1:1: not an l2sched plan: missing key 'max_tokens'" in errors


def test_a_list_where_a_plan_has_an_object_or_a_number(tmp_path, capsys):
    f = tmp_path / "plan.json"
    f.write_text('{"issues": 3, "left_over": [7]}')
    errors = _explain_errors(capsys, f)
    assert f"{f}:1:12: issues: expected a list, got integer 3" in errors
    assert f"{f}:1:29: left_over[0]: expected an object, got integer 7" in errors


def test_every_error_of_a_file_in_one_run(tmp_path, capsys, plan_dict):
    d = json.loads(json.dumps(plan_dict))
    d["policy"] = "evict_lst"
    d["issues"][0]["hook"] = "nope.hook"
    d["issues"][1]["ranges"][0]["nbytes"] = -5
    d["left_over"][0]["layer"] = 999
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(d, indent=1))
    errors = _explain_errors(capsys, f)
    assert [e.split(": ", 2)[1] for e in errors] == [
        "issues[0].hook", "issues[1].ranges[0].nbytes", "left_over[0].layer", "policy"]
    # in file order
    assert [int(e.split(":")[1]) for e in errors] == sorted(
        int(e.split(":")[1]) for e in errors)


def test_a_compiled_plan_reads_back_clean(plan_dict):
    text = json.dumps(plan_dict, indent=1, sort_keys=True) + "\n"
    assert Plan.from_json(text).to_json() == text


def test_a_plan_compiled_with_a_model_config_is_read_with_it(tmp_path, capsys):
    """A plan records the config it was compiled with (``meta.model_config``)
    and is read with it; ``--model-config`` reads it with another; a plan
    that records none, of another layer count, is refused, naming both."""
    from l2sched.model.config import default_config

    cfg = dict(default_config("glm5next"), num_hidden_layers=8)
    cpath = tmp_path / "config.json"
    cpath.write_text(json.dumps(cfg))
    plan = tmp_path / "plan.json"
    assert main(["compile", SCHEDULE, "--model-config", str(cpath), "-o", str(plan)]) == 0
    capsys.readouterr()
    assert json.loads(plan.read_text())["meta"] == {"model_config": str(cpath)}
    assert main(["explain", str(plan), "--model-config", str(cpath)]) == 0
    assert main(["explain", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    doc["meta"] = {}
    plan.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["explain", str(plan)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("num_layers: glm5next (GLM-5.3-Flash) has 45 decoder layers, "
                           "not 8") and len(err) == 4, err
    assert "meta.model_config" in err[3] and "--model-config" in err[3]


def test_the_schema_agrees_with_the_code():
    import jsonschema

    schema = plan_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert tuple(schema["properties"]["policy"]["enum"]) == CACHE_POLICIES
    assert tuple(schema["$defs"]["issue"]["properties"]["kernel"]["enum"]) == \
        ("",) + FILL_MODES
    from l2sched.compiler.plan import EMPTY_REASONS, Plan as P
    import dataclasses
    assert set(schema["properties"]) == {f.name for f in dataclasses.fields(P)}
    assert tuple(schema["$defs"]["empty"]["properties"]["reason"]["enum"]) == EMPTY_REASONS


def test_json_spans_locates_values_keys_and_duplicates():
    text = '{"a": [1, {"b": "x"}],\r\n "a": 2}'
    values, keys, dups = json_spans(text)
    assert text[slice(*values[("a", 1, "b")])] == '"x"'
    assert values[("a",)] == (text.index("2"), text.index("2") + 1)
    assert dups == [(("a",), text.index('"a": 2'))]
    assert line_col(text, keys[("a",)]) == (2, 2)


def test_plan_from_json_raises_the_input_error(plan_dict):
    """``Plan.from_json`` itself checks (the plugin and tools read plans
    through it), with the file's name in each location."""
    text = json.dumps(dict(plan_dict, tp=0))
    with pytest.raises(L2sInputError) as e:
        Plan.from_json(text, "p.json")
    (d,) = e.value.diagnostics
    assert d.message == "tp: must be at least 1, got 0"
    assert (d.span.path, d.span.line, d.span.column) == (
        "p.json", 1, text.index('"tp": 0') + 7)


# -- the same for values in the language and in device profiles -------------

HEAD = "schedule t\nmodel glm5next\ndevice h200\ntp 4\n"
WINDOW = "window A at attn.pre_all_reduce budget {b} layers moe {{ this self_attn.o_proj }}\n"


@pytest.mark.parametrize("command", ["check", "lint", "compile"])
@pytest.mark.parametrize("line,col,message", [
    ("max_tokens 99999999999999999999", 12,
     "max_tokens must be at most 2,147,483,647, got 20 digits"),
    ("max_tokens 2147483648", 12, "max_tokens must be at most 2,147,483,647, got "
     "2,147,483,648"),
    ("set tp = 2048", 10, "tp must be at most 1,024, got 2,048"),
])
def test_whole_numbers_of_the_language_have_bounds(tmp_path, capsys, command, line,
                                                   col, message):
    """``max_tokens 99999999999999999999`` was accepted by check, lint and
    compile and landed in the plan."""
    f = tmp_path / "t.l2s"
    f.write_text(HEAD + line + "\n" + WINDOW.format(b="10MB"))
    out = tmp_path / "plan.json"
    argv = [command, str(f)] + (["-o", str(out)] if command == "compile" else [])
    assert main(argv) == 1
    assert f"{f}:5:{col}: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_max_tokens_at_its_bound_is_accepted(tmp_path, capsys):
    f = tmp_path / "t.l2s"
    f.write_text(HEAD + "max_tokens 2147483647\n" + WINDOW.format(b="10MB"))
    out = tmp_path / "plan.json"
    assert main(["compile", str(f), "-o", str(out)]) == 0
    assert main(["explain", str(out), "--layer", "3"]) == 0


@pytest.mark.parametrize("size", ["0MB", "0B", "0.0GiB"])
def test_a_window_declared_with_budget_0_is_an_error(tmp_path, capsys, size):
    """``budget 0MB`` passed with an info only (L2S201)."""
    f = tmp_path / "t.l2s"
    f.write_text(HEAD + WINDOW.format(b=size))
    assert main(["check", str(f)]) == 1
    assert (f"{f}:5:40: window 'A' has budget {size}: a window of 0 B fetches nothing; "
            f"remove it, or switch it off in a variant with 'set window.A.budget = 0MB' "
            f"(or --set window.A.budget=0MB)") in capsys.readouterr().err


def test_an_override_to_0_b_still_switches_a_window_off(tmp_path, capsys):
    """The documented way to switch a window off in a variant (the
    research arms' ``window.X.budget=0MB``, ``profile.arms``) stays legal."""
    f = tmp_path / "t.l2s"
    f.write_text(HEAD + WINDOW.format(b="10MB"))
    assert main(["check", str(f), "--set", "window.A.budget=0MB"]) == 0
    g = tmp_path / "v.l2s"
    g.write_text(f"schedule v\nextends \"{f.name}\"\nset window.A.budget = 0MB\n")
    assert main(["check", str(g)]) == 0


@pytest.mark.parametrize("key,value,message", [
    ("l2_bytes", '"sixty"', "expected an integer in 0..10^15 (B), got 'sixty'"),
    ("sms", "0", "expected an integer in 1..100000, got 0"),
    ("date", '"yesterday"', "expected a date string YYYY-MM-DD, got 'yesterday'"),
    ("quick", '"no"', "expected true or false, got 'no'"),
    ("kept_from_base", "[1]", "expected a list of strings (section.key), got [1]"),
    ("gpu", "7", "expected a non-empty string, got 7"),
    ("l2_byte", "1", "unknown key; did you mean 'l2_bytes'?"),
])
def test_provenance_values_have_types(tmp_path, key, value, message):
    """A profile's ``[provenance] l2_bytes = "sixty"`` was accepted."""
    from l2sched.device import load_device
    from l2sched.device.parse import DEVICES_DIR

    text = (DEVICES_DIR / "h200.toml").read_text()
    lines = text.splitlines()
    at = lines.index("[provenance]") + 1
    lines.insert(at, f"{key} = {value}")
    if key != "l2_byte":
        lines = [x for i, x in enumerate(lines)
                 if i <= at or not x.startswith(f"{key} =")]
    p = tmp_path / "p.toml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    (d,) = e.value.diagnostics
    assert (d.span.line, d.span.column) == (at + 1, 1)
    assert d.message.startswith(f"provenance.{key}: {message}"), d.message
