"""Lint output: human (compiler style + per-layer-kind summary), JSON, SARIF.

Summary columns, per (layer kind, window): the layers of that kind it fires
in (``Plan.fire_layers``, the count ``check`` and ``compile`` print), the
fills among them (layers where it fetches bytes), then means over its
fills: bytes per fill (MB = 10^6 B), fill finish time after the fork (us),
slack between the fill's finish and the expert stream's start (us; negative =
overlap; ``-`` when the window fires after the expert stream), the predicted
L2 hit fraction of the bytes at their consumers, and the predicted change of
the layer's time against the no-prefetch baseline (us).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import l2sched
from l2sched.compiler.plan import empty_notes, layers_by_kind
from l2sched.errors import render_all
from l2sched.lint import rules
from l2sched.model.config import default_config_ref
from l2sched.units import format_signed, format_table, plural
from l2sched.device import DeviceProfile


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
    groups: dict = defaultdict(list)  # (kind, window) -> its fills
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
    rows = [("layer kind", "window", "layers", "fills", "MB/fill", "fill done (us)",
             "expert slack (us)", "hit fraction", "layer time change (us)")]
    kinds = [str(k) for k in run.inventory.kinds]
    fired = [((kind, window), layers) for window, got in run.plan.fire_layers().items()
             for kind, layers in layers_by_kind(got, kinds).items()]
    for (kind, window), layers in sorted(fired):
        items = groups.get((kind, window), [])
        k = len(items)
        if not k:  # fires there and fetches nothing (empty_notes says why)
            rows.append((kind, window, str(len(layers)), "0") + ("-",) * 5)
            continue
        slacks = [s for *_, s, _ in items if s is not None]
        delta = [delta_by_layer.get(lay if lay > 0 else n, 0.0)
                 for lay, *_ in items]
        rows.append((
            kind, window, str(len(layers)), str(k),
            f"{sum(i[1] for i in items) / k / 1e6:.2f}",
            f"{sum(i[2] for i in items) / k:.1f}",
            format_signed(min(slacks), "+.1f") if slacks else "-",
            f"{sum(i[4] for i in items) / k:.2f}",
            format_signed(sum(delta) / k, "+.1f"),
        ))
    return rows


#: The line above the human summary table: which layers its rows cover.
SUMMARY_CAPTION = ("per layer kind and window; layers: where it fires (as check and "
                   "compile count them), fills: where it fetches bytes; the other "
                   "columns: means over its fills")


def no_fills_line(run) -> str:
    """What the summary says instead of an empty table: why no window fills
    in the linted step."""
    s = run.schedule
    if run.tokens > s.max_tokens:
        return (f"no fills: a step of {plural(run.tokens, 'token')} prefetches nothing "
                f"(the schedule prefetches at <= {s.max_tokens} tokens, max_tokens)")
    if not s.windows:
        return "no fills: the schedule has no windows"
    return ("no fills: no window fetches a byte (`l2sched compile` shows each "
            "window's 0 B and the reason)")


def predicted_gain_pct(run) -> float:
    """The predicted step-time gain over no prefetch, percent of the
    no-prefetch step time (positive = faster): what ``l2sched bench`` reports
    call the gain, so it compares with a ``# measured:`` result."""
    a, b = run.step_period("sim"), run.step_period("base")
    return 100.0 * (b - a) / b


def measured_rows(run) -> list[dict]:
    """Per ``# measured:`` line of the schedule (``lang.measured``): the
    result at the lint's ``--tokens``, the prediction and whether they point
    the same way, with the caveats that make them incomparable (``--set``
    overrides, another ``--device`` than the schedule's). Keys: ``source``,
    ``note``, ``tokens``, ``gain_pct`` (None when that M was not measured),
    ``measured_tokens``, ``predicted_gain_pct``, ``same_direction``,
    ``caveats``."""
    rows = []
    predicted = round(predicted_gain_pct(run), 2)
    s = run.schedule
    caveats = []
    if s.overrides:
        caveats.append("for the file as written; --set changes it")
    if run.device_profile.name != s.device:
        caveats.append(f"measured on {s.device}, linted for {run.device_profile.name}")
    for m in getattr(s, "measured", ()):
        gain = m.gain_at(run.tokens)
        rows.append({
            "source": m.source, "note": m.note, "tokens": run.tokens,
            "gain_pct": gain, "measured_tokens": [t for t, _ in m.gains],
            "predicted_gain_pct": predicted,
            "same_direction": None if gain is None else (gain > 0) == (predicted > 0),
            "caveats": caveats})
    return rows


def measured_lines(run) -> list[str]:
    """The human lines of ``measured_rows``: ``measured (FILE: note): gain
    -2.55% at M=1, predicted +1.3%: the prediction and the measurement
    disagree (faster vs slower)``."""
    out = []
    for r in measured_rows(run):
        where = r["source"] + (f": {r['note']}" if r["note"] else "")
        pred = format_signed(r["predicted_gain_pct"], "+.1f") + "%"
        if r["gain_pct"] is None:
            ms = ", ".join(map(str, r["measured_tokens"]))
            text = (f"measured ({where}): no result at M={r['tokens']} "
                    f"(results at M={ms}); predicted gain {pred}")
        else:
            text = (f"measured ({where}): gain {format_signed(r['gain_pct'], '+.2f')}% "
                    f"at M={r['tokens']}, predicted {pred}")
            if not r["same_direction"]:
                text += ("; the prediction and the measurement disagree ("
                         + ("faster" if r["predicted_gain_pct"] > 0 else "not faster")
                         + " predicted, "
                         + ("faster" if r["gain_pct"] > 0 else "slower") + " measured)")
        if r["caveats"]:
            text += " [" + "; ".join(r["caveats"]) + "]"
        out.append(text)
    return out


def config_ref(schedule):
    """The ``ModelConfigRef`` of the config ``schedule`` was resolved with
    (the embedded one's for a hand-built ``Schedule``)."""
    return schedule.config_ref or default_config_ref(schedule.model)


def config_line(schedule) -> str:
    """``model config: qwen3-235b-a22b (l2sched/data/qwen3-235b-a22b-config.json)``:
    the model config the schedule was linted with and where it came from
    (``ModelConfigRef.describe``; ``check`` prints the same line)."""
    return f"model config: {config_ref(schedule).describe(schedule.model)}"


def step_line(run) -> str:
    """One line: predicted steady-state step time with and without prefetch."""
    a, b = run.step_period("sim"), run.step_period("base")
    return (f"predicted decode step on {run.device_profile.name} ({plural(run.tokens, 'token')}): "
            f"{a:.0f} us with prefetch, {b:.0f} us without "
            f"({format_signed((a - b) / b, '+.1%')} step time, "
            f"{format_signed(b / a - 1, '+.1%')} steps/s)")


def unverified_note(device_profile: DeviceProfile) -> str:
    """The line that says a prediction rests on an estimated profile."""
    return (f"note: device profile {device_profile.name} was not measured by `l2sched profile` "
            f"on this GPU: its numbers are estimates and these predictions are "
            f"unverified until the profile is measured there")


def human(run, summary: bool = True) -> str:
    """Compiler-style findings, the summary table and a count line."""
    sources = dict(run.schedule.sources)
    shown = render_all((f.diagnostic(sources) for f in run.findings),
                       hint="; --format json lists all")
    out = [shown] if shown else []
    if summary:
        if out:  # a blank line between the findings and the summary
            out.append("")
        rows = summary_rows(run)
        if run.sg.fills:
            out += [SUMMARY_CAPTION, format_table(rows)]
            out += empty_notes(run.plan, run.inventory.kinds)
        else:
            out.append(no_fills_line(run))
        out.append(config_line(run.schedule))
        out.append(step_line(run))
        if not run.device_profile.is_measured:
            out.append(unverified_note(run.device_profile))
        out.extend(measured_lines(run))
    if run.calibration:
        out.append("")
        out.append("calibration (measured vs modeled, us per call):")
        out.append(format_table(run.calibration))
    counts = defaultdict(int)
    for f in run.findings:
        counts[f.severity] += 1
    tail = (f"{run.schedule.path}: {plural(counts['error'], 'error')}, "
            f"{plural(counts['warning'], 'warning')}, {plural(counts['info'], 'info', 'info')}")
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
        "device": run.device_profile.name, "tokens": run.tokens,
        "model_config": config_ref(run.schedule).to_json(),
        "graph_mode": run.graph_mode,
        "findings": [_finding_json(f) for f in run.findings],
        "suppressed": run.suppressed,
        "summary": [dict(zip(rows[0], r)) for r in rows[1:]],
        "step_us": {"with_prefetch": round(run.step_period("sim"), 3),
                    "without_prefetch": round(run.step_period("base"), 3)},
        "device_measured": run.device_profile.is_measured,
        "errors": sum(f.severity == "error" for f in run.findings),
        "predicted_gain_pct": round(predicted_gain_pct(run), 3),
        "measured": measured_rows(run),
    }
    if run.calibration:
        doc["calibration"] = [dict(zip(run.calibration[0], r))
                              for r in run.calibration[1:]]
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def json_documents(texts) -> str:
    """Several schedules' ``to_json``/``input_error_json`` documents as one:
    ``{"schedules": [...], "errors": total}``."""
    docs = [json.loads(t) for t in texts]
    return json.dumps({"schedules": docs, "errors": sum(d["errors"] for d in docs)},
                      indent=1, sort_keys=True) + "\n"


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


def input_error_sarif(err, path: str | None = None) -> str:
    """``to_sarif``'s document for a schedule that could not be linted;
    ``path`` (the schedule) locates diagnostics that have no file of their
    own (an unknown ``--device`` name, a ``--set`` argument)."""
    return sarif_document([(input_error_findings(err), path)])


def to_sarif(run) -> str:
    """SARIF 2.1.0 for code-scanning (``sarif_document`` of one run)."""
    return sarif_document([(run.findings, run.schedule.path)])


#: The official SARIF 2.1.0 schema (errata 01), as ``$schema``.
SARIF_SCHEMA = ("https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
                "sarif-schema-2.1.0.json")
#: The base every relative artifact URI is relative to: the source root.
SRCROOT = "%SRCROOT%"


def source_root(cwd: str | None = None) -> str:
    """The directory ``%SRCROOT%`` stands for: the nearest directory at or
    above ``cwd`` (default: the working directory) that holds ``.git`` (a
    repository or worktree root, what code-scanning services resolve
    ``%SRCROOT%`` to), else ``cwd`` itself. An absolute path."""
    start = os.path.abspath(cwd or os.getcwd())
    d = start
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return start
        d = parent


def artifact_location(path: str, root: str) -> dict | None:
    """SARIF ``artifactLocation`` of file ``path`` (as the user named it):
    relative to ``root`` with ``uriBaseId`` ``%SRCROOT%`` when the file is
    under it, else an absolute ``file://`` URI; the file system's bytes of
    the name percent-encoded either way (a space is ``%20``, ``#`` is ``%23``,
    a byte that is not UTF-8, which Python holds as a surrogate, is its
    ``%XX``), so the URI is valid whatever the name. None for a path that names no
    file (``--set #1``, ``<string>``, ``<embedded ...>``)."""
    if not path or path.startswith(("<", "--set ")):
        return None
    full = os.path.abspath(path)
    rel = os.path.relpath(full, root)
    if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
        return {"uri": quote(os.fsencode(rel.replace(os.sep, "/")), safe="/"),
                "uriBaseId": SRCROOT}
    return {"uri": Path(full).as_uri()}


def _sarif_location(span, fallback: str | None, root: str) -> tuple[list, str]:
    """``(locations, message prefix)`` of a result at ``span``. A span in a
    file gives its region (a whole-file span none); a span that names no
    file (a ``--set`` argument) or none at all is located at line 1 of
    ``fallback`` (the schedule), and the message is prefixed with the
    span's own ``place:line:col``."""
    art = artifact_location(span.path, root) if span is not None else None
    if art is not None:
        phys = {"artifactLocation": art}
        if not span.whole_file:
            phys["region"] = {"startLine": span.line, "startColumn": span.column,
                              "endLine": span.end_line, "endColumn": span.end_column}
        return [{"physicalLocation": phys}], ""
    prefix = f"{span}: " if span is not None else ""
    art = artifact_location(fallback, root) if fallback else None
    if art is None:
        return [], prefix
    return [{"physicalLocation": {"artifactLocation": art,
                                  "region": {"startLine": 1}}}], prefix


def _one_line(text: str) -> str:
    return " ".join(text.split())


def sarif_document(items, cwd: str | None = None) -> str:
    """SARIF 2.1.0 for code-scanning services: one run, the rule table (with
    each rule's documentation as ``help``), one result per finding (level
    error/warning/note) located in its file. ``items`` holds ``(findings,
    schedule path)`` per linted schedule; the path locates findings without
    a file of their own. URIs are percent-encoded and relative to
    ``%SRCROOT%`` (``source_root(cwd)``; ``originalUriBaseIds`` describes
    it), columns count Unicode code points. No help URI: the rule
    documentation is inline (docs/lint.md has the same text)."""
    level = {"error": "error", "warning": "warning", "info": "note"}
    codes = list(rules.RULES)
    rules_json = [{
        "id": code, "name": rule.name,
        "shortDescription": {"text": rule.name.replace("-", " ")},
        "fullDescription": {"text": _one_line(rule.what)},
        "help": {"text": " ".join(f"{label}: {_one_line(text)}" for label, text in (
            ("What", rule.what), ("Why", rule.why), ("Example", rule.example),
            ("Fix", rule.fix)) if text),
                 "markdown": rule.markdown()},
        "defaultConfiguration": {"level": level[rule.severity]},
    } for code, rule in rules.RULES.items()]
    root = source_root(cwd)
    results = []
    for findings, fallback in items:
        for f in findings:
            locations, prefix = _sarif_location(f.span, fallback, root)
            r = {"ruleId": f.code, "ruleIndex": codes.index(f.code),
                 "level": level[f.severity],
                 "message": {"text": prefix + f.message}}
            if locations:
                r["locations"] = locations
            results.append(r)
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "l2sched-lint",
                                      "version": l2sched.__version__,
                                      "rules": rules_json}},
                  "originalUriBaseIds": {SRCROOT: {"description": {"text": (
                      "the source root: the nearest directory at or above the "
                      "working directory of `l2sched lint` that holds .git, else "
                      "that working directory")}}},
                  "columnKind": "unicodeCodePoints",
                  "results": results}],
    }
    return json.dumps(doc, indent=1) + "\n"
