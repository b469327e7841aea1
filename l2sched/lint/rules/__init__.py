"""The lint rules: a registry of rule families, like ruff's.

Each family module (``targets``, ``modes``, ``timing``, ``size``,
``gain``, ``device_terms``, ``launch``, ``left_over``) holds, per rule code, its ``Rule`` record (name, severity,
the documentation ``docs/lint.md`` prints: what, why, example, fix) and one
``check(run)`` that returns the family's ``Finding``s for a ``LintRun``.
``RULES`` maps every code to its ``Rule``; ``check_all`` runs the families
in ``FAMILIES`` order; ``rules_markdown`` is the rule section of
``docs/lint.md`` (a test compares the committed file). Spans come from the
schedule (the window's ``at``/``budget``/``carry`` clause or the target or
pattern that named a tensor).
"""

from __future__ import annotations

from l2sched.lint.rules import (device_terms, gain, launch, left_over, modes, size,
                                targets, timing)
from l2sched.lint.rules.base import (
    REGISTRY,
    Finding,
    Rule,
    check_suppressions,
    code_ranges,
    code_selected,
    parse_suppression,
    suppressed,
)

#: The input-error pseudo-rule: schedules, configs, profiles or traces that
#: stop the lint before any rule runs (reported with ``--format json|sarif``).
INPUT_ERROR = Rule(
    "L2S000", "input-error", "error",
    what=("the schedule (or its `extends` base, `--set` line, model config or device profile)\n"
         "has an error that stops the lint before any rule runs: syntax, unknown names, a TP degree\n"
         "the model cannot split at."),
    why=("with `--format json|sarif`, a CI step still gets a document to read (one `L2S000`\n"
         "result per error, at the error's file:line:col); the human message goes to stderr and the\n"
         "exit code is 1, as for `l2sched check`."),
    example=(""),
    fix=("run `l2sched check` on the file and fix what it reports."))

#: Rule families in the order their checks run.
FAMILIES = (targets, modes, timing, size, gain, device_terms, launch, left_over)

#: code -> ``Rule``, sorted by code.
RULES: dict[str, Rule] = dict(sorted(REGISTRY.items()))


def check_all(run) -> list[Finding]:
    """Every family's findings for ``run`` (a ``LintRun``), unselected and
    unsuppressed, in family order."""
    out: list[Finding] = []
    for family in FAMILIES:
        out += family.check(run)
    return out


def rules_markdown(example_output=None) -> str:
    """The rule sections of ``docs/lint.md``, one per code in code order;
    ``example_output(rule)`` gives the finding a rule's ``example_command``
    prints (``cli.docs.rule_example_output``), quoted under its example."""
    return "\n".join(rule.markdown(example_output(rule) if example_output and
                                    rule.example_command else "")
                     for rule in RULES.values())


__all__ = ["FAMILIES", "INPUT_ERROR", "RULES", "Finding", "Rule", "check_all",
           "check_suppressions", "code_ranges", "code_selected", "parse_suppression",
           "rules_markdown", "suppressed"]
