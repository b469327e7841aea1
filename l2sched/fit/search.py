"""The search of ``l2sched fit``: a greedy pass over hook points in time
order, a local search, and the final judgement on the full model.

1. **Caps.** The no-prefetch step is simulated on the surrogate model
   (``evaluate``) with the pessimistic profile at every M. For each layer kind
   and hook point, the bytes a fill could land between the hook and the next
   routed-expert stream (``idle us x`` the fastest fill kernel's rate, times
   ``CAP_MARGIN``, the smallest over M and layers) cap that hook's budgets; a
   hook with less than ``MIN_BUDGET`` is never used (a fill there would
   overlap the expert stream, L2S101).
2. **Greedy pass.** Layer kinds in order of layer count; per kind, hook
   points in time order. At each hook the options are: nothing; extending a
   chain of this kind by a window at this hook (``carry``); a new chain at one
   of the first ``starts`` groups after what earlier chains cover, with
   ``budgets`` budgets (group boundaries and a ladder, up to the cap). The
   best option by the search objective is kept (ties keep the earlier
   option, so "nothing" wins a tie).
3. **Local search.** From the best candidate, every single change: a budget
   up or down by each of ``steps``; dropping a window (and the rest of its
   chain); moving a chain's start by one group; the cache policy, the
   set-aside (0 / max) and the fill kernel (unless ``--kernel`` fixes it;
   only kernels whose shape fits the device, ``caps.fitting_kernels``). The
   best improving change is taken, for at most ``rounds`` rounds.
4. **Final.** The ``finalists`` best distinct candidates are linted on the
   full model with every profile variant; the best whose lower bound is
   feasible everywhere wins, unless its objective does not beat the noise
   floor: then the answer is no prefetch.

Search objective: the weighted sum over M of the gain on the ``low``
profile variant (us), for a candidate with no hard-constraint violation
and no M predicted slower than minus its noise floor; else none. Final
objective: the same with the lower bound (the smallest gain over every
variant) on the full model. Deterministic: a fixed amount of work in a
fixed order, ties broken by order.
"""

from __future__ import annotations

from dataclasses import dataclass

from l2sched.errors import L2sUsageError
from l2sched.fit.bound import BoundInfo, profile_variants
from l2sched.device import DeviceProfile, provenance
from l2sched.fit.caps import fitting_kernels, hook_caps
from l2sched.fit.unmeasured import gate_unmeasured
from l2sched.fit.pool import BatchEvaluator
from l2sched.fit.space import (BUDGET_STEP, MIN_GAP_US, STREAMING_CLASSES, Candidate,
                                Chain, Link, build_streams, candidate_tree, chain_valid)
from l2sched.lang.formatter import format_file
from l2sched.lint.noise import noise_floor_us
from l2sched.model.adapters import DEFAULT_ADAPTER, adapter_of_config, get_adapter
from l2sched.model.config import default_config

#: Smallest budget a window gets (B): 1 MB.
MIN_BUDGET = 1_000_000
#: Improvements below this (us) are ties.
EPS_US = 1e-6


@dataclass(frozen=True)
class SearchSize:
    """How much the search tries: chain ``starts`` and ``budgets`` per
    hook point in the greedy pass, local-search ``rounds`` and budget
    ``steps`` (B), how many ``finalists`` the full model judges, and the
    greedy pass's ``beam`` width (each candidate of the last beam starts a
    local search). A wider beam or more budgets does not reliably find a
    better schedule (the landscape has many local optima: on the h200
    profile beam 2 gave +491 us against +482 us, on the SM120 estimate
    +2802 us against +3243 us) and costs 1.5-3x the time."""

    starts: int
    budgets: int
    rounds: int
    steps: tuple[int, ...]
    finalists: int
    beam: int = 1


#: The default search (about 600 surrogate evaluations).
DEFAULT_SIZE = SearchSize(2, 4, 6, (1_000_000, 4_000_000), 3)
#: ``--quick``: for tests (about a fifth of the default).
QUICK_SIZE = SearchSize(1, 2, 2, (2_000_000,), 2)


@dataclass
class FitOptions:
    """What to fit: TP degree ``tp``, decode-token counts ``tokens`` and
    their ``weights`` (default 1 each), the fill ``kernel`` (None = search
    the profile's kernels), per-M ``noise_floor`` (us; None = the A/A
    floors of ``bound``), ``quick`` (the reduced search), worker ``jobs``,
    ``model_config`` (None = the config embedded for ``model``), ``model``
    (the adapter's name; None = the one serving ``model_config``, else
    ``DEFAULT_ADAPTER``),
    ``max_tokens`` of the schedule, and the persisting-L2 ``set_aside``:
    ``"0"`` (default) or ``"max"`` fixes it, ``"search"`` lets the search
    choose. The default is 0 because the model charges a set-aside only the
    expert stream's slowdown (``l2.set_aside_stream_slowdown``) while the one measurement with one in force shows the
    no-prefetch step 3.5-22% slower (benchmarks/results/
    h200-2026-12-01-fit-proof.md). ``device_ref``: the schedule's
    ``device`` value, a profile file's path (None = the profile's shipped
    name). ``allow_unmeasured``: windows even on unmeasured terms (``fit.unmeasured``)."""

    tp: int = 4
    tokens: tuple[int, ...] = (1, 4, 16, 64)
    weights: tuple[float, ...] | None = None
    kernel: str | None = None
    noise_floor: dict | None = None
    quick: bool = False
    jobs: int = 1
    model_config: dict | None = None
    model: str | None = None
    max_tokens: int = 256
    set_aside: str = "0"
    device_ref: str | None = None
    allow_unmeasured: bool = False

    def weight(self, m: int) -> float:
        """The weight of M = ``m``."""
        return 1.0 if self.weights is None else self.weights[self.tokens.index(m)]

    def floor(self, m: int) -> float:
        """The noise floor (us) at M = ``m``."""
        if self.noise_floor is not None and m in self.noise_floor:
            return self.noise_floor[m]
        return noise_floor_us(m)


@dataclass
class Scored:
    """A candidate, its text, its ``Evaluation`` and objective (None =
    infeasible)."""

    candidate: Candidate
    text: str
    ev: object
    objective: float | None


@dataclass
class FitResult:
    """The answer: ``candidate`` (None = no prefetch), per-M ``rows`` of
    ``(M, weight, median gain us, lower bound us, noise floor us)`` (the
    gains of the chosen candidate on the full model; zeros for no prefetch),
    ``objective`` and ``floor`` (weighted sums, us), ``best_rejected``
    (objective of the best candidate when it did not beat the floor),
    ``info`` (how the bound was made), ``evaluations`` (surrogate, full)."""

    candidate: Candidate | None
    rows: list
    objective: float
    floor: float
    info: BoundInfo
    evaluations: tuple[int, int]
    best_rejected: float | None = None
    variants: tuple[str, ...] = ()
    layers: tuple[int, int] = (0, 0)
    unmeasured: tuple[str, ...] = ()  # these three: fit.unmeasured
    unmeasured_blocking: tuple[str, ...] = ()
    withheld: "FitResult | None" = None


class Search:
    """One fit of ``device_profile`` (a ``DeviceProfile``) with ``opts``
    (``FitOptions``); ``progress(phase, done, total)`` is told how far it
    got. ``run()`` returns the ``FitResult``."""

    def __init__(self, device_profile: DeviceProfile, opts: FitOptions, progress=None):
        self.device_profile = device_profile  # kernel_notes: unsearched kernel -> why
        fitting, self.kernel_notes = fitting_kernels(device_profile)
        if opts.kernel in self.kernel_notes:
            raise L2sUsageError(f"--kernel {opts.kernel}: "
                                f"{self.kernel_notes[opts.kernel]}")
        if not fitting:
            raise L2sUsageError(f"device profile {device_profile.name}: no fill kernel fits its "
                                f"device limits ({'; '.join(self.kernel_notes.values())})")
        self.opts = opts
        self.size = QUICK_SIZE if opts.quick else DEFAULT_SIZE
        self.progress = progress or (lambda phase, done, total: None)
        if opts.model is not None:
            self.adapter = get_adapter(opts.model)
        elif opts.model_config is not None:
            self.adapter = adapter_of_config(opts.model_config)
        else:
            self.adapter = get_adapter(DEFAULT_ADAPTER)
        self.model = self.adapter.NAME  # the fitted schedule's ``model``
        config = opts.model_config if opts.model_config is not None \
            else default_config(self.model)
        self.variants, self.info = profile_variants(device_profile)
        low = [v for v in self.variants if v.name == "low"]
        cap = device_profile.capacity_bytes
        self.search = BatchEvaluator((config, opts.tp, low, opts.tokens),
                                     {"surrogate": True, "capacity": cap,
                                      "model": self.model}, opts.jobs)
        self.final = BatchEvaluator((config, opts.tp, self.variants, opts.tokens),
                                    {"surrogate": False, "capacity": cap,
                                     "model": self.model}, opts.jobs)
        inv = self.final.local.full_inventory
        kind_layers: dict[str, list[int]] = {}
        for i, k in enumerate(inv.kinds):
            kind_layers.setdefault(str(k), []).append(i)
        self.kind_layers = kind_layers
        self.kinds = sorted(kind_layers, key=lambda k: (-len(kind_layers[k]), k))
        self.streams = build_streams(self.adapter, inv, kind_layers, self._wanted)
        #: kind name -> the selector names of its layers (``kind_selector``)
        self.kind_selectors = {str(k): tuple(self.adapter.kind_selector(k))
                               for k in inv.kinds}
        self.kernels = [opts.kernel] if opts.kernel else fitting
        self.kernel0 = opts.kernel or (device_profile.fill_default if device_profile.fill_default
                                       in fitting else fitting[0])
        self.capacity = device_profile.capacity_bytes
        self.caps: dict = {}
        self.seen: dict[str, Scored] = {}

    def _wanted(self, kind: str, op) -> bool:
        """Whether op ``op`` of a ``kind`` layer gains from L2-resident
        weights in the model (see ``space``)."""
        if op.cls in STREAMING_CLASSES:
            return True
        times = self.device_profile.op_times(self.model).get((kind, op.name))
        return times is not None and any(
            c - h >= MIN_GAP_US for c, h in (times.at(m) for m in self.opts.tokens))

    # ------------------------------------------------------------- scoring
    def tree(self, cand: Candidate, name: str = "fit"):
        """The candidate's parsed schedule file (``space.candidate_tree``)."""
        return candidate_tree(cand, self.streams, name=name, model=self.model,
                              selectors=self.kind_selectors,
                              device=self.opts.device_ref or self.device_profile.name,
                              tp=self.opts.tp,
                              max_tokens=self.opts.max_tokens)

    def text(self, cand: Candidate, name: str = "fit") -> str:
        """The candidate's ``.l2s`` text (no comments)."""
        return format_file(self.tree(cand, name))

    def objective(self, ev, names) -> float | None:
        """Weighted sum over M of the smallest gain over variants ``names``
        (us); None when infeasible or some M is below minus its floor."""
        if not ev.feasible:
            return None
        total = 0.0
        for m in self.opts.tokens:
            lb = min(ev.gains[v][m] for v in names)
            if lb < -self.opts.floor(m):
                return None
            total += self.opts.weight(m) * lb
        return total

    def score(self, cands: list[Candidate], phase: str) -> list[Scored]:
        """Evaluate ``cands`` on the surrogate (pessimistic variant)."""
        trees = [self.tree(c) for c in cands]
        texts = [format_file(t) for t in trees]
        evs = self.search.evaluate_many(texts, trees)
        out = []
        for c, t, ev in zip(cands, texts, evs):
            s = Scored(c, t, ev, self.objective(ev, ("low",)))
            self.seen.setdefault(t, s)
            out.append(s)
        self.progress(phase, self.search.count, 0)
        return out

    # ---------------------------------------------------------------- caps
    def compute_caps(self) -> None:
        """Per ``(kind, hook)``: the most bytes a fill there may take (B)."""
        ev = self.search.local
        empty = ev.schedule(self.text(Candidate("evict_last", "0", self.kernel0)))
        self.caps = hook_caps(ev, empty, self.adapter, self.streams, self.capacity)

    def budgets(self, stream, first, start: int, offset: int, k: int) -> list[int]:
        """Up to ``k`` budgets (B) for a window at ``stream``'s hook whose
        chain takes ``first``'s stream (a ``Stream``) from group ``start``,
        ``offset`` bytes of it already taken: the budgets that end at a
        group boundary (whole tensors), the hook's cap and half of it, all
        between ``MIN_BUDGET`` and the cap; spread over that range when
        there are more than ``k``, the largest always kept."""
        room = first.bytes_from(start) - offset
        hi = min(self.caps.get((stream.kind, stream.hook), 0), _round_up(room))
        hi = hi // BUDGET_STEP * BUDGET_STEP
        vals = {hi, hi // 2 // BUDGET_STEP * BUDGET_STEP}
        acc = -offset
        groups = list(first.this[start:]) + list(first.nexts[0][1] if first.nexts
                                                 else ())
        for g in groups:
            acc += g.nbytes
            if acc > 0:
                vals.add(_round_up(acc))
        vals = sorted(v for v in vals if MIN_BUDGET <= v <= hi)
        if len(vals) <= k:
            return vals
        if k < 2:
            return vals[-1:]
        return sorted({vals[round(j * (len(vals) - 1) / (k - 1))] for j in range(k)})

    # -------------------------------------------------------------- greedy
    def hook_options(self, cand: Candidate, kind: str, hook: str) -> list[Candidate]:
        """The greedy pass's options at ``hook`` of ``kind`` layers."""
        stream = self.streams[(kind, hook)]
        out = []
        mine = [c for c in cand.chains if c.kind == kind]
        others = [c for c in cand.chains if c.kind != kind]
        for c in mine:
            first = self.streams[(kind, c.links[0].hook)]
            for b in self.budgets(stream, first, c.start, c.total, self.size.budgets):
                ext = Chain(kind, c.start, c.links + (Link(hook, b),))
                if chain_valid(ext, self.streams):
                    out.append(cand.with_chains(others + [x for x in mine if x != c]
                                                + [ext]))
        last, reaches_next = _covered(mine, self.streams)
        starts = [s for s in stream.starts()
                  if (s < len(stream.this) and stream.this[s].index > last
                      and stream.this[s].nbytes >= MIN_BUDGET)
                  or (s == len(stream.this) and not reaches_next)][:self.size.starts]
        for s in starts:
            for b in self.budgets(stream, stream, s, 0, self.size.budgets):
                out.append(cand.with_chains(cand.chains + (
                    Chain(kind, s, (Link(hook, b),)),)))
        return out

    def greedy(self, best: Scored) -> list[Scored]:
        """The greedy pass (module docstring, step 2), as a beam search:
        the ``beam`` best candidates go on to the next hook point; returns
        the last beam, best first."""
        hooks = [(k, s.hook) for k in self.kinds for (kk, _h), s in self.streams.items()
                 if kk == k and self.caps.get((k, s.hook), 0) >= MIN_BUDGET]
        beam = [best]
        for i, (kind, hook) in enumerate(hooks):
            opts = [c for b in beam for c in self.hook_options(b.candidate, kind, hook)]
            scored = self.score(opts, f"greedy pass: {i + 1}/{len(hooks)} {kind} {hook}")
            # candidates without an objective (infeasible, or below minus the
            # floor: with --set-aside max the empty schedule itself) are not
            # ranked; while nothing has one, the beam stays as it is, so the
            # later hook points are still tried from it
            pool: dict[str, Scored] = {b.text: b for b in beam if b.objective is not None}
            for s in scored:
                if s.objective is not None:
                    pool.setdefault(s.text, s)
            if pool:
                ranked = sorted(pool.values(), key=lambda x: -x.objective)  # stable
                beam = ranked[:self.size.beam]
        return beam

    # -------------------------------------------------------- local search
    def neighbours(self, cand: Candidate) -> list[Candidate]:
        """Every single change of ``cand`` (module docstring, step 3)."""
        out = []
        chains = list(cand.chains)
        for ci, c in enumerate(chains):
            rest = chains[:ci] + chains[ci + 1:]
            first = self.streams[(c.kind, c.links[0].hook)]
            offset = 0
            for li, link in enumerate(c.links):
                cap = self.caps.get((c.kind, link.hook), 0)
                here = self.streams[(c.kind, link.hook)]
                jumps = _neighbours_in(self.budgets(here, first, c.start, offset, 99),
                                       link.budget)
                offset += link.budget
                for b in [link.budget + d * st for st in self.size.steps
                          for d in (-1, 1)] + jumps:
                    if MIN_BUDGET <= b <= cap:
                        links = c.links[:li] + (Link(link.hook, b),) + c.links[li + 1:]
                        out.append(cand.with_chains(rest + [Chain(c.kind, c.start, links)]))
                for hook in self.adjacent_hooks(c.kind, link.hook):
                    start = c.start if li else _same_start(first, c.start,
                                                           self.streams[(c.kind, hook)])
                    if start is not None:
                        links = c.links[:li] + (Link(hook, link.budget),) + c.links[li + 1:]
                        out.append(cand.with_chains(rest + [Chain(c.kind, start, links)]))
                kept = [Chain(c.kind, c.start, c.links[:li])] if li else []
                out.append(cand.with_chains(rest + kept))
            stream = self.streams[(c.kind, c.links[0].hook)]
            for start in (c.start - 1, c.start + 1):
                if start in stream.starts():
                    out.append(cand.with_chains(rest + [Chain(c.kind, start, c.links)]))
        for policy in ("evict_last", "evict_normal"):
            if policy != cand.policy:
                out.append(Candidate(policy, cand.set_aside, cand.kernel, cand.chains))
        if self.opts.set_aside == "search" and self.device_profile.set_aside_max_bytes > 0:
            other = "max" if cand.set_aside == "0" else "0"
            out.append(Candidate(cand.policy, other, cand.kernel, cand.chains))
        for kernel in self.kernels:
            if kernel != cand.kernel:
                out.append(Candidate(cand.policy, cand.set_aside, kernel, cand.chains))
        valid = [c for c in out if all(chain_valid(x, self.streams) for x in c.chains)]
        return list(dict.fromkeys(valid))

    def adjacent_hooks(self, kind: str, hook: str) -> list[str]:
        """The usable hook points right before and after ``hook`` in a
        ``kind`` layer (``caps`` of at least ``MIN_BUDGET``)."""
        hooks = [h for (k, h) in self.streams if k == kind
                 and self.caps.get((k, h), 0) >= MIN_BUDGET]
        if hook not in hooks:
            return []
        i = hooks.index(hook)
        return [hooks[j] for j in (i - 1, i + 1) if 0 <= j < len(hooks)]

    def local(self, best: Scored) -> Scored:
        """The local search (module docstring, step 3)."""
        for r in range(self.size.rounds):
            improved = False
            for s in self.score(self.neighbours(best.candidate),
                                f"local search: round {r + 1}/{self.size.rounds}"):
                if _better(s, best):
                    best, improved = s, True
            if not improved:
                break
        return best

    # --------------------------------------------------------------- final
    def judge(self) -> FitResult:
        """Lint the finalists on the full model with every variant and pick
        the answer (module docstring, step 4)."""
        ranked = sorted((s for s in self.seen.values()
                         if s.objective is not None and s.candidate.chains),
                        key=lambda s: -s.objective)[:self.size.finalists]
        self.progress("full model", 0, len(ranked))
        evs = self.final.evaluate_many([s.text for s in ranked])
        names = tuple(v.name for v in self.variants)
        best = None
        for s, ev in zip(ranked, evs):
            obj = self.objective(ev, names)
            if obj is not None and (best is None or obj > best[1] + EPS_US):
                best = (s, obj, ev)
        self.progress("full model", len(ranked), len(ranked))
        floor = sum(self.opts.weight(m) * self.opts.floor(m) for m in self.opts.tokens)
        counts = (self.search.count, self.final.count)
        layers = (len(self.search.local.inventory.layers),
                  len(self.final.local.inventory.layers))
        common = dict(floor=floor, info=self.info, evaluations=counts,
                      variants=names, layers=layers)
        if best is None or best[1] <= floor:
            rows = [(m, self.opts.weight(m), 0.0, 0.0, self.opts.floor(m))
                    for m in self.opts.tokens]
            why = provenance.unmeasured_terms(self.device_profile, self.opts.tp, set(self.kernels))
            return FitResult(None, rows, 0.0, best_rejected=best and best[1],
                             unmeasured=tuple(why), **common)
        s, obj, ev = best
        rows = [(m, self.opts.weight(m), ev.gains["median"][m],
                 min(ev.gains[v][m] for v in names), self.opts.floor(m))
                for m in self.opts.tokens]
        return gate_unmeasured(FitResult(s.candidate, rows, obj, **common), self.device_profile,
                               self.opts)

    def run(self) -> FitResult:
        """Caps, greedy pass, local search, final judgement."""
        try:
            self.compute_caps()
            start = Candidate("evict_last", "max" if self.opts.set_aside == "max" else "0",
                              self.kernel0)
            best = self.score([start], "start")[0]
            for b in self.greedy(best):  # every candidate scored lands in self.seen
                self.local(b)
            return self.judge()
        finally:
            self.search.close()
            self.final.close()


def _same_start(old, start: int, new) -> int | None:
    """The start in stream ``new`` of the group that is ``start`` in stream
    ``old`` (same layer kind, another hook); None when ``new`` does not
    hold it (its op runs before ``new``'s hook)."""
    if start >= len(old.this):
        return len(new.this) if new.nexts else None
    op = old.this[start].op
    return next((i for i, g in enumerate(new.this) if g.op == op), None)


def _neighbours_in(values: list[int], x: int) -> list[int]:
    """The largest of ``values`` below ``x`` and the smallest above it."""
    below = [v for v in values if v < x]
    above = [v for v in values if v > x]
    return below[-1:] + above[:1]


def _round_up(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``BUDGET_STEP``."""
    return -(-int(nbytes) // BUDGET_STEP) * BUDGET_STEP


def _better(s: Scored, best: Scored) -> bool:
    """True when ``s`` beats ``best`` by more than ``EPS_US``."""
    return s.objective is not None and (best.objective is None
                                        or s.objective > best.objective + EPS_US)


def _covered(chains, streams) -> tuple[int, bool]:
    """The last op index of this layer the ``chains`` (one kind) cover,
    and whether one reaches into the next layer."""
    last, reaches = -1, False
    for c in chains:
        s = streams[(c.kind, c.links[0].hook)]
        acc, done = 0, False
        for g in s.this[c.start:]:
            last = max(last, g.index)
            acc += g.nbytes
            if acc >= c.total:
                done = True
                break
        reaches = reaches or not done
    return last, reaches
