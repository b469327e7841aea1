"""The vLLM plugin's configuration (``l2sched.vllm.config``) on its own: the
``additional_config["l2sched"]`` section validated against its JSON schema,
the ``L2SCHED_*`` environment variables validated, which source wins, and
how ``L2SCHED_SET`` separates overrides. No vLLM needed: the configuration
is plain data. (The log lines with the real ``TP rank r/n`` are checked in
``tests/test_vllm_plugin.py``.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from l2sched.errors import L2sPluginError
from l2sched.vllm.config import PluginConfig, parse_set_env, read_config

ROOT = Path(__file__).resolve().parent.parent


def _bad(extra, environ=None) -> L2sPluginError:
    with pytest.raises(L2sPluginError) as e:
        read_config(extra, environ or {})
    assert e.value.what == "bad configuration", e.value
    return e.value


# --------------------------------------------------------------------------
# item 14: schema, named keys, additional-config wins for every key


@pytest.mark.parametrize("extra, key, words", [
    ({"l2sched": {}}, "l2sched.schedule", "missing"),
    ({"l2sched": {"schedule": ""}}, "l2sched.schedule", "empty"),
    ({"l2sched": "x.l2s"}, "l2sched", "must be an object"),
    ({"l2sched": {"schedule": "x.l2s", "set": "window.B.budget=25MB"}},
     "l2sched.set", "object"),
    ({"l2sched": {"schedule": "x.l2s", "set": {"window.B.budget": [25]}}},
     "l2sched.set.window.B.budget", "string"),
    ({"l2sched": {"schedule": "x.l2s", "set": ["tp=2", 3]}}, "l2sched.set[1]",
     "string"),
    ({"l2sched": {"schedule": "x.l2s", "backend": "gpu"}}, "l2sched.backend",
     "'cuda' or 'dry-run'"),
    ({"l2sched": {"schedule": "x.l2s", "lint": "banana"}}, "l2sched.lint",
     "warn"),
    ({"l2sched": {"schedule": "x.l2s", "lnit": False}}, "l2sched.lnit",
     "did you mean 'lint'"),
    ({"l2sched": {"schedule": 7}}, "l2sched.schedule", "string"),
    ({"l2sched": {"schedule": "x.l2s", "device": ""}}, "l2sched.device", "empty"),
])
def test_item14_bad_section_is_a_bad_configuration_naming_the_key(extra, key, words):
    err = _bad(extra)
    assert f"additional_config {key}:" in err.detail, err.detail
    assert words in err.detail, err.detail
    assert "\n" not in str(err)


def test_item14_schema_is_a_json_schema_with_every_key():
    import jsonschema

    from l2sched.vllm.config import CONFIG_SCHEMA

    jsonschema.Draft202012Validator.check_schema(CONFIG_SCHEMA)
    assert set(CONFIG_SCHEMA["properties"]) == {"schedule", "set", "backend", "lint",
                                                "device", "on_predicted_loss",
                                                "fills", "verify", "capture_launch",
                                                "agree_timeout_s"}
    assert CONFIG_SCHEMA["additionalProperties"] is False


def test_item14_jsonschema_is_in_the_vllm_and_test_extras():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in ("vllm", "test"):
        assert any(d.startswith("jsonschema") for d in extras[extra]), extras[extra]


def test_item14_additional_config_wins_for_every_key():
    env = {"L2SCHED_SCHEDULE": "env.l2s", "L2SCHED_SET": "tp=2",
           "L2SCHED_BACKEND": "dry-run", "L2SCHED_LINT": "0",
           "L2SCHED_DEVICE": "h200"}
    got = read_config({"l2sched": {"schedule": "y.l2s"}}, env)
    assert got == PluginConfig("y.l2s", (), "cuda", "error", None, "additional-config")
    # and the section's own values, for every key
    got = read_config({"l2sched": {"schedule": "y.l2s", "set": {"tp": 2},
                                   "backend": "dry-run", "lint": "warn",
                                   "device": "my.toml"}}, env)
    assert got == PluginConfig("y.l2s", ("tp=2",), "dry-run", "warn", "my.toml",
                               "additional-config")
    # an environment that is malformed does not matter when the section wins
    got = read_config({"l2sched": {"schedule": "y.l2s"}}, {"L2SCHED_LINT": "banana"})
    assert got.lint == "error"


def test_item14_environment_alone():
    assert read_config({}, {}) is None
    assert read_config(None, {"L2SCHED_SCHEDULE": "  "}) is None
    env = {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_SET": "tp=2; window.B.budget=25MB",
           "L2SCHED_DEVICE": "gb10.toml"}
    assert read_config(None, env) == PluginConfig(
        "x.l2s", ("tp=2", "window.B.budget=25MB"), "cuda", "error", "gb10.toml", "env")


# --------------------------------------------------------------------------
# item 6: the lint setting and environment values are validated


@pytest.mark.parametrize("value, want", [
    (True, "error"), (False, "off"), ("error", "error"), ("warn", "warn"),
    ("off", "off"),
])
def test_item06_lint_setting_values(value, want):
    got = read_config({"l2sched": {"schedule": "x.l2s", "lint": value}}, {})
    assert got.lint == want


@pytest.mark.parametrize("text, want", [
    ("1", "error"), ("true", "error"), ("on", "error"), ("yes", "error"),
    ("error", "error"), ("WARN", "warn"), ("warn", "warn"), ("0", "off"),
    ("false", "off"), ("off", "off"), ("no", "off"), ("", "error"),
])
def test_item06_lint_env_values(text, want):
    env = {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_LINT": text}
    assert read_config(None, env).lint == want


@pytest.mark.parametrize("var, text", [
    ("L2SCHED_LINT", "banana"), ("L2SCHED_LINT", "2"),
    ("L2SCHED_BACKEND", "gpu"), ("L2SCHED_BACKEND", "dryrun"),
])
def test_item06_bad_env_value_is_a_bad_configuration(var, text):
    err = _bad(None, {"L2SCHED_SCHEDULE": "x.l2s", var: text})
    assert var in err.detail and repr(text) in err.detail, err.detail


@pytest.mark.parametrize("text, disabled", [
    ("1", True), ("true", True), ("0", False), ("false", False), ("", False),
    ("off", False), ("banana", False),
])
def test_item06_no_tvm_ffi_means_what_it_says(monkeypatch, caplog, text, disabled):
    """``L2SCHED_NO_TVM_FFI=0`` does not disable TVM-FFI; a value that is not
    a yes/no word is ignored with one warning naming the variable."""
    import types

    from l2sched.runtime import kernel as K

    monkeypatch.setitem(sys.modules, "tvm_ffi", types.ModuleType("tvm_ffi"))
    monkeypatch.setenv("L2SCHED_NO_TVM_FFI", text)
    caplog.set_level("WARNING", logger="l2sched")
    assert K._ffi_available() is (not disabled)
    warned = [r.getMessage() for r in caplog.records if "L2SCHED_NO_TVM_FFI" in
              r.getMessage()]
    assert len(warned) == (1 if text == "banana" else 0), warned


def test_item06_env_flag():
    from l2sched.env import env_flag
    from l2sched.errors import L2sUsageError

    assert env_flag("X", {}) is False and env_flag("X", {}, default=True) is True
    assert env_flag("X", {"X": " Yes "}) is True and env_flag("X", {"X": "0"}) is False
    with pytest.raises(L2sUsageError, match=r"X='maybe'"):
        env_flag("X", {"X": "maybe"})


# --------------------------------------------------------------------------
# item 15: L2SCHED_SET separates overrides with ';', never inside a selector


@pytest.mark.parametrize("text, want", [
    ("window.B.layers=moe, 44", ("window.B.layers=moe, 44",)),
    ("window.B.layers=moe, 44; window.B.budget=25MB",
     ("window.B.layers=moe, 44", "window.B.budget=25MB")),
    ("tp=2;;  ", ("tp=2",)),
    ("tp=2\nwindow.C.budget=7.5MB", ("tp=2", "window.C.budget=7.5MB")),
    ('device="a;b.toml"; tp=2', ('device="a;b.toml"', "tp=2")),
    ("", ()),
])
def test_item15_set_env_separator(text, want):
    assert parse_set_env(text) == want


def test_item15_commas_between_overrides_get_a_clear_error():
    err = _bad(None, {"L2SCHED_SCHEDULE": "x.l2s",
                      "L2SCHED_SET": "window.B.budget=25MB,window.C.budget=7.5MB"})
    assert "L2SCHED_SET" in err.detail and "';'" in err.detail, err.detail


def test_issue31_capture_sizes():
    import types

    from l2sched.vllm.loss_gate import MAX_SIZES, capture_sizes

    def cfg(sizes):
        return types.SimpleNamespace(compilation_config=types.SimpleNamespace(
            cudagraph_capture_sizes=sizes))

    assert capture_sizes(None, 256) == (1, 4, 16, 64)  # the measured floors' M
    assert capture_sizes(cfg([]), 8) == (1, 4)
    assert capture_sizes(cfg([4, 1, 2, 2, 512]), 256) == (1, 2, 4)
    many = capture_sizes(cfg([1, 2, 4] + list(range(8, 513, 8))), 256)
    assert len(many) <= MAX_SIZES and many[:5] == (1, 2, 4, 8, 16)
    assert many[-1] == 256


def test_issue31_on_predicted_loss_setting():
    section = {"schedule": "x.l2s"}
    assert read_config({"l2sched": section}, {}).on_predicted_loss == "off"
    got = read_config({"l2sched": dict(section, on_predicted_loss="warn")}, {})
    assert got.on_predicted_loss == "warn"
    env = {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_ON_PREDICTED_LOSS": "warn"}
    assert read_config(None, env).on_predicted_loss == "warn"
    for bad in ({"l2sched": dict(section, on_predicted_loss="error")}, None):
        with pytest.raises(L2sPluginError, match="on_predicted_loss|ON_PREDICTED_LOSS"):
            read_config(bad, dict(env, L2SCHED_ON_PREDICTED_LOSS="error"))


def test_issue31_fills_switch_from_section_and_env():
    from l2sched.vllm.config import read_config

    assert read_config({"l2sched": {"schedule": "x.l2s"}}).fills == "on"
    assert read_config({"l2sched": {"schedule": "x.l2s", "fills": "off"}}).fills == "off"
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s",
                            "L2SCHED_FILLS": " OFF "}).fills == "off"
    err = _bad({"l2sched": {"schedule": "x.l2s", "fills": "maybe"}})
    assert "additional_config l2sched.fills: must be 'on' or 'off'" in err.detail
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_FILLS": "0"}).fills == "off"
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_FILLS": "yes"}).fills == "on"
    with pytest.raises(L2sPluginError, match="L2SCHED_FILLS='sometimes': expected on"):
        read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_FILLS": "sometimes"})
    err = _bad({"l2sched": {"schedule": "x.l2s", "fills": None}})
    assert "got null" in err.detail and "null null" not in err.detail


def test_issue31_verify_rounds_from_section_and_env():
    from l2sched.vllm.config import read_config

    assert read_config({"l2sched": {"schedule": "x.l2s"}}).verify == 0
    assert read_config({"l2sched": {"schedule": "x.l2s", "verify": 5}}).verify == 5
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_VERIFY": " 3 "}).verify == 3
    for bad in (-1, 51, 2.5, True, "3"):
        err = _bad({"l2sched": {"schedule": "x.l2s", "verify": bad}})
        assert "additional_config l2sched.verify:" in err.detail, err.detail
    for bad in ("-1", "many", "51"):
        with pytest.raises(L2sPluginError, match="L2SCHED_VERIFY=.*whole number of rounds"):
            read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_VERIFY": bad})


def test_issue31_verify_odd_values_read_as_whole_rounds():
    """A new user's attack on ``verify``: JSON's 2.0 is an integer (the
    start-up A/B's ``range`` needs an int), an out-of-range value says the
    range and what it got, Infinity is one message, not two, and the
    variable takes ASCII digits only (``int()`` also reads ``1_0`` and
    other scripts' digits)."""
    cfg = read_config({"l2sched": {"schedule": "x.l2s", "verify": 2.0}})
    assert cfg.verify == 2 and isinstance(cfg.verify, int)
    assert _bad({"l2sched": {"schedule": "x.l2s", "verify": 51}}).detail == (
        "additional_config l2sched.verify: must be a whole number from 0 to 50, "
        "got a number 51")
    detail = _bad({"l2sched": {"schedule": "x.l2s", "verify": float("inf")}}).detail
    assert detail.count("l2sched.verify") == 1 and "expected a whole number, got a " \
        "number Infinity" in detail, detail
    assert "a integer" not in _bad({"l2sched": {"schedule": "x.l2s", "verify": "3"}}).detail
    for bad in ("1_0", "\u0661\u0662", "+3"):
        with pytest.raises(L2sPluginError, match="L2SCHED_VERIFY=.*whole number of rounds"):
            read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_VERIFY": bad})
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_VERIFY": "07"}).verify == 7


def test_issue36_capture_launch_from_section_and_env():
    """``capture_launch`` / ``L2SCHED_CAPTURE_LAUNCH`` take one of the
    runtime's ``CAPTURE_LAUNCHES``; unset is ``None`` (the runtime's
    default); anything else names the key or variable and the choices."""
    from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES
    from l2sched.vllm.config import read_config

    assert read_config({"l2sched": {"schedule": "x.l2s"}}).capture_launch is None
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s"}).capture_launch is None
    for launch in CAPTURE_LAUNCHES:
        assert read_config({"l2sched": {"schedule": "x.l2s", "capture_launch": launch}}
                           ).capture_launch == launch
        assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s",
                                "L2SCHED_CAPTURE_LAUNCH": f" {launch.upper()} "}
                           ).capture_launch == launch
    detail = _bad({"l2sched": {"schedule": "x.l2s", "capture_launch": "leaves"}}).detail
    assert detail.startswith("additional_config l2sched.capture_launch: must be 'fork'"), detail
    with pytest.raises(L2sPluginError, match="L2SCHED_CAPTURE_LAUNCH='leaves'.*leaf"):
        read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_CAPTURE_LAUNCH": "leaves"})


def test_issue43_agree_timeout_from_section_and_env():
    """``agree_timeout_s`` / ``L2SCHED_AGREE_TIMEOUT_S``: seconds above 0 and
    at most ``MAX_AGREE_TIMEOUT_S``, default ``AGREE_TIMEOUT_S``; anything
    else names the key or variable."""
    from l2sched.vllm.config import AGREE_TIMEOUT_S, MAX_AGREE_TIMEOUT_S, read_config

    assert read_config({"l2sched": {"schedule": "x.l2s"}}).agree_timeout_s == AGREE_TIMEOUT_S
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s"}).agree_timeout_s == AGREE_TIMEOUT_S
    assert read_config({"l2sched": {"schedule": "x.l2s", "agree_timeout_s": 2}}
                       ).agree_timeout_s == 2.0
    assert read_config({}, {"L2SCHED_SCHEDULE": "x.l2s",
                            "L2SCHED_AGREE_TIMEOUT_S": " 7.5 "}).agree_timeout_s == 7.5
    for bad in (0, -1, MAX_AGREE_TIMEOUT_S + 1, "10"):
        detail = _bad({"l2sched": {"schedule": "x.l2s", "agree_timeout_s": bad}}).detail
        assert detail.startswith("additional_config l2sched.agree_timeout_s"), detail
    for bad in ("0", "-3", "nan", "inf", "ten", "4000"):
        with pytest.raises(L2sPluginError, match="L2SCHED_AGREE_TIMEOUT_S=.*seconds above 0"):
            read_config({}, {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_AGREE_TIMEOUT_S": bad})


def test_issue43_fingerprint_tells_files_of_one_path_apart(tmp_path):
    """Two nodes holding different schedule files at one path disagree: the
    fingerprint has the file's sha256; the configuration's source and
    ``agree_timeout_s`` are not part of it; an unreadable file is named."""
    from l2sched.vllm.agreement import fingerprint
    from l2sched.vllm.config import read_config

    p = tmp_path / "x.l2s"
    p.write_text("schedule a\n")
    env = fingerprint(read_config({}, {"L2SCHED_SCHEDULE": str(p)}))
    section = fingerprint(read_config({"l2sched": {"schedule": str(p),
                                                   "agree_timeout_s": 3}}))
    assert env == section and len(env["schedule_sha256"]) == 64
    p.write_text("schedule b\n")
    assert fingerprint(read_config({}, {"L2SCHED_SCHEDULE": str(p)})) != env
    gone = fingerprint(read_config({}, {"L2SCHED_SCHEDULE": str(tmp_path / "no.l2s")}))
    assert gone["schedule_sha256"].startswith("unreadable: ")
    assert fingerprint(read_config({}, {"L2SCHED_SCHEDULE": "auto"}))["schedule_sha256"] is None


def test_issue47_loss_gate_lints_each_capture_size_once():
    """The gate takes one request; the M the plugin's lint already ran
    (M = 1) is not linted again, every other capture size is, and a loss
    found in either place turns prefetch off."""
    import logging
    import types

    from l2sched.lint.rules.base import Finding
    from l2sched.vllm.loss_gate import GateRequest, PredictedLoss, loss_gate

    calls = []

    def lint(tokens, select, **kw):
        calls.append(tokens)
        assert select == ["L2S110"] and kw["tp_rank"] == 1
        return types.SimpleNamespace(findings=[])

    vcfg = types.SimpleNamespace(compilation_config=types.SimpleNamespace(
        cudagraph_capture_sizes=[1, 2, 4, 8]))
    cfg = types.SimpleNamespace(lint="error", on_predicted_loss="off")
    sched = types.SimpleNamespace(max_tokens=256)
    loss = Finding("L2S110", "stand-in loss", None, {"tokens": 1, "loss_us": 12.0})
    req = GateRequest(sched, None, None, None, None, 2, 1, linted={1: []})
    assert loss_gate(cfg, req, vcfg, logging.getLogger("t"), lint=lint) == ""
    assert calls == [2, 4, 8]
    with pytest.raises(PredictedLoss, match="predicted slower at M=1 by 12 us"):
        loss_gate(cfg, GateRequest(sched, None, None, None, None, 2, 1, {1: [loss]}),
                  vcfg, logging.getLogger("t"), lint=lint)
