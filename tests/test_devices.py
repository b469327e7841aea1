"""Device profiles: shipped ones load, bad ones name the file and key."""

import pytest

from l2sched.errors import L2sInputError
from l2sched.device import device_names, load_device

#: A frozen copy of the h200 profile as it was before `l2sched profile`
#: measured it (2026-12-01): the parsing and validation tests edit its text,
#: so they keep working whatever the shipped profile's numbers become.
ESTIMATE = "tests/data/devices/h200-estimate.toml"


def test_shipped_profiles_load():
    assert {"h200", "sm120-rtx-pro-6000-maxq"} <= set(device_names())
    for name in device_names():
        d = load_device(name)
        assert d.l2_bytes > 0 and d.allreduce_us(4, 8192) > 0
        assert d.protected_bytes(0, "evict_last") <= d.l2_bytes
    sm = load_device("sm120-rtx-pro-6000-maxq")
    assert sm.l2_bytes == 134_217_728 and sm.set_aside_max_bytes == 84_000_000
    assert sm.protected_bytes(-1, "evict_last") == 84_000_000


def test_unknown_name_suggests():
    with pytest.raises(L2sInputError, match="did you mean 'h200'"):
        load_device("h20")


def test_bad_profile_names_file_and_key(tmp_path):
    src = ESTIMATE
    text = open(src).read().replace("fill_gbps = 2300", 'fill_gbps = "fast"')
    text = text.replace("kernel_gap_us = 1.5", "")
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    line = e.value.diagnostics[0].span.line
    assert f"{p}:{line}:1: bandwidth.fill_gbps: expected a number" in msg
    # a missing key is located at the header of its table
    header = text.splitlines().index("[latency]") + 1
    assert f"{p}:{header}:1: latency.kernel_gap_us: missing" in msg
    assert e.value.diagnostics[0].span.line > 1


def test_adding_a_device_is_adding_a_file(tmp_path):
    src = ESTIMATE
    p = tmp_path / "my-gpu.toml"
    p.write_text(open(src).read().replace('name = "h200"', 'name = "my-gpu"'))
    assert load_device(str(p)).name == "my-gpu"


def test_fit_allreduce_recovers_a_linear_model():
    from l2sched.device import fit_allreduce
    from l2sched.device import AllReduceModel
    true = AllReduceModel(9.5, 120.0)
    pts = [(b, true.time_us(b)) for b in (8192, 65536, 524288, 2097152)]
    m = fit_allreduce(pts, measured="2026-11-30", source="r.json")
    assert m.latency_us == pytest.approx(9.5) and m.busbw_gbps == pytest.approx(120.0)
    assert (m.measured, m.source) == ("2026-11-30", "r.json")
    with pytest.raises(ValueError, match="two or more"):
        fit_allreduce([(8192, 10.0), (8192, 11.0)])
    with pytest.raises(ValueError, match="does not grow"):
        fit_allreduce([(8192, 12.0), (2097152, 11.0)])


def test_write_allreduce_model_replaces_one_table(tmp_path):
    from l2sched.device import write_allreduce_model
    from l2sched.device import AllReduceModel
    src = open(ESTIMATE).read()
    p = tmp_path / "h200.toml"
    p.write_text(src)
    m = AllReduceModel(11.25, 97.5, "2026-11-30", "benchmarks/results/x.json")
    write_allreduce_model(str(p), 2, m, ("measured by a test",))
    d = load_device(str(p))
    assert d.allreduce[2] == AllReduceModel(11.25, 97.5, "2026-11-30",
                                            "benchmarks/results/x.json")
    old = load_device(ESTIMATE)
    assert d.allreduce[4] == old.allreduce[4] and d.allreduce[8] == old.allreduce[8]
    new = p.read_text()
    # everything outside [allreduce.tp2] is unchanged, byte for byte
    assert new.split("[allreduce.tp2]")[0] == src.split("[allreduce.tp2]")[0]
    assert new.split("[allreduce.tp4]")[1] == src.split("[allreduce.tp4]")[1]
    write_allreduce_model(str(p), 2, m, ("measured by a test",))
    assert p.read_text() == new          # idempotent
    write_allreduce_model(str(p), 16, m)
    assert load_device(str(p)).allreduce[16].latency_us == 11.25
    assert load_device(str(p)).allreduce_us(16, 0) == 11.25


def test_bad_measured_date_is_named(tmp_path):
    src = open(ESTIMATE).read()
    p = tmp_path / "x.toml"
    # a profile with a measured table gets a bad date; one without gets one added
    if 'measured = "' in src:
        import re
        bad = re.sub(r'measured = "[^"]*"', 'measured = "30.11.2026"', src, count=1)
    else:
        bad = src.replace("[allreduce.tp2]\n", '[allreduce.tp2]\nmeasured = "30.11.2026"\n')
    assert bad != src
    p.write_text(bad)
    with pytest.raises(L2sInputError, match="allreduce.tp2.measured: expected a date"):
        load_device(str(p))


def test_tp_result_fits_into_a_profile(tmp_path):
    """The fit reads its numbers from a `bench tp` result JSON (here a
    synthetic one with a known model) and writes [allreduce.tpW]."""
    import json

    from l2sched.profile.collective_terms import update_profile
    from lab.bench.tp_report import load
    from l2sched.device import AllReduceModel
    true = AllReduceModel(14.0, 80.0)
    sizes = [t * 8192 for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)]

    def row(b, skew):
        s = {"median": true.time_us(b) * skew, "p10": 0, "p90": 0, "n": 3}
        return {"bytes": b, "tokens": b // 8192, "model_us": 0, "model_ws_us": 0,
                "eager_us": {"median": 999.0}, "graph_us": s}
    d = {"kind": "l2sched bench tp", "date": "2026-11-30", "world_size": 2, "tp": 4,
         "backend": "nccl", "dry": False,
         "ranks": [{"machine": {"gpu": "NVIDIA H200", "nccl": "2.27.3"},
                    "allreduce": [row(b, k) for b in sizes]} for k in (0.98, 1.02)]}
    r = tmp_path / "r.json"
    r.write_text(json.dumps(d))
    prof = tmp_path / "h200.toml"
    prof.write_text(open(ESTIMATE).read())
    m, path = update_profile(load(str(r)), "benchmarks/results/r.json", str(prof))
    got = load_device(str(path)).allreduce[2]
    assert got.latency_us == pytest.approx(14.0, abs=0.01)
    assert got.busbw_gbps == pytest.approx(80.0, abs=0.1)
    assert got.measured == "2026-11-30" and got.source == "benchmarks/results/r.json"
    assert "2 x NVIDIA H200" in prof.read_text()


def _h200_with(tmp_path, *edits, name="x.toml"):
    """The shipped h200 profile with ``(old, new)`` text edits, as a file."""
    text = open(ESTIMATE).read()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_numbers_are_rejected(tmp_path, value):
    """inf made the lint's cost model loop forever; nan was accepted."""
    p = _h200_with(tmp_path, ("dram_read_gbps = 4080", f"dram_read_gbps = {value}"),
                   ("kernel_gap_us = 1.5", f"kernel_gap_us = {value}"),
                   ("latency_us = ", f"latency_us = {value} #"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    shown = value.lstrip("-") if value == "nan" else value
    assert f"bandwidth.dram_read_gbps: must be a finite number, got {shown}" in msg
    assert f"latency.kernel_gap_us: must be a finite number, got {shown}" in msg
    assert "latency_us: must be a finite number" in msg
    assert all(d.span is not None for d in e.value.diagnostics)


def test_lint_with_an_infinite_profile_does_not_hang(tmp_path):
    import subprocess
    import sys
    p = _h200_with(tmp_path, ("dram_read_gbps = 4080", "dram_read_gbps = inf"),
                   ("gemm_dram_gbps = 2333", "gemm_dram_gbps = inf"))
    r = subprocess.run([sys.executable, "-m", "l2sched", "lint",
                        "schedules/glm53-flash-h200-tp4.l2s", "--device", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "must be a finite number, got inf" in r.stderr
    assert "Traceback" not in r.stderr


def test_messages_name_the_file_once_and_say_positive(tmp_path):
    p = _h200_with(tmp_path, ("fill_gbps = 2300", "fill_gbps = -5"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    line = e.value.diagnostics[0].span.line
    assert msg.splitlines()[0] == f"{p}:{line}:1: bandwidth.fill_gbps: must be > 0, got -5"
    assert "1e-09" not in msg


def test_missing_section_has_no_stray_dot(tmp_path):
    text = open(ESTIMATE).read()
    text = text[:text.index("[allreduce]")]
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    assert f"{p}: allreduce: missing section [allreduce]" in str(e.value)
    assert "allreduce.:" not in str(e.value)


def test_non_utf8_profile_is_one_line(tmp_path):
    p = tmp_path / "b.toml"
    p.write_bytes(b'name = "x"\n\xff\xfe garbage\n')
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    assert str(e.value) == f"{p}: not valid UTF-8 (byte 0xff at offset 11)"


def test_fifo_profile_is_refused(tmp_path):
    """Reading a FIFO blocked forever (run in a subprocess with a timeout)."""
    import os
    import subprocess
    import sys
    p = tmp_path / "fifo.toml"
    os.mkfifo(p)
    code = ("import sys\nfrom l2sched.device import load_device\n"
            "from l2sched.errors import L2sInputError\n"
            "try:\n    load_device(sys.argv[1])\n"
            "except L2sInputError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True,
                       text=True, timeout=30)
    assert r.stdout.strip() == f"{p}: not a regular file"


def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path):
    p = _h200_with(tmp_path, ("small_kernel_us =", "smal_kernel_us ="),
                   ("busbw_gbps = ", "busbw = 3\nbusbw_gbps = "))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    assert "latency.smal_kernel_us: unknown key; did you mean 'small_kernel_us'?" in msg
    assert ".busbw: unknown key; did you mean 'busbw_gbps'?" in msg


def test_set_aside_max_above_l2_is_rejected(tmp_path):
    p = _h200_with(tmp_path, ("set_aside_max_bytes = 39321600",
                              "set_aside_max_bytes = 99999999999"))
    with pytest.raises(L2sInputError,
                       match=r"l2.set_aside_max_bytes: must not exceed l2.bytes"):
        load_device(str(p))


@pytest.mark.parametrize("old,new,message", [
    ("kernel_gap_us = 1.5", "kernel_gap_us = 1e300",
     "latency.kernel_gap_us: must be in 0..1e+06 us, got 1e+300"),
    ("gemm_dram_gbps = 2333", "gemm_dram_gbps = 1e-300",
     "bandwidth.gemm_dram_gbps: must be in 0.001..1e+06 GB/s, got 1e-300"),
    ("bytes = 62914560 ", "bytes = 100000000000000000000000000000 ",
     "l2.bytes: must be in 1..1e+15 B, got 1e+29"),
    ("fill_effect = 0.27", "fill_effect = 1.5",
     "l2.fill_effect: must be in 0..1, got 1.5"),
    ("busbw_gbps = 111.7", "busbw_gbps = 1e9",
     "allreduce.tp2.busbw_gbps: must be in 0.001..1e+06 GB/s, got 1e+09"),
    ("latency_us = 14.19", "latency_us = 2e6",
     "allreduce.tp2.latency_us: must be in 0..1e+06 us, got 2e+06"),
])
def test_huge_or_tiny_numbers_are_out_of_range(tmp_path, old, new, message):
    """kernel_gap_us = 1e300 crashed the lint (ZeroDivisionError);
    gemm_dram_gbps = 1e-300 gave 300-digit step times."""
    p = _h200_with(tmp_path, (old, new))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    line = next(i for i, s in enumerate(open(p), 1) if new in s)
    assert str(e.value).splitlines()[0] == f"{p}:{line}:1: {message}"


def test_lint_with_a_huge_kernel_gap_is_one_error(tmp_path):
    import subprocess
    import sys
    p = _h200_with(tmp_path, ("kernel_gap_us = 1.5", "kernel_gap_us = 1e300"))
    r = subprocess.run([sys.executable, "-m", "l2sched", "lint",
                        "schedules/glm53-flash-h200-tp4.l2s", "--device", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "latency.kernel_gap_us: must be in 0..1e+06 us" in r.stderr


def test_a_profile_needs_an_allreduce_table(tmp_path):
    import re
    text = open(ESTIMATE).read()
    text = re.sub(r"\[allreduce\.tp\d+\]\n(?:[^\[]*\n)*?(?=\[|\Z)", "", text)
    assert "[allreduce.tp" not in text and "[allreduce]" in text
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    line = text.splitlines().index("[allreduce]") + 1
    assert str(e.value).splitlines()[0] == (
        f"{p}:{line}:1: allreduce: needs at least one [allreduce.tpN] table "
        "(e.g. [allreduce.tp4] with latency_us and busbw_gbps)")


def test_unknown_top_level_keys_and_tables(tmp_path):
    p = _h200_with(tmp_path, ('name = "h200"', 'nmae = "x"\nname = "h200"'),
                   ("[latency]", "[weird]\nx = 1\n\n[latency]"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    assert ": nmae: unknown top-level key; did you mean 'name'?" in msg
    assert ": weird: unknown top-level table (known: " in msg
    assert all(d.span is not None for d in e.value.diagnostics)


@pytest.mark.parametrize("degree", ["0", "1025", "99999999999999999999999",
                                    "1" + "0" * 5000])
def test_allreduce_degree_is_bounded(tmp_path, degree):
    p = _h200_with(tmp_path, ("[allreduce.tp8]", f"[allreduce.tp{degree}]"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    assert "TP degree must be in 1..1024, got " in str(e.value)
    assert e.value.diagnostics[0].span is not None


def test_each_allreduce_key_is_reported_at_its_own_line(tmp_path):
    """latency_us = -1 was reported at busbw_gbps's line."""
    p = _h200_with(tmp_path, ("latency_us = 14.19", "latency_us = -1"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    line = next(i for i, s in enumerate(open(p), 1) if "latency_us = -1" in s)
    assert str(e.value).splitlines()[0] == (
        f"{p}:{line}:1: allreduce.tp2.latency_us: must be >= 0, got -1")


def test_bom_prefixed_profile_loads(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf" + open(ESTIMATE, "rb").read())
    assert load_device(str(p)).name == "h200"


def test_invalid_toml_is_located(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('name = "x"\nfoo = = 3\n')
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    assert str(e.value).splitlines()[0] == f"{p}:2:7: not valid TOML: Invalid value"


def test_item16_profile_table_errors_do_not_cascade(tmp_path):
    """A misspelled ``[bandwith]`` table gave its own error and then one
    "bandwidth.KEY: missing" per key of the table it should have been; a
    missing table gave one error per key. Now: the misspelling alone, and
    one "missing table" error."""
    text = open(load_device("h200").path).read()
    p = tmp_path / "typo.toml"
    p.write_text(text.replace("[bandwidth]", "[bandwith]"))
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    (d,) = e.value.diagnostics
    assert "bandwith: unknown top-level table; did you mean 'bandwidth'?" in d.message
    start = text.index("[latency]")
    end = text.index("\n[", start + 1)
    p.write_text(text[:start] + text[end + 1:])
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    (d,) = e.value.diagnostics
    assert d.message.startswith("latency: missing table [latency] (keys: ")
    assert str(d.span) == str(p)  # the whole file: no line to point at


def _nth_key(text: str, key: str, n: int, value: str) -> str:
    """``text`` with the value of the ``n``-th line ``key = ...`` set to ``value``."""
    lines = text.splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if ln.startswith(f"{key} = ")][n - 1]
    lines[at] = f"{key} = {value}\n"
    return "".join(lines)


def test_a_bad_key_in_the_default_fill_table_is_reported_once(tmp_path):
    """A bad value in ``[fill.copy]`` (the default kernel's table) is one
    problem at its key, not also a "no [fill.copy] table"."""
    from l2sched.device import profile_path
    text = profile_path("h200").read_text(encoding="utf-8")
    p = tmp_path / "neg.toml"
    p.write_text(_nth_key(text, "gemm_slowdown", 1, "-0.5"), encoding="utf-8")
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    assert "fill.copy.gemm_slowdown: must be >= 0, got -0.5" in msg
    assert "has no [fill.copy] table" not in msg


def test_an_unknown_fill_table_is_located_at_its_header(tmp_path):
    from l2sched.device import profile_path
    text = profile_path("h200").read_text(encoding="utf-8")
    p = tmp_path / "weird.toml"
    p.write_text(text + "\n[fill.weird]\ngbps = 1\n", encoding="utf-8")
    n = len(text.splitlines()) + 2
    with pytest.raises(L2sInputError, match=rf"weird\.toml:{n}:1: fill\.weird: unknown key"):
        load_device(str(p))


def test_profile_problems_come_in_file_order(tmp_path):
    from l2sched.device import profile_path
    text = profile_path("h200").read_text(encoding="utf-8")
    # [fill.copy] comes first and [fill.load] third in the shipped file
    text = _nth_key(_nth_key(text, "gemm_slowdown", 1, "-0.5"), "gemm_slowdown", 3, '"x"')
    text = text.replace("kernel_gap_us = 1.13", "kernel_gap_us = -2", 1)
    p = tmp_path / "multi.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    lines = [d.span.line for d in e.value.diagnostics]
    assert len(lines) == 3 and lines == sorted(lines)


def test_a_dotted_key_is_located_at_its_line(tmp_path):
    from l2sched.device import profile_path
    text = profile_path("h200").read_text(encoding="utf-8")
    p = tmp_path / "dot.toml"
    p.write_text(_nth_key(text, "allreduce_slowdown", 1, "1.0").replace(
        "allreduce_slowdown = 1.0", "allreduce_slowdown.x = 1.0", 1), encoding="utf-8")
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    line = next(i for i, ln in enumerate(p.read_text().splitlines(), 1)
                if ln.startswith("allreduce_slowdown.x"))
    assert str(e.value).startswith(f"{p}:{line}:1: fill.copy.allreduce_slowdown: expected a number")


_BAD_ENTRY = "{ m = [1, 4], cold_us = [1.0, 2.0], hot_us = [1.0, -2.0] }"
_HOT = "hot_us: -2.0 is not a time in 0..1e+06 us"
_GOOD_ENTRY = "{ m = [1, 4], cold_us = [1.0, 2.0], hot_us = [1.0, 0.5] }"


@pytest.mark.parametrize("tables, message, pointed", [
    # the usual form: the key inside the entry's inline table
    (f'[ops.glm5next."kda+moe"]\n"kda.in_proj" = {_BAD_ENTRY}\n',
     f"ops.glm5next.kda+moe.kda.in_proj: {_HOT}", ("hot_us = [1.0, -2.0]", "hot_us")),
    # a dotted key inside [ops.MODEL]
    (f'[ops.glm5next]\n"kda+moe"."kda.in_proj" = {_BAD_ENTRY}\n',
     f"ops.glm5next.kda+moe.kda.in_proj: {_HOT}", ("hot_us = [1.0, -2.0]", "hot_us")),
    # a dotted key inside [ops], the model part too
    (f'[ops]\nglm5next."kda+moe"."kda.in_proj" = {_BAD_ENTRY}\n',
     f"ops.glm5next.kda+moe.kda.in_proj: {_HOT}", ("hot_us = [1.0, -2.0]", "hot_us")),
    # the entry as a sub-table
    ('[ops.glm5next."kda+moe"."kda.in_proj"]\nm = [1, 4]\ncold_us = [1.0, 2.0]\n'
     'hot_us = [1.0, -2.0]\n',
     f"ops.glm5next.kda+moe.kda.in_proj: {_HOT}", ("hot_us = [1.0, -2.0]", "hot_us")),
    # the entry's keys dotted
    ('[ops.glm5next."kda+moe"]\n"kda.in_proj".m = [1, 4]\n"kda.in_proj".cold_us = [1.0, 2.0]\n'
     '"kda.in_proj".hot_us = [1.0, -2.0]\n',
     f"ops.glm5next.kda+moe.kda.in_proj: {_HOT}", ('"kda.in_proj".hot_us', "hot_us")),
    # a table of the old layout (no model part) serves any model, located as written
    (f'[ops."kda+moe"]\n"kda.in_proj" = {_BAD_ENTRY}\n',
     f"ops.kda+moe.kda.in_proj: {_HOT}", ("hot_us = [1.0, -2.0]", "hot_us")),
    # layer kinds, ops and models are the model's check (model.device_ops)
    (f'[ops.glm5next]\n"kda+moex"."kda.in_proj" = {_GOOD_ENTRY}\n',
     "ops.glm5next.kda+moex: unknown layer kind 'kda+moex'", ('"kda+moex"', "kda+moex")),
    (f'[ops.glm5next."kda+moe"]\n"kda.in_projx" = {_GOOD_ENTRY}\n',
     "ops.glm5next.kda+moe.kda.in_projx: unknown op of a kda+moe layer",
     ('"kda.in_projx"', "kda.in_projx")),
    (f'[ops.glm5nxt."kda+moe"]\n"kda.in_proj" = {_GOOD_ENTRY}\n',
     "ops.glm5nxt: unknown model 'glm5nxt'; did you mean 'glm5next'? (adapters: deepseek_v4, glm5next",
     ('[ops.glm5nxt."kda+moe"]', '[ops.glm5nxt."kda+moe"]')),
    (f'[ops."kda+moex"]\n"kda.in_proj" = {_GOOD_ENTRY}\n',
     "ops.kda+moex: unknown layer kind 'kda+moex'",
     ('[ops."kda+moex"]', '[ops."kda+moex"]')),
    ('[ops.glm5next]\n"kda+moe" = 3\n', "ops.glm5next.kda+moe: expected a table of ops",
     ('"kda+moe" = 3', "kda+moe")),
    ('[ops]\nglm5next = 3\n', "ops.glm5next: expected tables [ops.MODEL.",
     ('glm5next = 3', "glm5next")),
    ('[ops.glm5next."kda+moe"]\n"kda.in_proj" = { m = [1], cold_us = [1.0], hot_us = [1.0], '
     'x = 1 }\n',
     "ops.glm5next.kda+moe.kda.in_proj: unknown key 'x'", ("x = 1 }", "x")),
])
def test_an_ops_problem_is_located_at_its_key_in_every_toml_form(tmp_path, tables, message,
                                                                  pointed):
    """Each form TOML allows for an op entry gets the problem at the line
    and columns of the key it is about, whether the reader finds it (the
    values) or the model's check does (``check_device_ops``: models, layer
    kinds, ops)."""
    from l2sched.model.device_ops import check_device_ops
    text = open(ESTIMATE).read() + "\n" + tables
    p = tmp_path / "ops.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        check_device_ops(load_device(str(p)))
    (d,) = [d for d in e.value.diagnostics if d.message.startswith("ops.")]
    assert d.message.startswith(message)
    line_text, key = pointed
    lines = text.splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if line_text in ln)
    col = lines[line - 1].index(key, lines[line - 1].index(line_text)) + 1
    assert (d.span.line, d.span.column, d.span.end_column) == (line, col, col + len(key))


def test_an_old_op_table_serves_any_model_with_a_note(tmp_path):
    """``[ops."KIND"]`` (before op tables were keyed by model) names no
    model: it loads under ``*`` and serves a model without a table of its
    own; the profile's note says where and the fix."""
    text = open(ESTIMATE).read() + f'\n[ops."kda+moe"]\n"kda.in_proj" = {_GOOD_ENTRY}\n'
    p = tmp_path / "old.toml"
    p.write_text(text)
    device_profile = load_device(str(p))
    assert list(device_profile.ops) == ["*"]
    assert device_profile.op_times("glm5next")[("kda+moe", "kda.in_proj")].m == (1, 4)
    line = text.splitlines().index('[ops."kda+moe"]') + 1
    (note,) = device_profile.notes
    assert note.startswith(f"{p}:{line}:1: [ops.\"kda+moe\"]: op tables without a model "
                           "apply to every model; write [ops.MODEL.\"KIND\"]")


def test_a_top_level_ops_value_is_located_at_its_line(tmp_path):
    text = open(ESTIMATE).read()
    first_table = text.index("\n[") + 1
    p = tmp_path / "ops.toml"
    p.write_text(text[:first_table] + "ops = 3\n" + text[first_table:])
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    line = p.read_text().splitlines().index("ops = 3") + 1
    assert str(e.value).startswith(f"{p}:{line}:1: ops: expected tables")


def test_key_parts_reads_toml_dotted_keys():
    from l2sched.device.toml_keys import key_parts
    assert [p for p, _, _ in key_parts('ops . "kda+moe".\'a.b\' = 1')] == ["ops", "kda+moe", "a.b"]
    assert key_parts('"kda.in_proj".hot_us') == [("kda.in_proj", 1, 12), ("hot_us", 14, 20)]
    assert key_parts("two words = 1") is None
    assert key_parts('"open = 1') is None


def _located(tmp_path, text):
    """The diagnostics of a profile ``text`` (written to a file) and its lines."""
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    return e.value.diagnostics, text.splitlines()


def test_strings_are_never_taken_for_keys(tmp_path):
    """A multi-line string holding ``key = value`` or ``[table]`` lines, and a
    string on the entry's own line holding ``hot_us =``, left the problem at
    the string's content (or no line at all)."""
    text = open(ESTIMATE).read()
    fake = 'note = """\n[l2]\nbytes = 7\n[ops."kda+moe"]\n"kda.in_proj" = 1\n"""\n'
    text = text.replace("[l2]\n", fake.replace("note", "[provenance]\nnote", 1) + "[l2]\n", 1)
    text = text.replace("evict_normal_survival =", "evict_normal_survival = -1 #", 1)
    text += ('\n[ops."kda+moe"]\n"kda.in_proj" = { m = [1], cold_us = [1.0], '
             'step_m = [1], step_gap_us = [0.5], hot_us = [-1.0] } # hot_us = x\n'
             '"attn.o_proj" = { m = [1], cold_us = [1.0], hot_us = [1.0], step_m = [1], '
             "step_gap_us = [0.1], x = '{ hot_us = 1' }\n")
    diags, lines = _located(tmp_path, text)
    by = {d.message.split(":")[0]: d.span for d in diags}
    survival = by["l2.evict_normal_survival"]
    assert lines[survival.line - 1].startswith("evict_normal_survival = -1")
    hot = by["ops.kda+moe.kda.in_proj"]
    line = lines[hot.line - 1]
    assert line.startswith('"kda.in_proj" = { m = [1]') and \
        hot.column == line.index("hot_us = [-1.0]") + 1
    x = by["ops.kda+moe.attn.o_proj"]
    assert x.column == lines[x.line - 1].index("x = '") + 1


def test_quoted_keys_are_matched_by_their_value(tmp_path):
    """Escapes and single quotes in keys, and a key path through nested
    inline tables, are located."""
    text = open(ESTIMATE).read() + (
        '\n[ops."kda\\u002Bmoe"]\n"kda\\u002ein_proj" = { m = [1], cold_us = [1.0], '
        "hot_us = [-1.0] }\n[ops]\n'mla+moe' = { 'attn.o_proj' = { 'm' = [1], "
        "'cold_us' = [1.0], 'hot_us' = [-2.0] } }\n")
    diags, lines = _located(tmp_path, text)
    by = {d.message.split(":")[0]: d.span for d in diags}
    for where, key in (("ops.kda+moe.kda.in_proj", "hot_us = [-1.0]"),
                       ("ops.mla+moe.attn.o_proj", "hot_us' = [-2.0]")):
        span = by[where]
        assert span.column == lines[span.line - 1].index(key) + 1, where


def test_every_bad_field_of_an_ops_entry_is_reported_in_one_run(tmp_path):
    text = open(ESTIMATE).read() + (
        '\n[ops."kda+moe"."kda.in_proj"]\nm = [0, 1]\ncold_us = [-1.0, 2.0]\n'
        'hot_us = ["a", 2.0]\nstep_m = [4, 1]\nstep_gap_us = [1.0]\nbogus = 1\n')
    diags, lines = _located(tmp_path, text)
    got = [(lines[d.span.line - 1].split(" =")[0], d.message.split(": ", 2)[1])
           for d in diags if d.message.startswith("ops.")]
    assert got == [("m", "m"), ("cold_us", "cold_us"), ("hot_us", "hot_us"),
                   ("step_m", "step_m"), ("bogus", "unknown key 'bogus' (known")]


def test_a_header_with_a_hash_in_a_quoted_part_is_underlined_whole(tmp_path):
    from l2sched.model.device_ops import check_device_ops
    text = open(ESTIMATE).read() + '\n[ops."k#x"]  # a comment\n'
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        check_device_ops(load_device(str(p)))
    (d,) = [d for d in e.value.diagnostics if d.message.startswith("ops.k#x: unknown model")]
    assert (d.span.column, d.span.end_column) == (1, len('[ops."k#x"]') + 1)


def test_deeply_nested_values_are_an_error_not_a_traceback(tmp_path):
    p = tmp_path / "deep.toml"
    p.write_text("x = " + "[" * 600 + "]" * 600 + "\n")
    with pytest.raises(L2sInputError, match="nested too deeply"):
        load_device(str(p))
