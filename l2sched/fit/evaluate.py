"""Evaluating a candidate schedule with the lint's model.

An evaluation computes what ``l2sched.lint.run_lint`` computes, once per
decode-token count M and device-profile variant (``Evaluator.lint_runs``:
the same plan, step graphs, simulation and ``LintRun``), with the parts
that do not change between runs done once: the plan is compiled once per
candidate, the no-prefetch simulation once per (M, variant), the target
rules (``L2S001``-``L2S003``) once per candidate. The predicted gain is
``step_period("base") - step_period("sim")`` (us); the hard constraints
are every error-severity finding, the warnings of ``HARD_WARNINGS``, a fill
larger than the usable L2 (the profile's effective L2, else its L2) and the
pending-bytes check (``max_pending_bytes``) against the same. ``tests/test_fit.py`` checks that the gains equal ``run_lint``'s.

During the search the model is a *surrogate* of the full model
(``surrogate_layers``): the shortest cyclic subsequence of the decoder layers
that keeps the first and last layer and every (previous kind, kind, next
kind) triple of the full model (GLM-5.3-Flash's 45 layers become 9). The step gain is summed per layer position, each
weighted by how many layers of the full model have its triple
(``Evaluator.gain``): a schedule that names layers by kind gives every
layer with the same neighbours the same fills, so this reproduces the full
model's gain (0.1 us apart on the shipped H200 schedule at M=1..64; about
1% high on the SM120 seed schedule's fills, which are larger and span more
of the step; 3% high on the SM120 fit, whose KDA window takes the next MLA
layer's tensors: docs/fit.md) at a fifth of the cost. The fitted schedule
itself is judged on the full model.

Units: microseconds (us), bytes (B).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

from l2sched.compiler.compile import compile_plan
from l2sched.lang.resolve import load_schedule_text, resolve
from l2sched.lint import LintRun
from l2sched.lint.rules import left_over, modes, size, timing
from l2sched.lint.rules import targets as target_rules
from l2sched.lint.prepare import prepare
from l2sched.model.adapters import adapter_of_config, get_adapter
from l2sched.model.inventory import analytical_inventory

#: Warnings that make a candidate infeasible like an error: the hook does
#: not run in the graph mode (L2S004), a window in dense-MLP layers whose
#: fill overlaps the MLP or whose idle time the profile does not measure
#: (L2S005; issue 45: no published run prefetched them) and a set-aside
#: above the device maximum (L2S108). Every error-severity finding (L2S101
#: fill over the expert stream, L2S107 fill larger than the L2, ...) does
#: too, and so does a window whose fill is larger than the usable L2
#: (``_check``).
HARD_WARNINGS = ("L2S004", "L2S005", "L2S108")
#: The graph mode decode runs in (vLLM serves decode with FULL CUDA graphs).
GRAPH_MODE = "full"
#: The rule families run per M and variant (``targets`` does not depend on
#: either and runs once per candidate, ``Evaluator.static_problems``).
TIMED_FAMILIES = (modes, timing, size, left_over)


def _triples(kinds: list[str], seq: list[int]) -> dict:
    """``(prev kind, kind, next kind) -> count`` over the cyclic ``seq``."""
    out: dict = {}
    k = len(seq)
    for i in range(k):
        t = (kinds[seq[i - 1]], kinds[seq[i]], kinds[seq[(i + 1) % k]])
        out[t] = out.get(t, 0) + 1
    return out


def surrogate_layers(kinds: list[str]) -> list[int]:
    """Indices of the full model's layers the surrogate keeps (see the
    module docstring): blocks of consecutive layers are cut, shortest block
    and earliest first, while the first and last layer stay and the set of
    triples is unchanged. Deterministic."""
    seq = list(range(len(kinds)))
    want = set(_triples(kinds, seq))
    cut = True
    while cut:
        cut = False
        for width in range(1, len(seq) // 2 + 1):
            for i in range(1, len(seq) - width):  # never layer 0 nor the last
                new = seq[:i] + seq[i + width:]
                if len(new) >= 3 and set(_triples(kinds, new)) == want:
                    seq, cut = new, True
                    break
            if cut:
                break
    return seq


def surrogate_config(config: dict, kinds, keep: list[int], adapter=None) -> dict:
    """The HF text config of the surrogate: ``config`` with the layers of
    ``keep`` (``kinds``: the layer kind of every full-model layer), as the
    model's adapter (default: the config's, ``adapter_of_config``) writes it
    (``subset_config``)."""
    ad = adapter if adapter is not None else adapter_of_config(config)
    return ad.subset_config(config, kinds, keep)


@dataclass
class Evaluation:
    """One candidate's result: ``gains[variant][M]`` (us), ``problems``
    (hard-constraint violations as ``CODE: message``; empty = feasible),
    ``pending`` (largest pending fill bytes seen, B)."""

    gains: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    pending: int = 0

    @property
    def feasible(self) -> bool:
        """True without hard-constraint violations."""
        return not self.problems


class Evaluator:
    """Runs the lint on candidate texts for one model at one TP degree.

    ``config``: the full model's HF text config; ``variants``: the
    ``bound.Variant``s to simulate; ``tokens``: the M values; ``capacity``:
    the profile's effective L2 (B), the pending-bytes limit; ``surrogate``:
    evaluate on the surrogate model (see the module docstring); ``model``:
    the adapter's name (default: the config's, ``adapter_of_config``)."""

    def __init__(self, config: dict, tp: int, variants, tokens, *, capacity: int,
                 surrogate: bool, model: str | None = None):
        self.adapter = get_adapter(model) if model else adapter_of_config(config)
        full = analytical_inventory(config, tp=tp, ep=False, adapter=self.adapter.NAME)
        names = [str(k) for k in full.kinds]
        self.full_inventory = full
        self.variants = list(variants)
        self.capacity = capacity
        self.tokens = tuple(tokens)
        self.weights: list[float] | None = None
        self.config = config
        self.inventory = full
        if surrogate:
            keep = surrogate_layers(names)
            if len(keep) < len(names):
                self.config = surrogate_config(config, full.kinds, keep, self.adapter)
                self.inventory = analytical_inventory(self.config, tp=tp, ep=False,
                                                      adapter=self.adapter.NAME)
                counts = _triples(names, list(range(len(names))))
                mine = _triples(names, keep)
                self.weights = []
                for i in range(len(keep)):
                    t = (names[keep[i - 1]], names[keep[i]],
                         names[keep[(i + 1) % len(keep)]])
                    self.weights.append(counts[t] / mine[t])
        self.cache: dict = {}
        self.base: dict = {}  # prepare's no-prefetch simulations (its base_cache)

    def schedule(self, text: str, tree=None):
        """The resolved schedule of ``text`` (or of its parsed ``tree``, a
        ``ScheduleFile``, which skips the parser) for this model."""
        if tree is not None:
            return resolve([tree], (), self.config)
        return load_schedule_text(text, "<fit>", model_config=self.config)

    def gain(self, lr) -> float:
        """Predicted step-time gain (us) of a ``LintRun``: the full model's
        ``step_period`` difference, or on the surrogate the per-position
        layer-time differences weighted by triple counts."""
        if self.weights is None:
            return lr.step_period("base") - lr.step_period("sim")
        n = lr.sg.num_layers
        total = 0.0
        for pos in range(1, n + 1):
            d = []
            for sg, sim in ((lr.base_sg, lr.base), (lr.sg, lr.sim)):
                d.append(sim.timing[sg.layer_end[pos]].finish
                         - sim.timing[sg.layer_end[pos - 1]].finish)
            total += self.weights[pos % n] * (d[0] - d[1])
        return total

    def static_problems(self, schedule) -> list[str]:
        """Errors of the target rules (no simulation): a pattern matching
        nothing, a tensor named twice, a written buffer."""
        run = types.SimpleNamespace(schedule=schedule, inventory=self.inventory,
                                    plan=compile_plan(schedule, self.inventory, 0))
        return [f"{f.code}: {f.message}" for f in target_rules.check(run)
                if f.severity == "error"]

    def evaluate(self, text: str, tree=None) -> Evaluation:
        """Lint ``text`` at every M on every variant (cached by text)."""
        got = self.cache.get(text)
        if got is not None:
            return got
        schedule = self.schedule(text, tree)
        ev = Evaluation(problems=self.static_problems(schedule))
        if not ev.problems:
            for name, lr in self.lint_runs(schedule):
                ev.gains.setdefault(name, {})[lr.tokens] = self.gain(lr)
                lr.findings = [f for fam in TIMED_FAMILIES for f in fam.check(lr)]
                _check(lr, name, ev, self.capacity)
        self.cache[text] = ev
        return ev

    def lint_runs(self, schedule):
        """``(variant name, LintRun)`` of ``schedule`` at every M and variant, as
        ``run_lint`` computes them (``lint.prepare.prepare``: same plan, graphs
        and simulation), with the plan compiled once and the no-prefetch
        simulation cached; their ``findings`` are left to the caller."""
        plan = compile_plan(schedule, self.inventory, 0)
        for m in self.tokens:
            for v in self.variants:
                p = prepare(schedule, self.inventory, v.device_profile, tokens=m, plan=plan,
                            model_config=self.config, base_cache=self.base)
                yield v.name, LintRun(schedule, self.inventory, p.step_plan, v.device_profile,
                                      p.sg, p.sim, p.base_sg, p.base, m, GRAPH_MODE)


def _check(lr, variant: str, ev: Evaluation, capacity: int) -> None:
    """Add the hard-constraint violations of one lint run to ``ev``;
    ``capacity`` is the profile's effective L2 (B)."""
    seen = set(ev.problems)
    for f in lr.findings:
        if f.severity == "error" or f.code in HARD_WARNINGS:
            p = f"{f.code}: {f.message}"
            if p not in seen:
                ev.problems.append(p)
                seen.add(p)
    over: dict = {}  # window -> its largest fill above the usable L2 (B)
    for issue in lr.plan.issues:
        if issue.nbytes > capacity:
            over[issue.window] = max(over.get(issue.window, 0), issue.nbytes)
    for window, nbytes in over.items():
        p = (f"usable L2: window '{window}' fills up to {nbytes} B at once, more than "
             f"the {capacity} B usable L2 (the effective L2, else l2.bytes)")
        if p not in seen:
            ev.problems.append(p)
            seen.add(p)
    pending = max_pending_bytes(lr)
    ev.pending = max(ev.pending, pending)
    if pending > capacity:
        ev.problems.append(f"pending: {pending} B of landed fill bytes wait for their "
                           f"consumers at once, more than the {capacity} B effective "
                           f"L2 ({variant}, M={lr.tokens})")


def max_pending_bytes(lr) -> int:
    """The largest number of landed, not yet consumed fill bytes at one
    instant of a ``LintRun``'s simulation (B). A fill's bytes land in
    stream order at a uniform rate over its device-memory phase; a byte
    range is pending from when it landed until the start of the first op
    that reads it (the end of the step for bytes nobody reads); a range its
    consumer reads before it landed never counts."""
    sg, timing = lr.sg, lr.sim.timing
    consumed: dict = {}
    for v, d in sg.nodes.items():
        if d["cls"] == "fill" or not d["active"]:
            continue
        for r in d["reads"]:
            for c in sg.chunks.get((d["pos"], r.storage), ()):
                if min(r.hi, c.lo + c.nbytes) > max(r.lo, c.lo):
                    key = (c.fill, c.offset)
                    t = timing[v].start
                    consumed[key] = min(consumed.get(key, t), t)
    end = timing["join"].finish
    events: list[tuple[float, int]] = []
    for chunks in sg.chunks.values():
        for c in chunks:
            ft = timing[c.fill]
            total = sg.nodes[c.fill]["fill"].nbytes
            if ft.dram_start is None or total <= 0:
                continue
            landed = ft.dram_start + (ft.dram_end - ft.dram_start) * (
                (c.offset + c.nbytes) / total)
            used = consumed.get((c.fill, c.offset), end)
            if used > landed:
                events += [(landed, c.nbytes), (used, -c.nbytes)]
    events.sort(key=lambda e: (e[0], e[1]))  # releases before arrivals at a tie
    now = peak = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak
