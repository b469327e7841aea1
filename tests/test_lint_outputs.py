"""Timeline pictures and --calibrate on a synthetic torch-profiler trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from l2sched.lint import lint_path
from l2sched.lint.calibrate import measure
from l2sched.lint.graph import layer_graph
from l2sched.lint.timeline import chrome_trace, gantt_svg, write_timeline

ROOT = Path(__file__).resolve().parent.parent
POST_AR = ROOT / "schedules" / "glm53-flash-sm120-tp4-post-ar.l2s"
TRACE = ROOT / "tests" / "data" / "glm53-synthetic-trace.json"


def test_layer_graph_extends_to_next_layer_consumers():
    run = lint_path(str(POST_AR))
    g = layer_graph(run.sg, 4)
    ops = {(d["pos"], d["op"]) for _, d in g.nodes(data=True)}
    assert (4, "fill B") in ops and (4, "moe.w13") in ops
    assert (5, "kda.in_proj") in ops          # consumer of B's next-layer bytes
    assert (5, "moe.w13") not in ops
    assert g.has_edge("4:attn.all_reduce", "4:fill:B")   # fork at post-AR hook


def test_chrome_trace_and_svg(tmp_path):
    run = lint_path(str(POST_AR))
    doc = chrome_trace(run)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in xs} == {1, 2, 3}
    assert any(e["cat"] == "fill" and e["args"]["window"] == "B" for e in xs)
    assert any(e["cat"] == "protected" and "moe.w13" in e["name"] for e in xs)
    svg = gantt_svg(run)
    assert svg.startswith("<svg") and "fill B" in svg and "moe.w13" in svg
    paths = write_timeline(run, str(tmp_path / "t.json"))
    assert json.loads(Path(paths[0]).read_text())["traceEvents"]
    assert Path(paths[1]).read_text().count("layer ") >= 3   # one panel per kind


def test_calibrate_maps_kernels_and_reports_differences():
    run = lint_path(str(POST_AR))
    measured, rows = measure(run, str(TRACE))
    assert measured[("kda+moe", "kda.recurrent")] == 20.0
    assert measured[("kda+moe", "moe.w13")] == 50.0
    assert measured[("kda+dense", "kda.in_proj")] == 29.5
    assert measured[("mla+moe", "mla.sparse_decode")] == 4.0
    assert measured[("kda+moe", "moe.shared.gate_up_proj")] == 4.0  # aux stream
    row = next(r for r in rows if r[:2] == ("kda+moe", "kda.recurrent"))
    assert row[3] == "15.0" and row[5] == "+5.0"
    cal = lint_path(str(POST_AR), measured=measured)
    node = "4:kda.recurrent"
    t = cal.base.timing[node]
    assert abs((t.finish - t.start) - 20.0) < 1e-6


def test_lint_usage_errors_and_steps_above_max_tokens(capsys):
    """Found by a new-user trial: an unknown --select code was accepted, and a
    step above max_tokens still predicted fills the runtime would skip."""
    from l2sched.cli import main

    path = "schedules/glm53-flash-sm120-tp4.l2s"
    assert main(["lint", path, "--select", "L2S999"]) == 2
    assert "no rule code starts with it" in capsys.readouterr().err
    assert main(["lint", path, "--tokens", "0"]) == 2
    capsys.readouterr()
    assert main(["lint", path, "--tokens", "257", "--format", "json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"] == [] or all(f["code"] == "L2S201" for f in doc["findings"])


@pytest.mark.parametrize("content,where,message", [
    ('{"a": 1}', "1:1", "not a torch-profiler Chrome trace"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 3}]}',
     "1:1", "traceEvents[0]: kernel event has no 'ts'"),
    ('[{"ph": "X", "cat": "kernel", "ts": "soon", "dur": 3}]', "1:1",
     "traceEvents[0]: 'ts' must be a number"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "tid": [1]}]}',
     "1:1", "traceEvents[0]: 'tid' must be"),
    ('{"traceEvents": [\n  1,', "2:5", "not a JSON trace"),
    ("\xff", "1:1", "not a JSON trace: not UTF-8"),
])
def test_calibrate_bad_trace_is_one_line_error(tmp_path, capsys, content, where,
                                               message):
    """A trace without 'ts' was a KeyError traceback; --format json printed
    nothing for a bad trace."""
    from l2sched.cli import main

    trace = tmp_path / "bad.json"
    trace.write_bytes(content.encode("latin-1"))
    sched = str(POST_AR)
    assert main(["lint", sched, "--calibrate", str(trace)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{trace}:{where}: {message}")
    assert err.count("\n") == 1
    assert main(["lint", sched, "--calibrate", str(trace), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (f,) = doc["findings"]
    assert f["code"] == "L2S000" and f["span"]["path"] == str(trace)
    assert main(["lint", sched, "--calibrate", str(trace), "--format", "sarif"]) == 1
    sarif = json.loads(capsys.readouterr().out)
    (r,) = sarif["runs"][0]["results"]
    assert r["ruleId"] == "L2S000" and message in r["message"]["text"]


def _track_violations(events) -> list:
    """Pairs of complete events on one (pid, tid) track that neither nest
    nor abut nor are disjoint, comparing exact decimal end points
    (``ts + dur`` as written in the JSON)."""
    from decimal import Decimal

    tracks: dict = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        ts = Decimal(repr(e["ts"]))
        end = ts + Decimal(repr(e["dur"]))
        tracks.setdefault((e["pid"], e["tid"]), []).append((ts, -end, e["name"]))
    bad = []
    for key, slices in tracks.items():
        stack: list = []
        for ts, neg_end, name in sorted(slices):
            end = -neg_end
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if stack and end > stack[-1][0]:
                bad.append((key, stack[-1][1], name))
            stack.append((end, name))
    return bad


@pytest.mark.parametrize("schedule", sorted(
    p.name for p in (ROOT / "schedules").glob("*.l2s")))
@pytest.mark.parametrize("tokens", [1, 4])
def test_item09_trace_slices_nest_or_abut_per_track(schedule, tokens):
    """``l2sched timeline ...post-ar.l2s``: 15 pairs on the main-stream track
    where a slice ended 1 ns after the next one started (``ts`` and ``dur``
    rounded separately), which Perfetto draws wrongly. End points are
    rounded, durations follow from them: on every track of every shipped
    schedule, slices nest or abut exactly."""
    run = lint_path(str(ROOT / "schedules" / schedule), tokens=tokens)
    events = chrome_trace(run)["traceEvents"]
    assert _track_violations(events) == []
    # and in integer nanoseconds, as a trace processor reads them
    for e in events:
        if e.get("ph") == "X":
            assert abs(e["ts"] * 1000 - round(e["ts"] * 1000)) < 1e-6
            assert abs(e["dur"] * 1000 - round(e["dur"] * 1000)) < 1e-6


SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json"


def _sarif_validator():
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _sarif_problems(doc) -> list[str]:
    """Schema errors plus what code-scanning services reject: a result with
    no location, a URI that is not percent-encoded or is relative without a
    uriBaseId, a placeholder help link."""
    from urllib.parse import quote, unquote, urlsplit

    out = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
           for e in _sarif_validator().iter_errors(doc)]
    text = json.dumps(doc)
    if "example.invalid" in text:
        out.append("placeholder URI example.invalid")
    for run in doc["runs"]:
        for rule in run["tool"]["driver"]["rules"]:
            if "helpUri" in rule and not urlsplit(rule["helpUri"]).scheme:
                out.append(f"{rule['id']}: relative helpUri")
        for r in run["results"]:
            if not r.get("locations"):
                out.append(f"{r['ruleId']}: no location ({r['message']['text']})")
                continue
            art = r["locations"][0]["physicalLocation"]["artifactLocation"]
            uri = art["uri"]
            if quote(unquote(uri), safe="/:") != uri:
                out.append(f"not percent-encoded: {uri!r}")
            if not urlsplit(uri).scheme and "uriBaseId" not in art:
                out.append(f"relative URI without uriBaseId: {uri!r}")
    return out


def test_item10_sarif_is_valid_located_and_percent_encoded(tmp_path, monkeypatch,
                                                            capsys):
    """A schedule path with a space or '#' was emitted raw as the artifact
    uri, a device-profile error had no location, help links pointed at
    example.invalid. Every SARIF document the lint writes (findings, input
    errors of the schedule, of a --set argument, of a device profile given
    by path or by an unknown name) validates against the official SARIF
    2.1.0 schema, has percent-encoded URIs relative to %SRCROOT% and a
    location for every result."""
    from l2sched.cli import main

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "my dir #2"
    folder.mkdir()
    sched = folder / "post ar#1.l2s"
    sched.write_text(POST_AR.read_text().replace(
        'extends "glm53-flash-sm120-tp4.l2s"',
        f'extends "{ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"}"'))
    bad_profile = folder / "bad #profile.toml"
    bad_profile.write_text((ROOT / "l2sched" / "data" / "devices" / "h200.toml")
                           .read_text().replace("[bandwidth]", "[bandwith]"))
    cases = {
        "findings": [str(sched.relative_to(tmp_path))],
        "schedule error": [str(sched), "--set", "window.B.budget=5"],
        "profile file error": [str(sched), "--device", str(bad_profile)],
        "unknown profile name": [str(sched), "--device", "nope"],
        "missing profile file": [str(sched), "--device", "gone.toml"],
    }
    for case, args in cases.items():
        main(["lint", *args, "--format", "sarif"])
        doc = json.loads(capsys.readouterr().out)
        assert _sarif_problems(doc) == [], case
        results = doc["runs"][0]["results"]
        assert results, case
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                for r in results}
        if case == "findings":
            assert "my%20dir%20%232/post%20ar%231.l2s" in uris
        if case == "profile file error":
            (r,) = results
            loc = r["locations"][0]["physicalLocation"]
            assert loc["artifactLocation"] == {"uri": "my%20dir%20%232/bad%20%23profile.toml",
                                               "uriBaseId": "%SRCROOT%"}
            assert loc["region"]["startLine"] > 1
    for path in sorted((ROOT / "schedules").glob("*.l2s")):
        monkeypatch.chdir(ROOT)
        main(["lint", str(path.relative_to(ROOT)), "--format", "sarif"])
        doc = json.loads(capsys.readouterr().out)
        assert _sarif_problems(doc) == [], path
