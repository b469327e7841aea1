"""``l2sched inventory``: the per-GPU tensors of every decoder layer, as a
table or JSON."""

from __future__ import annotations

import json
import sys
from typing import Sequence

from l2sched.cli.options import add_command
from l2sched.errors import L2sError, L2sUsageError
from l2sched.model.adapters import DEFAULT_ADAPTER, adapter_of_config
from l2sched.model.config import (
    load_model_config,
    model_config_help,
    read_config_arg,
)
from l2sched.model.inventory import Inventory, TPSplitError, analytical_inventory
from l2sched.units import MiB, plural


def _ranges(idx: Sequence[int]) -> str:
    out, start = [], None
    for a, b in zip(idx, list(idx[1:]) + [None]):
        start = a if start is None else start
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = None
    return ",".join(out)


def _mib(n: int) -> str:
    return f"{n / MiB:,.2f} MiB"


def render_table(inv: Inventory) -> str:
    """The ``l2sched inventory`` text: per layer kind, one row per tensor
    (path, dtype, per-rank shape, bytes, replicated, lazy) and the per-layer
    totals, then the totals over all layers (per GPU; views not counted)."""
    lines = [f"{inv.model_name} ({inv.model}): {len(inv.layers)} decoder layers, "
             f"TP{inv.tp}{' + EP' if inv.ep else ''}, tensors of TP rank "
             f"{inv.tp_rank} ({inv.source}), bytes per GPU"]
    for kind, idx in inv.kind_groups():
        ts = inv.layers[idx[0]]
        lines += ["", f"{kind}: {plural(len(idx), 'layer')}: {_ranges(idx)}"]
        rows = [("tensor", "dtype", "shape", "bytes", "replicated", "lazy")]
        for t in ts:
            rep = ("yes" if t.replicated else
                   f"{t.replicated_bytes:,} B" if t.replicated_bytes else "no")
            notes = []
            if t.view_of:
                notes.append(f"view of {t.view_of}")
            if not t.decode_read:
                notes.append("not read in decode")
            if t.experts:
                notes.append(f"experts {t.experts[0]}-{t.experts[1] - 1}, "
                             f"{t.bytes_per_expert:,} B each")
            path = t.path + (f"  ({'; '.join(notes)})" if notes else "")
            rows.append((path, t.dtype, "x".join(map(str, t.shape)) or "()",
                         f"{t.nbytes:,}", rep, "yes" if t.lazy else "no"))
        w = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            lines.append("  " + "  ".join(
                r[i].rjust(w[i]) if i == 3 else r[i].ljust(w[i])
                for i in range(6)).rstrip())
        full = inv.layer_bytes(idx[0])
        lines.append(f"  per layer: {full:,} B = {_mib(full)}")
        if any(t.experts for t in ts):
            nr = inv.layer_bytes(idx[0], routed=False)
            lines.append(f"  per layer without routed experts: {nr:,} B = "
                         f"{_mib(nr)}")
    tot, tot_nr = inv.total_bytes(), inv.total_bytes(routed=False)
    lines += ["", f"total over {len(inv.layers)} layers: {tot:,} B = {_mib(tot)}",
              f"total without routed experts: {tot_nr:,} B = {_mib(tot_nr)}"]
    return "\n".join(lines) + "\n"


def cmd_inventory(args) -> int:
    """Print the table (or ``--json``). Returns 0, or 1 after printing an
    ``L2sError``; raises ``L2sUsageError`` for a ``--tp`` or ``--tp-rank``
    out of range or a ``--tp`` the model does not split at (exit 2, as
    ``fit --tp``; a schedule's ``tp`` line the model does not split at is
    an error in the input, exit 1)."""
    if args.tp < 1:
        raise L2sUsageError(f"--tp must be at least 1, got {args.tp}")
    if not 0 <= args.tp_rank < args.tp:
        raise L2sUsageError(f"--tp-rank must be in 0..{args.tp - 1}, "
                            f"got {args.tp_rank}")
    try:
        config = read_config_arg(args.model_config)[0] if args.model_config \
            else load_model_config(None)
        adapter = adapter_of_config(config)
        name = args.model_config or adapter.DEFAULT_MODEL_NAME
        inv = analytical_inventory(config, args.tp, args.ep, args.tp_rank,
                                   model_name=name, adapter=adapter.NAME)
    except TPSplitError as e:  # --tp is an option: a usage error, exit 2 (as fit)
        raise L2sUsageError(e.diagnostics[0].message) from None
    except L2sError as e:
        print(str(e), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(inv.to_json(), indent=1))
    else:
        print(render_table(inv), end="")
    return 0


def add_cli(sub) -> None:
    """Register ``inventory [--model-config P] [--tp N] [--ep] [--tp-rank R]
    [--json]``."""
    p = add_command(
        sub, "inventory", cmd_inventory,
        help="per-GPU tensor inventory of every decoder layer",
        description="Print each layer kind's tensors (bytes per GPU, TP "
                    "replication, lazily created) and the totals, from a HF "
                    "config.json (default: the embedded config of the default "
                    f"adapter, {DEFAULT_ADAPTER}).")
    p.add_argument("--model-config", metavar="PATH", help=model_config_help())
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor-parallel size (default 1)")
    p.add_argument("--ep", action="store_true",
                   help="expert parallel (--enable-expert-parallel, DP 1)")
    p.add_argument("--tp-rank", type=int, default=0, metavar="R",
                   help="TP rank whose tensors are listed (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
