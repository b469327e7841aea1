"""The tables every adapter's generated hooks page shares (``docs.py`` of
each adapter writes its own introduction and hook-point table around
them): the decode timeline of one layer kind and the list of op sources.
Pure text; ``op_bytes`` comes from ``l2sched docs hooks``."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from l2sched.model.adapters.records import Op


def timeline_table(kind: Any, ops: Sequence[Op],
                   op_bytes: Callable[[Any, Op], str] | None, *,
                   stream: bool = True, eager_mark: bool = False,
                   shown_read: Callable[[str], bool] = lambda path: True
                   ) -> list[str]:
    """The lines of the ``### KIND`` section: a Markdown table of ``ops``
    (the decode timeline of a layer of ``kind``), one row per op: number,
    name (with ``*`` inside an eager-break region when ``eager_mark``),
    class, stream (when ``stream``), condition, the reads ``shown_read``
    keeps, the bytes-read column when ``op_bytes(kind, op)`` is given (per
    GPU at TP4), the hooks before and after."""
    cols = ["#", "op", "class"] + (["stream"] if stream else []) + [
        "condition", "reads"]
    if op_bytes is not None:
        cols.append("bytes read per GPU at TP4")
    cols += ["hooks before", "hooks after"]
    out = ["", f"### {kind}", "", "| " + " | ".join(cols) + " |",
           "|" + "---|" * len(cols)]
    for n, op in enumerate(ops, 1):
        reads = [r for r in op.reads if shown_read(r)]
        row = [str(n), f"`{op.name}`{'*' if eager_mark and op.eager_break else ''}",
               op.cls] + ([op.stream] if stream else []) + [
            op.condition or "-", "<br>".join(f"`{r}`" for r in reads) or "-"]
        if op_bytes is not None:
            row.append(op_bytes(kind, op))
        row += [", ".join(f"`{x}`" for x in op.hooks_before) or "-",
                ", ".join(f"`{x}`" for x in op.hooks_after) or "-"]
        out.append("| " + " | ".join(row) + " |")
    return out


def op_sources(timelines: Iterable[Sequence[Op]]) -> list[str]:
    """``- `NAME`: DESCRIPTION (`SOURCE`)`` per op name, at its first
    occurrence in ``timelines`` (the decode timelines of the kinds shown)."""
    names: dict[str, Op] = {}
    for ops in timelines:
        for op in ops:
            names.setdefault(op.name, op)
    return [f"- `{op.name}`: {op.description} (`{op.source}`)" for op in names.values()]
