"""Issue 17 item 3: device identity. Profiles are matched on what the driver
reports (name, L2 size, SM count, compute capability), a schedule whose
device does not match the GPU keeps prefetch off, and a user's own profile
file can be named in the schedule (``device "gb10.toml"``), on the CLI
(``--device FILE`` for check, compile, explain, lint, timeline) and in the
plugin configuration (``"device"``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from l2sched.errors import L2sInputError, L2sPluginError, L2sSemanticError
from l2sched.device import device_names, load_device
from l2sched.device import GpuIdentity, identity_mismatches, matching_profiles

ROOT = Path(__file__).resolve().parent.parent
SM120 = ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"

H200 = GpuIdentity("NVIDIA H200", 62914560, 132, (9, 0))
GB10 = GpuIdentity("NVIDIA GB10", 24 * 2**20, 48, (12, 1))
H100 = GpuIdentity("NVIDIA H100 80GB HBM3", 50 * 2**20, 132, (9, 0))
RTX5090 = GpuIdentity("NVIDIA GeForce RTX 5090", 96 * 2**20, 170, (12, 0))
PRO6000 = GpuIdentity("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                      134217728, 188, (12, 0))


def _replace_once(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` made ``new``; fails the test when
    ``old`` is not there exactly once (the shipped profile's layout moved)."""
    assert text.count(old) == 1, f"{old!r} is in the profile {text.count(old)} times"
    return text.replace(old, new)


def _gb10_profile(tmp_path: Path) -> Path:
    """A user's profile for the GB10: the SM120 profile with the GB10's
    identity, shared-memory limit and L2 (numbers for the test, not
    measurements; every field the SM120 profile's ``[origin]`` names is
    still written). Its L2 numbers are its own: the SM120's set-aside,
    protected bytes and effective L2 (``l2.effective_bytes``, at most twice
    ``l2.bytes``) would not fit a 24 MiB L2; the effective L2 and the
    shared-memory limit are the shipped gb10 profile's
    (``l2sched/data/devices/gb10.toml``)."""
    text = (ROOT / "l2sched" / "data" / "devices" /
            "sm120-rtx-pro-6000-maxq.toml").read_text()
    gb10 = load_device("gb10")
    for old, new in (('name = "sm120-rtx-pro-6000-maxq"', 'name = "gb10"'),
                     ("compute_capability = [12, 0]", "compute_capability = [12, 1]"),
                     ("\nbytes = 134217728", f"\nbytes = {24 * 2**20}"),
                     ("set_aside_max_bytes = 84000000", "set_aside_max_bytes = 15000000"),
                     ("evict_last_protected_bytes = 33333333",
                      "evict_last_protected_bytes = 10000000"),
                     ("effective_bytes = 85000000", f"effective_bytes = {gb10.effective_l2_bytes}")):
        text = _replace_once(text, old, new)
    lines = [ln for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("[gpu]"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("["))
    lines[start:end] = ["[gpu]", 'names = ["NVIDIA GB10"]', "sm_count = 48",
                        "smem_per_block_optin_bytes = "
                        f"{gb10.smem_per_block_optin_bytes}", ""]
    p = tmp_path / "profiles" / "gb10.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n")
    return p


def test_item03_shipped_profiles_carry_the_driver_identity():
    for name in device_names():
        p = load_device(name)
        assert p.gpu_names and p.sm_count and p.compute_capability, name
    h200 = load_device("h200")
    assert (h200.gpu_names, h200.sm_count, h200.l2_bytes,
            h200.compute_capability) == (("NVIDIA H200",), 132, 62914560, (9, 0))
    sm120 = load_device("sm120-rtx-pro-6000-maxq")
    assert sm120.sm_count == 188 and sm120.l2_bytes == 134217728
    assert sm120.compute_capability == (12, 0)
    gb10 = load_device("gb10")  # issue 45 item 4, docs/sources.md#gb10
    assert (gb10.gpu_names, gb10.sm_count, gb10.l2_bytes,
            gb10.compute_capability) == (("NVIDIA GB10",), 48, 25165824, (12, 1))


def test_item03_matching_on_name_l2_and_sms():
    assert matching_profiles(H200) == ["h200"]
    assert matching_profiles(PRO6000) == ["sm120-rtx-pro-6000-maxq"]
    assert matching_profiles(GB10) == ["gb10"]  # shipped since issue 45
    # same capability as a shipped profile, different GPU: no match
    assert matching_profiles(RTX5090) == []
    assert matching_profiles(H100) == []
    why = identity_mismatches(load_device("h200"), H100)
    assert any("L2" in w for w in why) and any("name" in w for w in why), why
    why = identity_mismatches(load_device("sm120-rtx-pro-6000-maxq"), GB10)
    assert len(why) == 4, why  # name, L2, SMs, capability


def test_item03_profile_identity_is_validated(tmp_path):
    p = _gb10_profile(tmp_path)
    p.write_text(p.read_text().replace("sm_count = 48", 'sm_count = "48"'))
    with pytest.raises(L2sInputError, match=r"gb10.toml:\d+:1: gpu.sm_count"):
        load_device(p)
    p.write_text(p.read_text().replace('sm_count = "48"', "sm_count = 48\ncolour = 1"))
    with pytest.raises(L2sInputError, match=r"gpu.colour: unknown key"):
        load_device(p)


# --------------------------------------------------------------------------
# the plugin's check against the GPU


def _fake_torch(monkeypatch, gpu: GpuIdentity):
    import torch

    from l2sched.runtime import kernel as K

    props = types.SimpleNamespace(name=gpu.name, L2_cache_size=gpu.l2_bytes,
                                  multi_processor_count=gpu.sm_count,
                                  major=gpu.compute_capability[0],
                                  minor=gpu.compute_capability[1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=0: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda d=0: gpu.compute_capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=0: gpu.name)
    monkeypatch.setattr(K, "device_supported", lambda d=0: (True, ""))


def test_item03_plugin_refuses_a_gpu_the_schedule_was_not_written_for(monkeypatch):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.vllm.plugin import checked_device_profile

    _fake_torch(monkeypatch, GB10)
    with pytest.raises(L2sPluginError) as e:
        checked_device_profile("cuda", "sm120-rtx-pro-6000-maxq")
    assert e.value.what == "device mismatch"
    d = e.value.detail
    for part in ("sm120-rtx-pro-6000-maxq", "NVIDIA GB10", "25,165,824 B L2",
                 "48 SMs", "sm_121", "the shipped profile gb10 matches", '"device"'):
        assert part in d, (part, d)
    # docs/devices.md shows this very line (item 17: examples from the tool)
    docs = (ROOT / "docs" / "devices.md").read_text()
    assert f"l2sched: TP rank 0/4: prefetch OFF: {e.value}\n" in docs
    # a GPU no shipped profile describes is told to write one
    _fake_torch(monkeypatch, RTX5090)
    with pytest.raises(L2sPluginError) as e:
        checked_device_profile("cuda", "sm120-rtx-pro-6000-maxq")
    assert "no shipped profile matches this GPU: write one" in e.value.detail


def test_item03_plugin_names_the_matching_shipped_profile(monkeypatch):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.vllm.plugin import checked_device_profile

    _fake_torch(monkeypatch, H200)
    with pytest.raises(L2sPluginError, match="the shipped profile h200 matches"):
        checked_device_profile("cuda", "sm120-rtx-pro-6000-maxq")
    assert checked_device_profile("cuda", "h200").name == "h200"


def test_item03_plugin_takes_a_user_profile_file(monkeypatch, tmp_path):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.vllm.plugin import checked_device_profile

    prof = _gb10_profile(tmp_path)
    _fake_torch(monkeypatch, GB10)
    got = checked_device_profile("cuda", str(prof))
    assert got.name == "gb10" and got.path == str(prof)
    # the dry-run backend checks no GPU
    assert checked_device_profile("dry-run", "h200").name == "h200"
    with pytest.raises(L2sPluginError, match="bad device profile"):
        checked_device_profile("dry-run", str(tmp_path / "missing.toml"))


# --------------------------------------------------------------------------
# naming a profile file in the schedule and on the CLI


def _schedule_with_device(tmp_path: Path, device_line: str) -> Path:
    text = SM120.read_text().replace("device sm120-rtx-pro-6000-maxq", device_line)
    p = tmp_path / "gb10.l2s"
    p.write_text(text)
    return p


def test_item03_schedule_names_a_profile_file(tmp_path):
    from l2sched.lang.resolve import load_schedule

    prof = _gb10_profile(tmp_path)
    p = _schedule_with_device(tmp_path, 'device "profiles/gb10.toml"')
    s = load_schedule(p)
    assert s.device == str(prof)  # relative to the schedule's directory
    stand_in = load_device(s.device)
    assert stand_in.name == "gb10"
    assert (stand_in.l2_bytes, stand_in.capacity_bytes) == (
        24 * 2**20, load_device("gb10").effective_l2_bytes)  # its own L2, not the SM120's
    # a missing file is an error at the value, naming file:line:col
    p = _schedule_with_device(tmp_path, 'device "profiles/nope.toml"')
    with pytest.raises(L2sSemanticError) as e:
        load_schedule(p)
    d = e.value.diagnostics[0]
    assert d.span.path == str(p) and d.span.line == 9 and d.span.column == 8
    assert "nope.toml" in d.message
    p = _schedule_with_device(tmp_path, 'device "gb10.toml"')
    with pytest.raises(L2sSemanticError) as e:
        load_schedule(p)
    msg = e.value.diagnostics[0].message.replace(str(tmp_path) + os.sep, "")
    assert f"| `{msg}` (a profile file that is missing" in (
        ROOT / "docs" / "language.md").read_text()
    # a quoted shipped name is a file name: the message says to drop quotes
    p = _schedule_with_device(tmp_path, 'device "h200"')
    with pytest.raises(L2sSemanticError, match="without quotes"):
        load_schedule(p)


def _cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "l2sched", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


def test_item03_cli_device_file_for_check_compile_explain(tmp_path):
    prof = _gb10_profile(tmp_path)
    r = _cli("check", str(SM120), "--device", str(prof))
    assert r.returncode == 0, r.stderr
    assert f"on {prof}," in r.stdout
    out = tmp_path / "plan.json"
    r = _cli("compile", str(SM120), "--device", str(prof), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["device"] == str(prof)
    r = _cli("explain", str(SM120), "--device", str(prof), "--layer", "3")
    assert r.returncode == 0, r.stderr
    r = _cli("check", str(SM120), "--device", str(tmp_path / "missing.toml"))
    assert r.returncode == 1 and "missing.toml" in r.stderr
    r = _cli("check", str(SM120), "--device", "h20O")
    assert r.returncode == 1 and "did you mean 'h200'" in r.stderr


def test_item03_fmt_keeps_a_device_path(tmp_path):
    _gb10_profile(tmp_path)
    p = _schedule_with_device(tmp_path, 'device "profiles/gb10.toml"')
    r = _cli("fmt", "--check", str(p))
    assert r.returncode in (0, 1), r.stderr
    r = _cli("fmt", str(p))
    assert 'device "profiles/gb10.toml"' in p.read_text()
