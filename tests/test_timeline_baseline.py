"""Issue 34 item 5: the timeline picture says why a step changed. Each
panel has a no-prefetch row (the lint's simulation without fills), its
heading gives the layer's time with and without prefetch, and every op is
named by a ``<text>`` element (not only a ``<title>`` tooltip), so the names
survive PNG export."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from l2sched.lint import lint_path
from l2sched.lint.gantt import gantt_svg

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def h200():
    run = lint_path(str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"))
    return run, gantt_svg(run)


def _texts(svg: str) -> list[str]:
    return [unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def test_every_panel_has_a_no_prefetch_row(h200):
    run, svg = h200
    texts = _texts(svg)
    panels = svg.count('<g class="panel">')
    assert panels >= 1
    assert texts.count("no prefetch: main stream") == panels
    assert svg.count('<g class="baseline">') == panels
    headings = [t for t in texts if re.match(r"layer \d+ \(", t)]
    assert len(headings) == panels
    for h in headings:
        assert re.search(r": [\d.]+ us with prefetch, [\d.]+ us without \([+-][\d.]+ us\)$",
                         h), h
    # the baseline bars are the no-prefetch simulation's main-stream ops
    base_bars = re.findall(r'<rect class="bar base"[^>]*><title>L(\d+) ([^ ]+) without',
                           svg)
    layer = int(base_bars[0][0])
    want = [d["op"] for v, d in run.base_sg.nodes.items()
            if d["pos"] == layer and d["stream"] == "main"
            and run.base.timing[v].finish > run.base.timing[v].start]
    assert [op for lay, op in base_bars if int(lay) == layer] == want


def test_every_op_is_named_in_the_drawing(h200):
    run, svg = h200
    texts = " ".join(_texts(svg))
    drawn = {unescape(m) for m in re.findall(
        r'<rect class="bar(?: faded)?"[^>]*><title>L\d+ ([^:]+):', svg)}
    ops = {d for d in drawn if not re.search(r" [\d.]+ [KMG]?B$", d)}  # not fills
    assert len(ops) > 20
    missing = [op for op in ops if op not in texts]
    assert missing == [], missing


def test_op_labels_carry_the_change_against_no_prefetch(h200):
    """A slowed op says by how much: the picture of a schedule predicted
    slower shows where the time goes (here the all-reduces the fills slow)."""
    run, svg = h200
    assert run.step_period("sim") > run.step_period("base")  # predicted slower
    texts = _texts(svg)
    deltas = [t for t in texts if re.search(r" [+-]\d+\.\d$", t)]
    assert any(t.startswith("attn.all_reduce +") for t in deltas), deltas
