"""lab/experiments/perop_gain.py: per-op savings, measured and the lint's."""

from l2sched.lint.run import lint_path
from lab.experiments.perop_gain import measured_savings, predicted_savings


def test_measured_savings_sum_main_stream_ops_over_layers():
    none = {"0:moe.gate": {"dur_us": 10.0, "stream": "main"},
            "1:moe.gate": {"dur_us": 9.0, "stream": "main"},
            "0:shared.w13": {"dur_us": 5.0, "stream": "aux"},
            "2:moe.sum": {"dur_us": 4.0, "stream": "main"}}
    arm = {"0:moe.gate": {"dur_us": 8.0, "stream": "main"},
           "1:moe.gate": {"dur_us": 8.5, "stream": "main"},
           "0:shared.w13": {"dur_us": 1.0, "stream": "aux"}}
    got = measured_savings(none, arm)
    assert got == {"moe.gate": 2.5}  # aux-stream ops and ops the arm lacks are left out


def test_predicted_savings_are_the_simulated_op_durations_without_minus_with_prefetch():
    run = lint_path("schedules/glm53-flash-h200-tp4.l2s", tokens=1)
    got = predicted_savings(run)
    # prefetch makes the projections its windows fetch faster in the simulation
    assert got["attn.o_proj"] > 0
    # without windows A and A_MLA (o_proj's) the simulation saves o_proj nothing
    off = predicted_savings(lint_path("schedules/glm53-flash-h200-tp4.l2s",
                                      ["window.A.budget=0MB", "window.A_MLA.budget=0MB"], tokens=1))
    assert abs(off["attn.o_proj"]) < 0.05 * got["attn.o_proj"]


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    from lab.experiments.perop_gain import main
    trimmed = "benchmarks/results/h100-2026-12-07-issue45-second-attempt/r2.json.gz"
    assert main([trimmed, "--profile", "h200", "-o", str(tmp_path / "o.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"perop_gain: {trimmed}: M=1 has no per-op records")
    assert not (tmp_path / "o.json").exists()
    # the output is checked before any work, and never one of the inputs
    assert main([trimmed, "--profile", "h200", "-o", trimmed]) == 1
    assert "refusing to overwrite the input file" in capsys.readouterr().err
