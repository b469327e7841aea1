"""A measured decode step to draw beside the predicted one
(``l2sched timeline --measured RESULT.json``).

``RESULT.json`` is what ``l2sched bench run --output`` writes
(``l2sched/bench/run.py``): ``{"kind": "l2sched bench", "per_m": {"M":
{"arms": {ARM: {...}}}}}`` where each arm measured with in-graph events
holds ``ops`` (``"layer:op" -> {"start_us", "finish_us", "dur_us",
"stream"}``, us from the step's start event, medians over the replays),
``fills`` (``"layer:op" -> {"fills", "fill_exit_us", ...}``: the fills
issued at that op and when the last of them left the side stream) and
``step_us`` / ``in_graph_step_us`` / ``event_overhead``. A ``bench report``
summary (``--json-out``) has no per-op times and is refused.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Mapping

from l2sched.errors import Diagnostic, L2sInputError, Span
from l2sched.files import note_input, parse_json_text, read_input_text
from l2sched.lint.gantt import Bar


@dataclass
class MeasuredTimeline:
    """One arm at one M of a ``bench run`` result: ``path`` (the file),
    ``arm``, ``tokens`` (M), ``ops`` and ``fills`` as in the result,
    ``record`` (the arm's whole record)."""

    path: str
    arm: str
    tokens: int
    ops: dict
    fills: dict
    record: dict

    def panel_bars(self, layer: int, classes: Mapping[str, str],
                   next_ops: set | None = None):
        """``(bars, note)`` of decoder layer ``layer`` for ``gantt``: its
        ops (main and aux stream) and fills, plus the next layer's ops up to
        the last one named in ``next_ops`` (the next-layer ops the predicted
        panel shows; default: all of them) and before its first
        ``expert_stream`` op, faded; times in us from the layer's first op.
        ``classes``: op name -> mark class, from the model adapter's decode
        timeline (``gantt`` passes those of the predicted step graph); an op
        it does not name is drawn as ``small``. The measured result names
        its ops as the adapter does, so this module knows no op names."""
        own = {k: v for k, v in self.ops.items() if _layer(k) == layer}
        if not own:
            return [], f"measured ({self.arm} arm): no ops of layer {layer} in the result"
        t0 = min(v["start_us"] for v in own.values())
        nxt = sorted(((k, v) for k, v in self.ops.items() if _layer(k) == layer + 1),
                     key=lambda kv: kv[1]["start_us"])
        if next_ops is not None:
            keep = [i for i, (k, _) in enumerate(nxt) if _op(k) in next_ops]
            nxt = nxt[:keep[-1] + 1] if keep else []
        stop = next((v["start_us"] for k, v in nxt
                     if classes.get(_op(k)) == "expert_stream"), None)
        bars = []
        for k, v in list(own.items()) + [(k, v) for k, v in nxt
                                          if stop is None or v["start_us"] < stop]:
            faded = _layer(k) != layer
            op = _op(k)
            cls = classes.get(op, "small")
            bars.append(Bar("aux" if v.get("stream") == "aux" else "main",
                            v["start_us"] - t0, v["finish_us"] - t0, cls, op,
                            f"measured L{_layer(k)} {op}: {v['start_us'] - t0:.1f}.."
                            f"{v['finish_us'] - t0:.1f} us", faded))
        for k, f in self.fills.items():
            if _layer(k) != layer or f.get("fill_exit_us") is None or k not in self.ops:
                continue
            at = self.ops[k]
            start = at["finish_us"] if f["fill_exit_us"] > at["finish_us"] else at["start_us"]
            n = f.get("fills", 0)
            label = f"{n} fill{'s' if n != 1 else ''} at {_op(k)}"
            bars.append(Bar("side", start - t0, f["fill_exit_us"] - t0, "fill", label,
                            f"measured: {label}, last one done at "
                            f"{f['fill_exit_us'] - t0:.1f} us"))
        over = (self.record.get("event_overhead") or {}).get("per_op_us")
        note = (f"measured ({self.arm} arm, {self.path}): in-graph events"
                + (f", which add about {over:.1f} us per op" if over else ""))
        return bars, note

    def caption(self, tokens: int) -> str:
        """A caption line: the measured step and gain of this arm."""
        step = (self.record.get("step_us") or {}).get("median")
        gain = self.record.get("gain_pct")
        text = f"Measured ({self.path}, {self.arm} arm, M={tokens})"
        if step is not None:
            text += f": step {step:.0f} us (CUDA-graph replay)"
        if gain is not None:
            text += f", gain {gain:+.2f}% over no prefetch"
        return text + "."


def _layer(key: str) -> int:
    head = key.split(":", 1)[0]
    return int(head) if head.isdigit() else -1


def _op(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


def load_measured(path: str, tokens: int, arm: str = "compiled") -> MeasuredTimeline:
    """The ``arm`` at M = ``tokens`` of the ``bench run`` result at ``path``.
    A ``.gz`` path is gunzipped first. Raises ``L2sInputError`` (one line at
    the file) when it cannot be read, is not JSON, is not a ``bench run``
    result or is a ``--dry`` one, lacks that M or arm (naming
    those it has), or has no per-op times (a ``bench report`` summary)."""
    if str(path).endswith(".gz"):  # results are committed gzipped
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                text = f.read()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise L2sInputError(Diagnostic(f"cannot read bench result: {e}",
                                           Span.file(path))) from None
        note_input(path, "bench result")
    else:
        text = read_input_text(path, "bench result")
    doc = parse_json_text(text, str(path))

    def bad(msg: str) -> L2sInputError:
        return L2sInputError(Diagnostic(msg, Span.file(path)))

    if not isinstance(doc, dict) or not isinstance(doc.get("per_m"), dict):
        raise bad("not an `l2sched bench run` result (no 'per_m')")
    if doc.get("dry"):
        raise bad("a --dry result: its times are a fake clock, not measurements")
    per_m = doc["per_m"].get(str(tokens))
    if not isinstance(per_m, dict):
        have = ", ".join(sorted(doc["per_m"], key=lambda m: int(m) if m.isdigit() else 0))
        raise bad(f"has no M={tokens} (it measured M={have}); pass --tokens")
    arms = per_m.get("arms") or {}
    if arm not in arms:
        raise bad(f"has no arm '{arm}' at M={tokens} (arms: {', '.join(arms)})")
    rec = arms[arm]
    if not isinstance(rec.get("ops"), dict) or not rec["ops"]:
        raise bad(f"arm '{arm}' has no per-op times ('ops'): a `bench report` "
                  f"summary and the results committed under benchmarks/results (which "
                  f"drop them) have none; give the full `bench run --output` result")
    for key, v in rec["ops"].items():
        if not isinstance(v, dict) or not all(
                isinstance(v.get(f), (int, float)) for f in ("start_us", "finish_us")):
            raise bad(f"ops['{key}'] needs numbers start_us and finish_us")
    fills = rec.get("fills") if isinstance(rec.get("fills"), dict) else {}
    return MeasuredTimeline(path, arm, tokens, rec["ops"], fills, rec)
