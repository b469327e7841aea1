"""Issue 32: where every number of a device profile came from, unmeasured
terms named and never free (fit, lint, ``unmeasured_terms``), the fit's
bound covering the recorded run-to-run spread, and L2S111 for a fill
kernel shape over the device's shared memory per block."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_profile import PROV, synthetic_results

from l2sched.device import load_device, load_device_text
from l2sched.device.provenance import (field_origins, profile_fields,
                                       unmeasured_terms)
from l2sched.errors import L2sInputError
from l2sched.fit import FitOptions, Search
from l2sched.fit.bound import pessimistic_profile
from l2sched.lint import lint_path
from l2sched.model.config import default_config
from l2sched.model.inventory import analytical_inventory
from l2sched.profile.origins import default_profile_name
from l2sched.profile.write import derive, profile_toml

SM120 = "sm120-rtx-pro-6000-maxq"
H200_TEXT = load_device("h200").source_text


def _write(tmp_path, text, name="p.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _without_collectives() -> str:
    """The shipped h200 profile as `l2sched profile` wrote it before [origin]
    existed, without --collectives: no allreduce_slowdown lines."""
    text = H200_TEXT[:H200_TEXT.index("\n# Where the numbers came from")] + "\n"
    return re.sub(r"^allreduce_slowdown = .*\n", "", text, flags=re.M)


def test_shipped_profiles_name_the_origin_of_every_field():
    h200 = field_origins(load_device("h200"))
    assert set(h200) == set(profile_fields(load_device("h200")))
    # the collective terms were measured with NCCL on two H200s, with a repeat
    assert h200["fill.copy.allreduce_slowdown"].measured
    assert h200["fill.copy.allreduce_slowdown"].spread() == (1.046, 1.135)
    assert h200["latency.small_kernel_us"].kind == "base"
    assert h200["allreduce.tp4"].kind == "estimate"
    assert h200["allreduce.tp2"].measured
    sm = field_origins(load_device(SM120))
    assert sm and not any(o.measured for o in sm.values())


def test_unmeasured_terms_depend_on_tp_and_kernels():
    h200 = load_device("h200")
    at1, at4 = unmeasured_terms(h200, 1), unmeasured_terms(h200, 4)
    assert "allreduce.tp4 (estimate)" in at4 and not any("allreduce" in t for t in at1)
    old = load_device_text(_without_collectives(), "old.toml")
    got = unmeasured_terms(old, 4, {"copy"})
    assert "fill.copy.allreduce_slowdown (not measured)" in got
    assert not any("fill.bulk" in t for t in got)
    assert not any("allreduce_slowdown" in t for t in unmeasured_terms(old, 1))


def test_origin_entries_are_checked_at_their_key(tmp_path):
    bad = H200_TEXT + '"l2.byts" = { kind = "measured" }\n'
    with pytest.raises(L2sInputError) as e:
        load_device(_write(tmp_path, bad))
    assert "origin.l2.byts: names no field of this profile; did you mean 'l2.bytes'" in str(e.value)
    bad = H200_TEXT + '"l2.bytes" = { kind = "guessed" }\n'
    with pytest.raises(L2sInputError, match=r"p\.toml:\d+:\d+: origin\.l2\.bytes: kind must"):
        load_device(_write(tmp_path, bad))
    bad = H200_TEXT + '"l2.bytes" = { kind = "estimate" }\n'
    with pytest.raises(L2sInputError, match="names its source"):
        load_device(_write(tmp_path, bad))


def _derived(base, prov):
    inv = analytical_inventory(default_config("glm5next"), tp=4, ep=False)
    derived = derive(synthetic_results(), base, inv, prov)
    return derived, profile_toml("mine", "test", prov, derived, base)


def test_written_profile_names_the_origin_of_every_field(tmp_path):
    base = load_device("h200")
    _, text = _derived(base, PROV)
    dev = load_device(_write(tmp_path, text))
    written = {k for k in re.findall(r'^"([^"]+)" = \{ kind', text.split("\n[origin]\n")[1],
                                     flags=re.M)}
    assert written == set(profile_fields(dev))
    o = field_origins(dev)
    assert o["bandwidth.dram_read_gbps"].measured
    assert (o["bandwidth.dram_read_gbps"].p10, o["bandwidth.dram_read_gbps"].p90) == \
        (3900.0, 4100.0)
    # same GPU as the base: the unmeasured numbers are the base's, named as kept
    assert o["latency.small_kernel_us"].kind == "base"
    assert o["fill.copy.allreduce_slowdown"].kind == "base"
    assert o["fill.copy.allreduce_slowdown"].base_kind == "measured"
    assert dev.fill_modes["copy"].allreduce_slowdown == base.fill_modes["copy"].allreduce_slowdown


def test_a_profile_of_another_gpu_carries_no_h200_numbers(tmp_path):
    base = load_device("h200")
    other = {**PROV, "gpu": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
             "compute_capability": [12, 0], "sms": 188, "l2_bytes": 134_217_728,
             "set_aside_max_bytes": 84_000_000}
    _, text = _derived(base, other)
    dev = load_device(_write(tmp_path, text))
    o = field_origins(dev)
    for key in ("latency.small_kernel_us", "latency.attention_core_us",
                "latency.fill_slowdown_scale", "allreduce.tp2", "allreduce.tp4",
                "fill.copy.allreduce_slowdown", "fill.bulk.allreduce_slowdown"):
        assert o[key].kind == "conservative", key
        assert "another GPU" in o[key].source
    # pessimistic for a schedule: shorter idle time, larger slowdowns
    assert dev.small_kernel_us < base.small_kernel_us
    assert dev.allreduce[4].latency_us < base.allreduce[4].latency_us
    assert dev.fill_modes["copy"].allreduce_slowdown >= 3.0 > \
        base.fill_modes["load"].allreduce_slowdown
    assert dev.fill_slowdown_scale >= 1.5
    # no number of the base's GPU is kept as if it were this one's
    assert not any(x.kind == "base" for x in o.values())
    # nor its name: `l2sched profile` without --name names the GPU measured
    assert default_profile_name(base, other) == \
        "measured-nvidia-rtx-pro-6000-blackwell-max-q-workstation-edition"
    assert default_profile_name(base, PROV) == "h200"  # the base describes this GPU
    assert default_profile_name(base, {**PROV, "gpu": ""}) == "measured-gpu"


def test_fit_without_the_measured_all_reduce_slowdown_withholds_its_windows(tmp_path):
    """The issue's case: a profile written without --collectives, then
    `fit --tp 4`: no windows unless --allow-unmeasured, and it says why."""
    dev = load_device_text(_without_collectives(), "nocoll.toml")
    opts = FitOptions(tp=4, tokens=(1, 4, 16, 64), quick=True)
    got = Search(dev, opts).run()
    assert got.candidate is None and got.withheld is not None
    assert got.withheld.candidate.chains
    assert any("allreduce_slowdown (not measured) at TP4" in w and "--collectives" in w
               for w in got.unmeasured_blocking)
    allowed = Search(dev, dataclasses.replace(opts, allow_unmeasured=True)).run()
    assert allowed.candidate == got.withheld.candidate
    assert allowed.unmeasured_blocking == got.unmeasured_blocking


def test_fit_cli_says_unmeasured_in_its_header_and_on_stderr(tmp_path, capsys):
    from l2sched.cli.main import main
    prof = _write(tmp_path, _without_collectives(), "nocoll.toml")
    out = tmp_path / "fit.l2s"
    assert main(["fit", "--device", prof, "--tp", "4", "--quick", "-q", "-o", str(out)]) == 0
    text = out.read_text()
    assert "# UNMEASURED: no windows written" in text and "\nwindow " not in text
    assert "l2sched profile --collectives 4" in capsys.readouterr().err  # N = the fit's TP
    assert main(["fit", "--device", prof, "--tp", "4", "--quick", "-q",
                 "--allow-unmeasured", "-o", str(out)]) == 0
    text = out.read_text()
    assert "# UNVERIFIED (--allow-unmeasured)" in text and "\nwindow " in text
    assert "--allow-unmeasured" in text.split("# Command:")[1]


def test_a_quick_profile_is_not_for_fitting():
    dev = load_device_text(_without_collectives(), "nocoll.toml")
    quick = dataclasses.replace(dev, provenance={**dev.provenance, "quick": True})
    got = Search(quick, FitOptions(tp=4, tokens=(1, 4, 16, 64), quick=True)).run()
    assert got.candidate is None and got.withheld is not None
    assert any("--quick" in w and "not for fitting" in w for w in got.unmeasured_blocking)


def _no_slowdown_h200():
    """The shipped h200 profile, its [origin] repeats kept, without the
    fill-vs-all-reduce slowdown (so a TP4 fit finds windows to decide on)."""
    text = re.sub(r"^allreduce_slowdown = .*\n", "", H200_TEXT, flags=re.M)
    text = re.sub(r'^"fill\.\w+\.allreduce_slowdown" = .*\n', "", text, flags=re.M)
    return load_device_text(text, "h200-no-ar-slowdown.toml")


def _perturbed(dev, frac: float):
    """``dev`` with measured numbers moved ``|frac|`` of the way from their
    value toward one end of their recorded spread (p10/p90, repeats): the
    low end of the fill effects for ``frac > 0``, the high end otherwise;
    the recorded spreads themselves unchanged."""
    o = field_origins(dev)
    fills = {}
    for mode, fm in dev.fill_modes.items():
        lo, hi = o[f"fill.{mode}.effect"].spread() or (fm.effect, fm.effect)
        eff = fm.effect + abs(frac) * ((lo if frac > 0 else hi) - fm.effect)
        fills[mode] = dataclasses.replace(
            fm, effect=eff, landed=tuple((mb, min(1.0, y * eff / fm.effect))
                                         for mb, y in fm.landed))
    m = dev.measured
    dram = m["bandwidth.dram_read_gbps"]
    gap = m["latency.kernel_gap_us"]
    return dataclasses.replace(
        dev, fill_modes=fills,
        dram_read_gbps=dram["median"] + frac * (dram["p90"] - dram["median"]),
        kernel_gap_us=gap["median"] + frac * (gap["p10"] - gap["median"]))


def test_profiles_within_their_recorded_spread_give_one_bound_and_one_decision():
    dev = _no_slowdown_h200()
    a, b = _perturbed(dev, 0.8), _perturbed(dev, -0.6)
    assert a.fill_modes["bulk"].effect != b.fill_modes["bulk"].effect
    assert a.dram_read_gbps != b.dram_read_gbps
    la, lb = pessimistic_profile(a)[0], pessimistic_profile(b)[0]
    # the pessimistic corners are the spreads' ends: the same for both profiles
    for mode in dev.fill_modes:
        fa, fb = la.fill_modes[mode], lb.fill_modes[mode]
        assert fa.effect == pytest.approx(fb.effect)
    assert la.dram_read_gbps == pytest.approx(lb.dram_read_gbps)
    opts = FitOptions(tp=4, tokens=(1, 4, 16, 64), quick=True, allow_unmeasured=True)
    ra, rb = Search(a, opts).run(), Search(b, opts).run()
    assert ra.candidate is not None and ra.candidate == rb.candidate
    for (_, _, _, lba, _), (_, _, _, lbb, _) in zip(ra.rows, rb.rows):
        assert lba == pytest.approx(lbb, abs=1.0)


def test_l2s111_names_the_shape_the_runtime_fits_a_copy_kernel_to(tmp_path):
    sm = load_device(SM120).source_text
    copy = ("\n[fill.copy]\ngrid = 66\nthreads = 32\nchunk = 32768\nstages = 4\n"
            "gbps = 1500\neffect = 0.9\nlaunch_us = 3.0\nsource = \"test: the H200's shape\"\n")
    text = sm.replace("\n[allreduce]\n", copy + "\n[allreduce]\n", 1)
    prof = _write(tmp_path, text, "sm120-copy.toml")
    sched = _write(tmp_path, open("schedules/glm53-flash-sm120-tp4.l2s").read().replace(
        "device sm120-rtx-pro-6000-maxq", f'device "{prof}"\nkernel copy', 1), "s.l2s")
    run = lint_path(sched, select=["L2S111"])
    (f,) = run.findings
    assert "132,096 B shared memory" in f.message and "101,376 B" in f.message
    assert "fits it to copy grid=66 threads=32 chunk=32768 stages=3 (99,328 B" in f.message
    assert f.data["fitted"] == {"chunk": 32768, "stages": 3, "smem_bytes": 99_328}
    # the same shape fits the H200: no finding
    assert not lint_path("schedules/glm53-flash-h200-tp4.l2s", select=["L2S111"]).findings


def test_l2s112_names_unmeasured_terms_of_the_schedules_tp():
    run = lint_path("schedules/glm53-flash-h200-tp4.l2s", select=["L2S112"])
    (f,) = run.findings
    assert "allreduce.tp4 (estimate)" in f.data["terms"] and f.data["tp"] == 4
    run = lint_path("schedules/glm53-flash-sm120-tp4.l2s", select=["L2S112"])
    assert "is an estimate" in run.findings[0].message
