"""Gain rule: the predicted decode step is slower with prefetch than
without, beyond the noise floor (L2S110).

The prediction is the lint's own: ``LintRun.step_period("sim")`` (with the
schedule's fills) minus ``step_period("base")`` (the same graph without
fills) on the device profile the lint ran with, at the run's M
(``--tokens``; with several, one finding per M that loses). The floor is the
one ``l2sched fit`` must beat to choose prefetch over no prefetch
(``lint.noise.noise_floor_us``: the A/A noise floor per M of the measured
out-of-sample validation run on the lent H200,
``benchmarks/results/h200-2026-12-01-validation-2.md``, 3.9 / 17.2 / 17.3 /
31.1 us at M = 1 / 4 / 16 / 64, other M the log-nearest measured M), so a
schedule the lint reports here is one the fit would not have written. The
vLLM plugin's gate (``on_predicted_loss``) reads this finding at every
decode batch size it captures.

``l2sched fit`` does not run this family per candidate (``fit.evaluate``):
its objective is the same judgement on the lower bound of the gain.
"""

from __future__ import annotations

from l2sched.lint.noise import AA_NOISE_FLOOR_SOURCE, noise_floor_us
from l2sched.lint.rules.base import Finding, Rule

RULES = (
    Rule(
        "L2S110", "predicted-net-loss", "warning",
        what=("the predicted decode step at the lint's M (`--tokens`; one finding per M that\n"
              "loses) is slower with the schedule's fills than without prefetch by more than the\n"
              "noise floor at that M. The message names M, the predicted microseconds and the floor."),
        why=("a schedule predicted to lose costs every decode step it runs in; the lint's other\n"
             "rules can all pass while the fills' costs (launches, bandwidth taken from GEMMs and\n"
             "all-reduces, bytes evicted before use) outweigh what they save. The floor is the A/A\n"
             "noise floor per M that `l2sched fit` must beat to choose prefetch (3.9 / 17.2 / 17.3 /\n"
             "31.1 us at M = 1 / 4 / 16 / 64, benchmarks/results/h200-2026-12-01-validation-2.md;\n"
             "other M: the log-nearest), so the two agree. Measured: `glm53-flash-h200-tp4.l2s\n"
             "--set tp=1`, predicted 1.5 / 1.0 / 0.4 / 0.2% slower at M = 1 / 4 / 16 / 64, ran\n"
             "0.7 / 5.1 / 9.0% slower under vLLM (issue 31). The vLLM plugin keeps prefetch off\n"
             "when this finding occurs at a captured batch size (`on_predicted_loss`, docs/vllm.md)."),
        example=("the shipped H200 schedule on the measured `h200` profile (real NCCL all-reduces)."),
        fix=("run `l2sched fit` on the device profile (it writes no prefetch when nothing beats the\n"
             "floor), or drop the windows the summary table shows costing layer time; suppress with\n"
             "`# l2s: ignore[L2S110]` on the `device` line for a schedule measured to help."),
        example_command="l2sched lint schedules/glm53-flash-h200-tp4.l2s --select L2S110"),
)


def predicted_loss_us(run) -> float:
    """Predicted step-time loss (us) of a ``LintRun``: the step with the
    schedule's fills minus the step without (positive = slower)."""
    return run.step_period("sim") - run.step_period("base")


def check(run) -> list[Finding]:
    """L2S110 over ``run`` (a ``LintRun``): one finding when the predicted
    loss at ``run.tokens`` is above the noise floor there."""
    m = run.tokens
    loss = predicted_loss_us(run)
    floor = noise_floor_us(m)
    if loss <= floor:
        return []
    sched = run.schedule
    sim, base = run.step_period("sim"), run.step_period("base")
    span = sched.spans.get("device")
    if span is None and sched.windows:
        span = sched.windows[0].spans.get("name") or sched.windows[0].span
    msg = (f"predicted decode step at M={m} is {loss:.1f} us slower with prefetch than "
           f"without ({sim:.0f} us vs {base:.0f} us on {run.device_profile.name}, "
           f"{loss / base:+.1%}), beyond the {floor:g} us noise floor at M={m}")
    return [Finding("L2S110", msg, span,
                    {"tokens": m, "loss_us": round(loss, 3),
                     "step_us": round(sim, 3), "base_us": round(base, 3),
                     "noise_floor_us": floor,
                     "noise_floor_source": AA_NOISE_FLOOR_SOURCE})]
