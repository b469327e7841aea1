"""Lint output: human (compiler style + per-layer-kind summary), JSON, SARIF.

Summary columns, per (layer kind, window), means over the layers of that
kind: bytes per fill (MB = 10^6 B), fill finish time after the fork (us),
slack between the fill's finish and the expert stream's start (us; negative =
overlap; ``-`` when the window fires after the expert stream), the predicted
L2 hit fraction of the bytes at their consumers, and the predicted change of
the layer's time against the no-prefetch baseline (us).
"""

from __future__ import annotations

import json
from collections import defaultdict

from l2sched.lint import rules
from l2sched.units import format_table

TOOL_URI = "https://example.invalid/l2sched/docs/lint.md"


def summary_rows(run) -> list[tuple[str, ...]]:
    """The summary table rows (first row is the header)."""
    nodes = run.sg.nodes
    sim, base = run.sim.timing, run.base.timing
    n = run.sg.num_layers
    expert_start: dict[int, float] = {}
    for v in nodes:
        d = nodes[v]
        if d["cls"] == "expert_stream" and d["active"]:
            p = d["pos"]
            expert_start[p] = min(expert_start.get(p, 1e18), sim[v].start)
    hits: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for v in nodes:
        for f, (h, got) in sim[v].hits_by_fill.items():
            hits[f][0] += h
            hits[f][1] += got
    groups: dict = defaultdict(list)
    for f in run.sg.fills:
        d = nodes[f]
        issue = d["fill"]
        t = sim[f]
        fork = t.start
        slack = None
        es = expert_start.get(d["pos"])
        if es is not None and es >= fork:
            slack = es - t.finish
        h, got = hits[f]
        groups[(d["kind"], issue.window)].append(
            (issue.layer, issue.nbytes, t.finish - fork, slack,
             h / got if got else 1.0))

    def layer_us(timing, sg, pos):
        prev = sg.layer_end[pos - 1] if pos > 0 else None
        end = timing[sg.layer_end[pos]].finish
        return end - (timing[prev].finish if prev else 0.0)

    delta_by_layer = {p: layer_us(sim, run.sg, p) - layer_us(base, run.base_sg, p)
                      for p in range(1, n + 1)}
    rows = [("layer kind", "window", "layers", "MB/fill", "fill done (us)",
             "expert slack (us)", "hit fraction", "layer time change (us)")]
    for (kind, window), items in sorted(groups.items()):
        k = len(items)
        slacks = [s for *_, s, _ in items if s is not None]
        delta = [delta_by_layer.get(lay if lay > 0 else n, 0.0)
                 for lay, *_ in items]
        rows.append((
            kind, window, str(k),
            f"{sum(i[1] for i in items) / k / 1e6:.2f}",
            f"{sum(i[2] for i in items) / k:.1f}",
            f"{min(slacks):+.1f}" if slacks else "-",
            f"{sum(i[4] for i in items) / k:.2f}",
            f"{sum(delta) / k:+.1f}",
        ))
    return rows


def step_line(run) -> str:
    """One line: predicted steady-state step time with and without prefetch."""
    a, b = run.step_period("sim"), run.step_period("base")
    return (f"predicted decode step on {run.device.name} ({run.tokens} token(s)): "
            f"{a:.0f} us with prefetch, {b:.0f} us without "
            f"({(a - b) / b:+.1%} step time, {b / a - 1:+.1%} steps/s)")


def unverified_note(device) -> str:
    """The line that says a prediction rests on an estimated profile."""
    return (f"note: device profile {device.name} was not measured by `l2sched profile` "
            f"on this GPU: its numbers are estimates and these predictions are "
            f"unverified until the profile is measured there")


def human(run, summary: bool = True) -> str:
    """Compiler-style findings, the summary table and a count line."""
    sources = dict(run.schedule.sources)
    out = [f.diagnostic(sources).render() for f in run.findings]
    if summary:
        out.append("")
        out.append(format_table(summary_rows(run)))
        out.append(step_line(run))
        if not run.device.is_measured:
            out.append(unverified_note(run.device))
    if run.calibration:
        out.append("")
        out.append("calibration (measured vs modeled, us per call):")
        out.append(format_table(run.calibration))
    counts = defaultdict(int)
    for f in run.findings:
        counts[f.severity] += 1
    tail = (f"{run.schedule.path}: {counts['error']} error(s), "
            f"{counts['warning']} warning(s), {counts['info']} info")
    if run.suppressed:
        tail += f", {run.suppressed} suppressed"
    out.append(tail)
    return "\n".join(out) + "\n"


def _finding_json(f) -> dict:
    span = f.span
    return {
        "code": f.code, "name": rules.RULES[f.code].name, "severity": f.severity,
        "message": f.message,
        "span": None if span is None else {
            "path": span.path, "line": span.line, "column": span.column,
            "end_line": span.end_line, "end_column": span.end_column},
        "data": f.data,
    }


def to_json(run) -> str:
    """Findings, summary and predicted step times as JSON."""
    rows = summary_rows(run)
    doc = {
        "schedule": run.schedule.name, "path": run.schedule.path,
        "device": run.device.name, "tokens": run.tokens,
        "graph_mode": run.graph_mode,
        "findings": [_finding_json(f) for f in run.findings],
        "suppressed": run.suppressed,
        "summary": [dict(zip(rows[0], r)) for r in rows[1:]],
        "step_us": {"with_prefetch": round(run.step_period("sim"), 3),
                    "without_prefetch": round(run.step_period("base"), 3)},
        "device_measured": run.device.is_measured,
        "errors": sum(f.severity == "error" for f in run.findings),
    }
    if run.calibration:
        doc["calibration"] = [dict(zip(run.calibration[0], r))
                              for r in run.calibration[1:]]
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def input_error_findings(err) -> list:
    """The diagnostics of an ``L2sError`` that stopped the lint before it
    ran (syntax, semantic, model or profile errors) as ``L2S000`` findings,
    so ``--format json|sarif`` still write a document a CI step can read."""
    return [rules.Finding("L2S000", d.message, d.span) for d in err.diagnostics]


def input_error_json(path: str, err) -> str:
    """``to_json``'s shape for a schedule that could not be linted: the
    ``L2S000`` findings, no summary, no step times."""
    findings = input_error_findings(err)
    doc = {"schedule": None, "path": path, "findings": [_finding_json(f) for f in findings],
           "suppressed": 0, "summary": [], "step_us": None, "errors": len(findings)}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def input_error_sarif(err) -> str:
    """``to_sarif``'s document for a schedule that could not be linted."""
    return _sarif(input_error_findings(err))


def to_sarif(run) -> str:
    """SARIF 2.1.0 for code-scanning: one run, the rule table, one result
    per finding (level error/warning/note)."""
    return _sarif(run.findings)


def _sarif(findings) -> str:
    level = {"error": "error", "warning": "warning", "info": "note"}
    rules_json = [{
        "id": code, "name": rule.name,
        "shortDescription": {"text": rule.name.replace("-", " ")},
        "helpUri": f"{TOOL_URI}#{code.lower()}",
        "defaultConfiguration": {"level": level[rule.severity]},
    } for code, rule in rules.RULES.items()]
    results = []
    for f in findings:
        r = {"ruleId": f.code, "level": level[f.severity],
             "message": {"text": f.message}}
        if f.span is not None:
            r["locations"] = [{"physicalLocation": {
                "artifactLocation": {"uri": f.span.path},
                "region": {"startLine": f.span.line, "startColumn": f.span.column,
                           "endLine": f.span.end_line,
                           "endColumn": f.span.end_column}}}]
        results.append(r)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "l2sched-lint",
                                      "informationUri": TOOL_URI,
                                      "rules": rules_json}},
                  "results": results}],
    }
    return json.dumps(doc, indent=1) + "\n"
