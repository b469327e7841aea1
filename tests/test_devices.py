"""Device profiles: shipped ones load, bad ones name the file and key."""

import pytest

from l2sched.devices import device_names, load_device
from l2sched.errors import L2sInputError


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
    src = load_device("h200").path
    text = open(src).read().replace("fill_gbps = 2300", 'fill_gbps = "fast"')
    text = text.replace("kernel_gap_us = 1.5", "")
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(L2sInputError) as e:
        load_device(str(p))
    msg = str(e.value)
    assert f"{p}: bandwidth.fill_gbps: expected a number" in msg
    assert f"{p}: latency.kernel_gap_us: missing" in msg
    assert e.value.diagnostics[0].span.line > 1


def test_adding_a_device_is_adding_a_file(tmp_path):
    src = load_device("h200").path
    p = tmp_path / "my-gpu.toml"
    p.write_text(open(src).read().replace('name = "h200"', 'name = "my-gpu"'))
    assert load_device(str(p)).name == "my-gpu"
