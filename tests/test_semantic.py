"""Semantic-stage tests: settings, sizes, selectors, windows, extends, set
lines and --set overrides resolve as docs/language.md says, and every
semantic error has its message and position asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2sched.errors import L2sSemanticError
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.lang.schedule import SET_ASIDE_MAX
from l2sched.units import UNITS

SCHEDULES = Path(__file__).resolve().parent.parent / "schedules"
HEAD = "schedule s\nmodel glm5next\ndevice h200\ntp 4\n"  # lines 1-4
W = "window A at layer.entry budget 1MB"  # line 5 when appended to HEAD


def load(text: str, overrides=(), path="t.l2s"):
    return load_schedule_text(text, path, overrides)


def errors(text: str, overrides=()) -> list[tuple[str, int, int]]:
    """(message, line, column) of every diagnostic ``check`` reports."""
    with pytest.raises(L2sSemanticError) as info:
        load(text, overrides)
    return [(d.message, d.span.line, d.span.column) if d.span else (d.message, 0, 0)
            for d in info.value.diagnostics]


def one(text: str, overrides=()) -> tuple[str, int, int]:
    (e,) = errors(text, overrides)
    return e


# -------------------------------------------------------------------------
# constructs


def test_defaults():
    s = load(HEAD)
    assert (s.name, s.model, s.device, s.tp) == ("s", "glm5next", "h200", 4)
    assert (s.ep, s.max_tokens, s.policy, s.set_aside) == (False, 256, "evict_last", 0)
    assert len(s.layer_kinds) == 45 and s.windows == ()


def test_settings():
    s = load(HEAD + "ep on\nmax_tokens 64\npolicy evict_first\nset_aside 40MiB\n")
    assert (s.ep, s.max_tokens, s.policy, s.set_aside) == (True, 64, "evict_first",
                                                           40 * 2**20)
    assert load(HEAD + "set_aside max\n").set_aside == SET_ASIDE_MAX
    assert load(HEAD + "set_aside 0\n").set_aside == 0
    assert load(HEAD + "policy evict_normal\nep off\n").policy == "evict_normal"


@pytest.mark.parametrize("size,nbytes", [
    ("1B", 1), ("20KB", 20_000), ("20MB", 20_000_000), ("2GB", 2_000_000_000),
    ("4KiB", 4096), ("7.5MiB", 7_864_320), ("1GiB", 2**30), ("7.5MB", 7_500_000),
])
def test_sizes(size, nbytes):
    assert load(HEAD + f"window A at layer.entry budget {size}\n").window("A").budget \
        == nbytes
    assert set(UNITS) == {"B", "KB", "MB", "GB", "KiB", "MiB", "GiB"}


@pytest.mark.parametrize("selector,layers", [
    ("all", list(range(45))),
    ("dense", [0, 1, 2]),
    ("mla", [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43]),
    ("kda & moe", [i for i in range(3, 45) if i % 4 != 3]),
    ("3..5", [3, 4, 5]),
    ("44", [44]),
    ("0, 2..3", [0, 2, 3]),
    ("moe except mla, 4..40", [41, 42, 44]),
    ("(kda except 0..40) & moe", [41, 42, 44]),
    ("kda & (dense, 44)", [0, 1, 2, 44]),
])
def test_layer_selectors(selector, layers):
    s = load(HEAD + f"{W} layers {selector}\n")
    assert list(s.window("A").layers) == layers


def test_window_defaults_to_every_layer_and_keeps_targets_in_order():
    s = load(HEAD + W + " {\n this b, a\n next lazy c.* except c.d\n}\n")
    w = s.window("A")
    assert w.layers == tuple(range(45)) and w.carry is None and w.index == 0
    assert [t.scope for t in w.targets] == ["this", "next"]
    assert [p.text for p in w.targets[0].patterns] == ["b", "a"]


def test_carry_to_later_window():
    s = load(HEAD + W + " carry B\nwindow B at layer.exit budget 2MB\n")
    assert s.window("A").carry == "B"
    # same hook point: the window declared later fires later
    s = load(HEAD + W + " carry B\nwindow B at layer.entry budget 2MB\n")
    assert s.window("A").carry == "B"


def test_set_lines_apply_after_the_windows_they_name():
    s = load(HEAD + "set window.A.budget = 2MiB\nset window.A.layers = moe\n"
             "set window.A.at = layer.exit\nset policy = evict_first\nset tp = 2\n"
             + W + " carry B\nwindow B at layer.exit budget 1MB\n"
             "set window.A.carry = none\n")
    a = s.window("A")
    assert (a.budget, a.hook, a.layers[0], a.carry) == (2 * 2**20, "layer.exit", 3, None)
    assert (s.policy, s.tp) == ("evict_first", 2)
    assert s.spans["tp"].line == 9


def test_cli_overrides_win_over_set_lines():
    s = load(HEAD + W + "\nset window.A.budget = 2MB\n",
             ["window.A.budget=3MB", " policy = evict_normal "])
    assert s.window("A").budget == 3_000_000 and s.policy == "evict_normal"


def test_extends_shipped_and_relative(tmp_path):
    s = load('schedule half\nextends "glm53-flash-sm120-tp4.l2s"\n'
             "set window.B.budget = 25MB\ntp 2\n")
    assert s.window("B").budget == 25_000_000 and s.tp == 2
    assert s.window("C").budget == 15_000_000
    base = tmp_path / "base.l2s"
    base.write_text(HEAD + W + "\n")
    top = tmp_path / "sub" / "top.l2s"
    top.parent.mkdir()
    top.write_text('schedule top\nextends "../base.l2s"\nwindow B at layer.exit '
                   'budget 1MB\n')
    s = load_schedule(top)
    assert [w.name for w in s.windows] == ["A", "B"]
    assert s.files == (str(top.parent / "../base.l2s"), str(top))


def test_shipped_schedules_resolve():
    s = load_schedule(SCHEDULES / "glm53-flash-sm120-tp4.l2s")
    assert {w.name: w.budget for w in s.windows} == {
        "A": 20_000_000, "A_MLA": 36_000_000, "B": 50_000_000, "C": 15_000_000}
    assert s.window("B").carry == "C"
    assert not any(i in s.window(w).layers for w in "ABC" for i in (0, 1, 2))
    half = load_schedule(SCHEDULES / "glm53-flash-sm120-tp4-300w.l2s")
    assert {w.name: w.budget for w in half.windows} == {
        "A": 10_000_000, "A_MLA": 18_000_000, "B": 25_000_000, "C": 7_500_000}
    post = load_schedule(SCHEDULES / "glm53-flash-sm120-tp4-post-ar.l2s")
    assert (post.window("B").hook, post.window("C").budget) == (
        "attn.post_all_reduce", 20_000_000)
    assert load_schedule(SCHEDULES / "glm53-flash-h200-tp4.l2s").device == "h200"


# -------------------------------------------------------------------------
# errors: sizes


def test_size_without_unit():
    assert one(HEAD + "window A at layer.entry budget 20\n") == (
        "budget 20 has no unit; write e.g. 20MB (units: B, KB, MB, GB, KiB, MiB, GiB)",
        5, 32)


def test_unknown_unit_suggests():
    assert one(HEAD + "window A at layer.entry budget 20Mb\n") == (
        "unknown size unit 'Mb'; did you mean 'MB'?", 5, 32)
    assert one(HEAD + "window A at layer.entry budget 20XY\n") == (
        "unknown size unit 'XY' (units: B, KB, MB, GB, KiB, MiB, GiB)", 5, 32)
    # never a one-letter guess: 'B' for 'TB' would be 10^12 times off
    assert one(HEAD + "window A at layer.entry budget 20TB\n") == (
        "unknown size unit 'TB' (units: B, KB, MB, GB, KiB, MiB, GiB)", 5, 32)


def test_fractional_bytes():
    assert one(HEAD + "window A at layer.entry budget 1.5B\n") == (
        "budget 1.5B is not a whole number of bytes", 5, 32)


# -------------------------------------------------------------------------
# errors: settings


def test_unknown_model():
    assert one("schedule s\nmodel glm5nxt\ndevice h200\ntp 4\n") == (
        "unknown model adapter 'glm5nxt'; did you mean 'glm5next'?", 2, 7)


def test_unknown_device():
    assert one("schedule s\nmodel glm5next\ndevice h20\ntp 4\n") == (
        "unknown device profile 'h20'; did you mean 'h200'?", 3, 8)


def test_unknown_policy_and_ep():
    assert one(HEAD + "policy evict_lst\n") == (
        "unknown cache policy 'evict_lst'; did you mean 'evict_last'?", 5, 8)
    assert one(HEAD + "ep maybe\n") == ("unknown ep value 'maybe' (one of: on, off)",
                                        5, 4)


def test_quoted_name():
    assert one('schedule s\nmodel "glm5next"\ndevice h200\ntp 4\n') == (
        "model adapter takes a name, not a string: write glm5next without quotes",
        2, 7)


def test_bad_numbers():
    assert one("schedule s\nmodel glm5next\ndevice h200\ntp 0\n") == (
        "tp must be at least 1, got 0", 4, 4)
    assert one("schedule s\nmodel glm5next\ndevice h200\ntp four\n") == (
        "tp takes a whole number, got 'four'", 4, 4)
    assert one(HEAD + "max_tokens 1.5\n") == (
        "max_tokens takes a whole number, got '1.5'", 5, 12)
    assert one(HEAD + "set_aside 5\n") == (
        "set_aside takes a size (e.g. 40MB), 'max', or 0 to leave the driver limit "
        "alone; got '5'", 5, 11)


def test_unknown_setting_in_set():
    assert one(HEAD + "set polcy = evict_last\n") == (
        "unknown setting 'polcy'; did you mean 'policy'?", 5, 5)
    assert one(HEAD + W + "\nset window.A.budgte = 1MB\n") == (
        "unknown setting 'window.A.budgte'; did you mean 'window.A.budget'?", 6, 5)


def test_duplicate_setting():
    assert one(HEAD + "tp 2\n") == (
        "'tp' is set twice in this file (first at t.l2s:4:1)", 5, 1)


def test_missing_model_device_tp_all_reported():
    assert errors("schedule s\n") == [
        ("schedule 's' has no 'model' setting (write e.g. 'model glm5next')", 1, 10),
        ("schedule 's' has no 'device' setting (write e.g. 'device h200')", 1, 10),
        ("schedule 's' has no 'tp' setting (write e.g. 'tp 4')", 1, 10)]


# -------------------------------------------------------------------------
# errors: windows


def test_unknown_hook_suggests_and_lists():
    with pytest.raises(L2sSemanticError) as info:
        load(HEAD + "window A at attn.pre_allreduce budget 1MB\n")
    (d,) = info.value.diagnostics
    assert (d.message, d.span.line, d.span.column) == (
        "unknown hook point 'attn.pre_allreduce'; did you mean 'attn.pre_all_reduce'?",
        5, 13)
    assert d.notes[0].startswith("glm5next hook points: layer.entry, ")


def test_duplicate_window():
    assert one(HEAD + W + "\nwindow A at layer.exit budget 1MB\n") == (
        "window 'A' is already defined at t.l2s:5:8", 6, 8)


def test_duplicate_window_from_base():
    msg, line, col = one('schedule s\nextends "glm53-flash-sm120-tp4.l2s"\n'
                         "window B at layer.exit budget 1MB\n")
    assert msg.startswith("window 'B' is already defined at ")
    assert msg.endswith("in the base schedule; change it with "
                        "'set window.B.budget = ...' and friends")
    assert (line, col) == (3, 8)


def test_duplicate_clause():
    assert one(HEAD + W + " budget 2MB\n") == (
        "window 'A' has a second 'budget' clause", 5, 43)
    assert one(HEAD + W + " at layer.exit\n") == (
        "window 'A' has a second 'at' clause", 5, 39)


def test_missing_at_and_budget():
    assert errors(HEAD + "window A\n") == [
        ("window 'A' has no hook point; add 'at HOOK' (e.g. at attn.pre_all_reduce)",
         5, 8),
        ("window 'A' has no budget; add e.g. 'budget 20MB'", 5, 8)]


def test_hook_not_firing_in_selected_layers():
    assert one(HEAD + "window A at moe.pre_all_reduce budget 1MB layers all\n") == (
        "hook point 'moe.pre_all_reduce' does not fire in layers 0..2 (kda+dense) "
        "selected by window 'A'", 5, 50)
    assert one(HEAD + "window A at mlp.pre_all_reduce budget 1MB\n")[1:] == (5, 13)


def test_selector_errors():
    assert one(HEAD + W + " layers kdaa\n") == (
        "unknown layer selector 'kdaa'; did you mean 'kda'?", 5, 43)
    assert one(HEAD + W + " layers blue\n") == (
        "unknown layer selector 'blue' (one of: all, kda, mla, dense, moe, an index "
        "or a range)", 5, 43)
    assert one(HEAD + W + " layers 45\n") == (
        "layer 45 does not exist; the model has layers 0..44", 5, 43)
    assert one(HEAD + W + " layers 5..3\n") == (
        "empty layer range 5..3 (ranges are lo..hi, inclusive)", 5, 43)
    assert one(HEAD + W + " layers 1.5\n") == (
        "layer index '1.5' must be a whole number", 5, 43)
    assert one(HEAD + W + " layers kda & mla\n") == (
        "the layer selector of window 'A' selects no layer", 5, 43)
    assert one(HEAD + W + " layers dense except 0..2\n") == (
        "the layer selector of window 'A' selects no layer", 5, 43)


def test_carry_errors():
    assert one(HEAD + W + " carry Bx\nwindow B at layer.exit budget 1MB\n") == (
        "carry to unknown window 'Bx'; did you mean 'B'?", 5, 42)
    assert one(HEAD + W + " carry A\n") == ("window 'A' carries into itself", 5, 42)
    assert one(HEAD + "window A at layer.exit budget 1MB carry B\n"
               "window B at layer.entry budget 1MB\n") == (
        "carry from window 'A' (layer.exit) to 'B' (layer.entry) goes back in time: "
        "bytes can only carry to a window that fires later in the layer", 5, 41)
    assert one(HEAD + "window B at layer.entry budget 1MB\n" + W + " carry B\n") == (
        "carry from window 'A' (layer.entry) to 'B' (layer.entry) goes back in time: "
        "bytes can only carry to a window that fires later in the layer", 6, 42)


def test_unbalanced_bracket_in_pattern():
    assert one(HEAD + W + " { this a[b }\n") == ("unbalanced '[' in pattern 'a[b'", 5, 43)


# -------------------------------------------------------------------------
# errors: extends, set, --set


def test_extends_missing(tmp_path):
    top = tmp_path / "top.l2s"
    top.write_text('schedule s\nextends "nope.l2s"\nset window.A.budget = 1MB\n')
    with pytest.raises(L2sSemanticError) as info:
        load_schedule(top)
    (d,) = info.value.diagnostics  # no cascade of missing settings/windows
    assert d.message == f"cannot extend 'nope.l2s': no such file ({tmp_path}/nope.l2s)"
    assert (d.span.line, d.span.column) == (2, 9)


def test_extends_cycle(tmp_path):
    a, b = tmp_path / "a.l2s", tmp_path / "b.l2s"
    a.write_text('schedule a\nextends "b.l2s"\n')
    b.write_text('schedule b\nextends "a.l2s"\n')
    with pytest.raises(L2sSemanticError) as info:
        load_schedule(a)
    (d,) = info.value.diagnostics
    assert d.message == f"extends cycle: {a} -> {b} -> {a}"
    assert (d.span.path, d.span.line, d.span.column) == (str(b), 2, 9)


def test_set_on_unknown_window():
    assert one(HEAD + W + "\nset window.Z.budget = 1MB\n") == ("unknown window 'Z'", 6, 5)
    assert one(HEAD + W + "\nset window.a.budget = 1MB\n") == (
        "unknown window 'a'; did you mean 'A'?", 6, 5)


def test_set_value_errors_point_into_the_line():
    with pytest.raises(L2sSemanticError) as info:
        load(HEAD + W + "\nset window.A.budget = 20 MB\n")
    (d,) = info.value.diagnostics
    assert (d.message, d.span.line, d.span.column) == (
        "unexpected 'MB' (write a size without a space, e.g. 20MB)", 6, 26)
    assert d.source_line == "set window.A.budget = 20 MB"
    assert d.notes == ("expected the end of the value",)
    assert one(HEAD + W + "\nset window.A.carry = 5MB\n") == (
        "window.A.carry takes a name, got '5MB'", 6, 22)
    assert one(HEAD + W + "\nset window.A.budget = 5\n") == (
        "budget 5 has no unit; write e.g. 5MB (units: B, KB, MB, GB, KiB, MiB, GiB)",
        6, 23)


def test_bad_cli_set_syntax():
    with pytest.raises(L2sSemanticError) as info:
        load(HEAD, ["window.A.budget"])
    (d,) = info.value.diagnostics
    assert d.message == "--set takes KEY=VALUE, e.g. --set window.B.budget=25MB"
    assert str(d.span) == "--set #1:1:1"


def test_cli_set_errors_name_the_argument():
    with pytest.raises(L2sSemanticError) as info:
        load(HEAD + W + "\n", ["tp=2", "window.A.budget=20 MB", "window.Q.at=x"])
    got = [(d.message, str(d.span)) for d in info.value.diagnostics]
    assert got == [
        ("unexpected 'MB' (write a size without a space, e.g. 20MB)", "--set #2:1:20"),
        ("unknown window 'Q'", "--set #3:1:1")]
    assert info.value.diagnostics[0].source_line == "window.A.budget=20 MB"


def test_all_errors_in_one_run():
    text = (HEAD + "policy evict_lst\n"
            "window A at attn.pre_allreduce budget 20\n"
            "window B at layer.exit budget 1MB layers 99 carry Q\n"
            "window B at layer.exit budget 1MB\n"
            "set window.Z.budget = 1MB\n")
    assert [(line, col) for _, line, col in errors(text)] == [
        (5, 8), (6, 13), (6, 39), (7, 42), (7, 51), (8, 8), (9, 5)]


def test_carry_into_window_sharing_no_layer():
    """Found by a new-user trial: this used to pass check and lint silently."""
    text = (HEAD + "window A at attn.after_first_proj budget 1MB layers kda & moe "
            "carry B\nwindow B at attn.pre_all_reduce budget 1MB layers mla\n")
    with pytest.raises(L2sSemanticError) as info:
        load_schedule_text(text, "t.l2s")
    (d,) = info.value.diagnostics
    assert d.message.startswith("window 'A' carries into 'B', but they share no layer")
    assert (d.span.line, d.span.column) == (5, 69)  # the carry target


# -------------------------------------------------------------------------
# attacker findings: no cascades, no recursion crashes, size limits


SHIPPED_H200 = str(SCHEDULES / "glm53-flash-h200-tp4.l2s")


@pytest.mark.parametrize("override", ["window.B.layers=999", "model=llama"])
def test_no_shared_layer_cascade_after_a_layer_error(override):
    with pytest.raises(L2sSemanticError) as info:
        load_schedule(SHIPPED_H200, [override])
    text = str(info.value)
    assert "share no layer" not in text and "fires in ," not in text
    assert len(info.value.diagnostics) == 1


def test_extends_chain_depth_is_limited(tmp_path):
    (tmp_path / "f0.l2s").write_text(HEAD)
    for i in range(1, 200):
        (tmp_path / f"f{i}.l2s").write_text(f'schedule f{i}\nextends "f{i - 1}.l2s"\n')
    ((msg, line, col),) = errors_of(load_schedule, str(tmp_path / "f199.l2s"))
    assert msg == "extends chain deeper than 64 files" and (line, col) == (2, 9)


def errors_of(fn, *args):
    with pytest.raises(L2sSemanticError) as info:
        fn(*args)
    return [(d.message, d.span.line, d.span.column) for d in info.value.diagnostics]


def test_extends_chain_of_64_files_loads(tmp_path):
    (tmp_path / "f0.l2s").write_text(HEAD)
    for i in range(1, 64):
        (tmp_path / f"f{i}.l2s").write_text(f'schedule f{i}\nextends "f{i - 1}.l2s"\n')
    assert len(load_schedule(str(tmp_path / "f63.l2s")).files) == 64


def test_deeply_nested_selector_is_a_syntax_error():
    from l2sched.errors import L2sSyntaxError
    deep = "(" * 200 + "moe" + ")" * 200
    with pytest.raises(L2sSyntaxError) as info:
        load(HEAD + W + f" layers {deep}\n")
    d = info.value.diagnostics[0]
    assert d.message == "layer selector nested deeper than 32 parentheses"
    assert (d.span.line, d.span.column) == (5, 43 + 32)
    with pytest.raises(L2sSemanticError, match=r"--set #1:1:\d+: layer selector nested"):
        load(HEAD + W + "\n", [f"window.A.layers={deep}"])


def test_selector_nested_32_deep_resolves_and_formats():
    from l2sched.lang.formatter import format_text
    deep = "(" * 32 + "moe" + ")" * 32
    s = load(HEAD + W + f" layers {deep}\n")
    assert s.windows[0].layers
    # parentheses that change nothing are not kept (issue 43)
    assert format_text(HEAD + W + f" layers {deep}\n", "t.l2s").endswith(" layers moe\n")


def test_budget_above_one_terabyte_is_an_error():
    msg, line, col = one(HEAD + "window A at layer.entry budget "
                         "1000000000000000000000000000000B\n")
    assert msg == ("budget 1000000000000000000000000000000B is larger than any "
                   "device memory (at most 1000GB = 10^12 B)") and (line, col) == (5, 32)
    assert load(HEAD + "window A at layer.entry budget 1000GB\n").windows[0].budget \
        == 10**12
    assert "larger than any device memory" in one(HEAD + "set_aside 2000GB\n")[0]


def test_format_size_is_exact_for_large_ints():
    from l2sched.units import format_size
    assert format_size(10**30) == "1000000000000000000000000.00 MB"
    assert format_size(52_559_872) == "52.56 MB" and format_size(38_625_000) == "38.62 MB"
    assert format_size(1500) == "1.5 KB" and format_size(999) == "999 B"
    assert format_size(999_999) == "1000.0 KB"


def test_set_value_with_a_newline_is_a_usage_error():
    from l2sched.errors import L2sUsageError
    with pytest.raises(L2sUsageError, match=r"--set #2: the value contains a newline"):
        load(HEAD + W + "\n", ["window.A.budget=2MB",
                               "window.A.budget=25MB\nwindow.A.layers=1"])


def test_item16_no_cascading_or_missing_selector_errors():
    """``model glm5nxt`` with ``layers 5..3`` printed "layer 5 does not
    exist; the model has layers 0..-1" twice at one position and never
    reported the empty range. An index is checked against the model's layers
    only when they are known; a range is checked once (whole numbers, then
    empty, then past the last layer); the same error is never repeated."""
    assert errors("schedule s\nmodel glm5nxt\ndevice h200\ntp 4\n"
                  "window B at layer.entry budget 10MB layers 5..3\n") == [
        ("unknown model adapter 'glm5nxt'; did you mean 'glm5next'?", 2, 7),
        ("empty layer range 5..3 (ranges are lo..hi, inclusive)", 5, 44)]
    # no model at all (or a model config that failed): no "layers 0..-1"
    assert errors("schedule s\ndevice h200\ntp 4\n"
                  "window B at layer.entry budget 10MB layers 5, 50..60\n") == [
        ("schedule 's' has no 'model' setting (write e.g. 'model glm5next')", 1, 10)]
    # a range past the end, both ends bad: one error, not two
    assert errors(HEAD + W + " layers 50..60\n") == [
        ("layer 60 does not exist; the model has layers 0..44", 5, 43)]
    assert errors(HEAD + W + " layers 1.5..2.5\n") == [
        ("layer index '1.5' must be a whole number", 5, 43)]
    # an empty range past the end is reported as empty, once
    assert errors(HEAD + W + " layers 60..50\n") == [
        ("empty layer range 60..50 (ranges are lo..hi, inclusive)", 5, 43)]
    # the same layer twice in one selector: each occurrence at its own place
    assert errors(HEAD + W + " layers 45, 45\n") == [
        ("layer 45 does not exist; the model has layers 0..44", 5, 43),
        ("layer 45 does not exist; the model has layers 0..44", 5, 47)]
