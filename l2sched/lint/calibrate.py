"""Calibrate the lint's cost model from a torch-profiler Chrome trace.

The trace is the JSON ``torch.profiler`` exports (``traceEvents``; GPU
kernels are complete events ``ph: "X"`` with ``cat: "kernel"``, ``ts``/``dur``
in us, ``tid`` = CUDA stream). Kernel names map to the adapter's decode ops
through ``l2sched/data/<model>-kernels.json`` (regexes per op; GEMMs by
position). The stream with the most kernels is the main stream, the next one
with matches the aux stream; bulk-prefetch kernels are ignored. Kernels are
aligned greedily to the expected op sequence of a decode step (a kernel that
matches none of the next few expected ops is skipped), and each
``(layer kind, op)`` gets the median measured duration (us).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from importlib import resources

from l2sched.errors import Diagnostic, L2sInputError, Span
from l2sched.files import note_input
from l2sched.lint.run import lint_path
from l2sched.units import format_signed

#: How many expected ops ahead a kernel may match (skipped ops = not traced).
LOOKAHEAD = 6


def load_kernel_map(model: str) -> dict:
    """The kernel-name table of adapter ``model`` (compiled regexes):
    ``{"ignore": re, "ops": {op: [re, ...]}}``."""
    raw = json.loads(resources.files("l2sched.data").joinpath(
        f"{model}-kernels.json").read_text(encoding="utf-8"))
    ops = {op: [re.compile(p) for p in pats] for op, pats in raw["ops"].items()}
    gemm = re.compile(raw["gemm_pattern"])
    for op in raw["gemm_ops"]:
        ops.setdefault(op, []).append(gemm)
    return {"ignore": re.compile(raw["ignore"]), "ops": ops}


def _trace_error(path: str, message: str, line: int = 1, column: int = 1):
    return L2sInputError(Diagnostic(message, Span.point(path, line, column)))


def _number(value) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def read_kernels(path: str) -> dict[int, list[tuple[float, float, str]]]:
    """Kernel events of a Chrome trace per stream id: ``[(ts, dur, name)]``
    sorted by start. Raises ``L2sInputError`` (``TRACE:line:col: message``)
    when the file cannot be read, is not JSON, is not a Chrome trace
    (``{"traceEvents": [...]}`` or a bare event list), has a kernel event
    without a numeric ``ts`` (or with a bad ``dur``/``tid``), or has no
    kernel events."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _trace_error(path, f"cannot read trace: {e.strerror or e}") from None
    note_input(path, "trace")
    try:
        doc = json.loads(data.decode("utf-8").removeprefix("\ufeff"))
    except UnicodeDecodeError as e:
        raise _trace_error(path, f"not a JSON trace: not UTF-8 text (byte "
                                 f"0x{data[e.start]:02x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise _trace_error(path, f"not a JSON trace: {e.msg}", e.lineno,
                           e.colno) from None
    except (ValueError, RecursionError) as e:  # e.g. nesting too deep
        raise _trace_error(path, f"not a JSON trace: {e}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise _trace_error(path, "not a torch-profiler Chrome trace: expected "
                                 "an object with a 'traceEvents' list")
    out: dict = defaultdict(list)
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        if str(e.get("cat", "")).lower() not in ("kernel", "gpu"):
            continue
        where = f"traceEvents[{i}]"
        if "ts" not in e:
            raise _trace_error(path, f"{where}: kernel event has no 'ts'")
        ts = _number(e["ts"])
        if ts is None:
            raise _trace_error(path, f"{where}: 'ts' must be a number, got "
                                     f"{e['ts']!r:.40}")
        dur = _number(e.get("dur", 0.0))
        if dur is None or dur < 0:
            raise _trace_error(path, f"{where}: 'dur' must be a number >= 0, got "
                                     f"{e.get('dur')!r:.40}")
        tid = e.get("tid", 0)
        if not isinstance(tid, (int, str)) or isinstance(tid, bool):
            raise _trace_error(path, f"{where}: 'tid' must be a number or a "
                                     f"string, got {tid!r:.40}")
        out[tid].append((ts, dur, str(e.get("name", ""))))
    for v in out.values():
        v.sort()
    if not out:
        raise _trace_error(path, "no kernel events (ph 'X', cat 'kernel') in the "
                                 "trace")
    return out


def align(kernels, expected, table) -> dict[int, float]:
    """Greedy alignment: index into ``expected`` ``[(node id, op name)]`` ->
    measured us, for the kernels of one stream."""
    got: dict[int, float] = {}
    i = 0
    for _, dur, name in kernels:
        if table["ignore"].search(name):
            continue
        for j in range(i, min(i + LOOKAHEAD, len(expected))):
            pats = table["ops"].get(expected[j][1], ())
            if any(p.search(name) for p in pats):
                got[j] = dur
                i = j + 1
                break
    return got


def measure(run, trace_path: str) -> tuple[dict, list]:
    """Measured ``(layer kind, op) -> us`` from the trace, and the
    comparison rows (header first: kind, op, calls, modeled us, measured us,
    difference us, difference %) against ``run``'s no-prefetch model."""
    table = load_kernel_map(run.schedule.model)
    streams = read_kernels(trace_path)
    nodes = run.base_sg.nodes
    n = run.base_sg.num_layers
    expected = {"main": [], "aux": []}
    for v in nodes:
        d = nodes[v]
        if d["pos"] < n and d["active"] and d["stream"] in expected:
            expected[d["stream"]].append((v, d["op"]))
    order = sorted(streams, key=lambda s: -len(streams[s]))
    matched: dict[str, float] = {}
    main = align(streams[order[0]], expected["main"], table)
    matched.update({expected["main"][j][0]: us for j, us in main.items()})
    for sid in order[1:]:
        aux = align(streams[sid], expected["aux"], table)
        if aux:
            matched.update({expected["aux"][j][0]: us for j, us in aux.items()})
            break
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    model: dict[tuple[str, str], list[float]] = defaultdict(list)
    for v, us in matched.items():
        d = nodes[v]
        per[(d["kind"], d["op"])].append(us)
    for v in nodes:
        d = nodes[v]
        if (d["kind"], d["op"]) in per and d["pos"] < n:
            t = run.base.timing[v]
            model[(d["kind"], d["op"])].append(t.finish - t.start)
    measured = {k: statistics.median(v) for k, v in per.items()}
    rows = [("layer kind", "op", "calls", "modeled us", "measured us", "diff us",
             "diff %")]
    for (kind, op), us in sorted(measured.items()):
        m = statistics.median(model[(kind, op)]) if model[(kind, op)] else 0.0
        rows.append((kind, op, str(len(per[(kind, op)])), f"{m:.1f}", f"{us:.1f}",
                     format_signed(us - m, "+.1f"),
                     format_signed((us - m) / m, "+.0%") if m else "-"))
    return measured, rows


def calibrate_path(trace: str, schedule_path: str, overrides=(), model_config=None,
                   device=None, tokens: int = 1) -> tuple[dict, list]:
    """``measure`` for a schedule file: lint it uncalibrated, then read
    ``trace``. Returns ``(measured, rows)`` for ``run_lint(measured=...)``."""
    run = lint_path(schedule_path, overrides, model_config, device, tokens=tokens)
    return measure(run, trace)
