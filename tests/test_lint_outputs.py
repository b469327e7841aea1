"""Timeline pictures and --calibrate on a synthetic torch-profiler trace."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from l2sched.lint import lint_path
from l2sched.lint.calibrate import measure
from l2sched.lint.graph import layer_graph
from l2sched.lint.timeline import chrome_trace, gantt_svg, write_timeline
from l2sched.units import format_size

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
    assert svg.startswith("<svg") and ">B 35.00 MB<" in svg and "moe.w13" in svg
    paths = write_timeline(run, str(tmp_path / "t.json"))
    assert json.loads(Path(paths[0]).read_text())["traceEvents"]
    # one panel per layer kind a window fires in (kda+moe, mla+moe)
    assert Path(paths[1]).read_text().count('<g class="panel">') == 2


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
    # L2S201 (steps above max_tokens), and L2S112 (the profile's unmeasured terms)
    assert all(f["code"] in ("L2S201", "L2S112") for f in doc["findings"])


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


def _fake_bench_result(run, tokens: int = 1) -> dict:
    """A ``bench run`` result shaped as ``l2sched/bench/run.py`` writes it,
    made from the prediction itself with every time 10% later (a drawing
    fixture, not a measurement)."""
    ops, fills = {}, {}
    for v, d in run.sg.nodes.items():
        t = run.sim.timing[v]
        if d["pos"] >= run.sg.num_layers or d["cls"] in ("fill", "join") \
                or not d["active"]:
            continue
        ops[f"{d['layer']}:{d['op']}"] = {
            "start_us": 1.1 * t.start, "finish_us": 1.1 * t.finish,
            "dur_us": 1.1 * (t.finish - t.start), "stream": d["stream"]}
    for f in run.sg.fills:
        src = next(u for u, out in run.sg.adj.items()
                   if f in out and run.sg.nodes[u]["cls"] != "fill")
        key = f"{run.sg.nodes[src]['layer']}:{run.sg.nodes[src]['op']}"
        rec = fills.setdefault(key, {"fills": 0})
        rec["fills"] += 1
        rec["fill_exit_us"] = 1.1 * run.sim.timing[f].finish
    return {"kind": "l2sched bench", "tokens": [tokens], "per_m": {str(tokens): {
        "arms": {"compiled": {"ops": ops, "fills": fills, "gain_pct": -1.5,
                              "step_us": {"median": 1.1 * run.step_period()}}}}}}


def test_item22_timeline_svg_shows_what_to_conclude(tmp_path, capsys):
    """The SVG had a time scale per panel, no title, unlabelled short fills,
    cut and overlapping labels, an incomplete legend, no finding marks, no
    step-time change, and a layer-0 panel that never has fills. Now: one
    axis for all panels, a title (schedule, device, TP, M), a legend entry
    for every mark, every fill labelled (window, bytes) without overlaps,
    findings tagged with their codes, the prediction in the caption, and
    with --measured the measured step beside the predicted one."""
    import xml.etree.ElementTree as ET

    from l2sched.cli import main
    from l2sched.lint.gantt import CHAR_PX, CLASS_NAMES

    ns = {"s": "http://www.w3.org/2000/svg"}
    run = lint_path(str(POST_AR), tokens=1)
    root = ET.fromstring(gantt_svg(run))
    title = root.find("s:title", ns).text
    assert title.startswith("glm53-flash-sm120-tp4-post-ar: predicted decode step on "
                            "sm120-rtx-pro-6000-maxq, TP4, M=1")
    assert len(root.findall(".//s:g[@class='axis']", ns)) == 1
    assert len(root.findall(".//s:g[@class='panel']", ns)) == 2  # kinds with fills
    legend = [e.find("s:text", ns).text
              for e in root.findall(".//s:g[@class='legend-entry']", ns)]
    for text in list(CLASS_NAMES.values()) + [
            "next layer's op (faded)", "shaded: a fill reading device memory",
            "hatched: overlap a finding reports", "red outline + code"]:
        assert any(e.startswith(text) for e in legend), text
    labels = [(float(t.get("x")), float(t.get("y")), t.text)
              for t in root.findall(".//s:text[@class='fill-label']", ns)]
    drawn = {(d["pos"], d["fill"].window) for d in
             (run.sg.nodes[f] for f in run.sg.fills) if d["pos"] in (4, 7)}
    assert sorted(t for _, _, t in labels) == sorted(
        f"{w} {format_size(run.sg.nodes[f'{p}:fill:{w}']['fill'].nbytes)}"
        for p, w in drawn)
    for i, (x1, y1, t1) in enumerate(labels):  # no two labels overlap
        for x2, y2, t2 in labels[i + 1:]:
            if y1 == y2:
                assert x1 + len(t1) * CHAR_PX <= x2 or x2 + len(t2) * CHAR_PX <= x1
    codes = {t.text for t in root.findall(".//s:text[@class='finding']", ns)}
    assert {"L2S101", "L2S104", "L2S105"} <= codes
    assert root.findall(".//s:rect[@class='overlap']", ns)  # the L2S101 overlap
    caption = " ".join(t.text for t in root.findall(".//s:text[@class='caption']", ns))
    # the prediction: both step times (us) and their change, as the run has them
    sim, base = run.step_period("sim"), run.step_period("base")
    said = re.search(r"Predicted decode step: (\d+) us with prefetch, (\d+) us without: "
                     r"([+-]\d+\.\d)% step time", caption)
    assert said, caption
    assert (int(said[1]), int(said[2])) == (round(sim), round(base))
    assert float(said[3]) == pytest.approx((sim - base) / base * 100, abs=0.05)
    assert "No window fires in kda+dense" in caption
    # with a measured result beside it
    result = tmp_path / "run.json"
    result.write_text(json.dumps(_fake_bench_result(run)))
    out = tmp_path / "tl.json"
    assert main(["timeline", str(POST_AR), "-o", str(out), "--measured", str(result)]) == 0
    svg = ET.fromstring((tmp_path / "tl.svg").read_text())
    rows = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "measured: main stream" in rows and "predicted: main stream" in rows
    assert len(svg.findall(".//s:g[@class='axis']", ns)) == 1
    assert "beside the measured one (compiled arm)" in svg.find("s:title", ns).text
    capsys.readouterr()
    # results that cannot be drawn are one-line errors, before the lint runs
    summary = ROOT / "tests" / "data" / "results" / "h200-2026-11-29b.json"
    assert main(["timeline", str(POST_AR), "-o", str(out), "--measured", str(summary)]) == 1
    assert "arm 'compiled' has no per-op times ('ops')" in capsys.readouterr().err
    assert main(["timeline", str(POST_AR), "-o", str(out), "--measured", str(result),
                 "--tokens", "4"]) == 1
    assert "has no M=4 (it measured M=1); pass --tokens" in capsys.readouterr().err


def test_timeline_measured_reads_gzip_and_refuses_a_dry_result(tmp_path, capsys):
    """``--measured`` takes a gzipped result as every other reader does, and
    a --dry result (a fake clock) is not a measurement."""
    import gzip
    import json

    from l2sched.cli import main
    d = {"kind": "l2sched bench", "dry": False,
         "per_m": {"1": {"arms": {"compiled": {"ops": {}}}}}}
    gz = tmp_path / "r.json.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        json.dump(d, f)
    out = str(tmp_path / "t.json")
    sched = "schedules/glm53-flash-h200-tp4.l2s"
    assert main(["timeline", sched, "-o", out, "--measured", str(gz)]) == 1
    assert "has no per-op times" in capsys.readouterr().err  # read, then judged
    dry = tmp_path / "dry.json"
    dry.write_text(json.dumps({**d, "dry": True}))
    assert main(["timeline", sched, "-o", out, "--measured", str(dry)]) == 1
    assert "a --dry result" in capsys.readouterr().err
