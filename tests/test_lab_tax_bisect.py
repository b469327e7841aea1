"""The dispatch-tax bisection (``lab/experiments/tax_bisect``, issue 48) on
CPU: rung parsing, the table, and a dry run of two rungs (the meta device:
the swapped step bodies defer to the real ones, so the wiring of the parts
into ``bench run`` is exercised without a GPU)."""

from __future__ import annotations

import json

import pytest
from extras import TORCH_MISSING

from lab.experiments import tax_bisect as tb


def test_rung_parts_expand_aliases_and_refuse_unknown_parts():
    assert tb.rung_parts("real") == ()
    assert tb.rung_parts("synthetic") == ("stream", "tfill", "torchsync")
    assert tb.rung_parts("noaux+synthetic+noaux") == ("noaux", "stream", "tfill", "torchsync")
    assert tb.rung_parts("xstream+pstream") == ("xstream", "pstream")
    with pytest.raises(ValueError, match="unknown part cublas"):
        tb.rung_parts("stream+cublas")
    with pytest.raises(ValueError, match="unknown part"):
        tb.rung_parts("+")


def test_table_rows_per_rung_and_m_with_missing_arms_and_errors():
    results = {"real": {"4": {"none_us": 5000.0, "floor_us": 12.5,
                              "arms": {"compiled": 40.0, "A0.5-fork": -90.25}}},
               "stream": {"error": "rc=1: OSError: gone"}}
    md = tb.table(results).splitlines()
    assert md[0].startswith("| rung | M | none step, us | A/A floor, us | compiled | A0.5-fork")
    assert md[2].startswith("| real | 4 | 5000 | 12.5 | +40.0 | -90.2 | - |")
    assert "rc=1: OSError: gone" in md[3]


def test_dry_rungs_write_their_bench_results_and_tables(tmp_path):
    pytest.importorskip("torch", reason=TORCH_MISSING)  # bench run --dry runs the step on torch's CPU
    assert tb.main(["-o", str(tmp_path), "--dry", "--rungs", "real,noaux+conn1",
                    "--tokens", "4", "--replays", "1"]) == 0
    for r in ("real", "noaux+conn1"):
        run = json.loads(open(tb.rung_path(str(tmp_path), r), encoding="utf-8").read())
        names = [a["name"] for a in run["arms"]]
        assert names[:2] == ["none", "none-aa"]
        assert [v.split(":")[0] for v in tb.VARIANTS] == names[-len(tb.VARIANTS):]
    summary = json.loads((tmp_path / "tax-bisect.json").read_text(encoding="utf-8"))
    assert summary["rungs"] == ["real", "noaux+conn1"]
    assert set(summary["gains"]) == {"real", "noaux+conn1"}
    assert (tmp_path / "tax-bisect.md").read_text(encoding="utf-8").startswith("| rung |")


def test_grid_arms_launch_the_lone_windows_with_each_cta_count():
    """``--grids 8,32`` adds windows A and C alone with ``fork`` and ``grid=N``
    per count, after the fixed arms; a count that is not a positive integer is
    refused naming it."""
    assert tb.variants() == tb.VARIANTS
    extra = tb.variants(tb.parse_grids("8, 32"))[len(tb.VARIANTS):]
    assert [v.split(":", 1)[0] for v in extra] == [
        "A0.5-fork-g8", "C0.5-fork-g8", "A0.5-fork-g32", "C0.5-fork-g32"]
    assert all(v.endswith(f",launch=fork,grid={g}") for v, g in zip(extra, (8, 8, 32, 32)))
    argv = tb.bench_argv("o.json", "4", 3, True, (8,))
    assert argv.count("--variant") == len(tb.VARIANTS) + 2
    for bad in ("0", "x", "-1"):
        with pytest.raises(ValueError, match=repr(bad)):
            tb.parse_grids(f"8,{bad}")


def test_bad_rungs_arms_and_outputs_stop_before_anything_runs(tmp_path, capsys):
    """An unknown rung part, an arm the bench would refuse, a duplicate CTA
    count, a non-ASCII digit, no replay or an output that is a file: exit 2
    naming it, no rung run."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for argv, why in ((["--rungs", "bogus"], "unknown part bogus"),
                      (["--arm", "x:grid=abc"], "grid takes grid=N"),
                      (["--grids", "8,8"], "given twice"),
                      (["--grids", "\u00b2"], "is not a CTA count"),
                      (["--replays", "0"], "--replays must be at least 1"),
                      (["-o", str(afile)], "exists and is not a folder")):
        out = ["-o", str(tmp_path / "o")] if "-o" not in argv else []
        with pytest.raises(SystemExit) as e:
            tb.main(out + ["--rungs", "real", "--dry"] + argv)
        assert e.value.code == 2 and why in capsys.readouterr().err, argv
    assert not (tmp_path / "o").exists()
