"""``l2sched verify``: measure a schedule's gain inside vLLM's own offline
engine, with the run-time switch (``l2sched.vllm.switch``) flipping prefetch
on and off in ONE engine, so both arms share the weights, the CUDA graphs,
the KV cache and the GPU clocks.

Per batch size M and per round, three arms run in a rotated order: ``on``,
``off`` and ``off2`` (a second ``off``: the A/A pair that measures the
noise). Two timings of an arm:

* ``replay`` (the default, ``measure_replays``): back-to-back replays of the
  engine's captured FULL decode CUDA graph of size M between CUDA events, in
  every worker (``vllm.replay``): the GPU's decode step, without the host's
  scheduling and sampling between steps. Token ids are checked by one greedy
  ``generate`` per arm.
* ``generate`` (``measure``): two greedy ``generate`` calls of the same M
  prompts, ``output_len`` and ``output_len // 4`` new tokens
  (``ignore_eos``); the step is their time difference over their token
  difference (us per step), which cancels the prefill and the engine's
  per-call cost (as ``benchmarks/vllm_gpu.py`` does across engines). It
  includes the host's share of a step, and its noise (the host's jitter
  divided by the token difference) was 26-451 us on the H200 at
  ``--output-len 256`` (benchmarks/results/h200-2026-12-03-verify/).

Per M: the median step of each arm with p10/p90 over rounds; the gain
``off - on`` per round (positive: prefetch faster) with its median and
p10/p90; the noise, the largest ``|off - off2|`` of the A/A pairs'
p10/p90; the verdict ``faster`` / ``slower`` when the median gain is beyond
the noise, else ``same``; the lint's predicted gain beside it; token ids of
the three arms compared.

The engine is started by the caller (``cli.verify``) with
``worker_extension_cls = switch.WORKER_EXTENSION``; this module imports
neither vLLM nor torch (it drives an ``Engine`` protocol: ``generate``,
``switch`` and ``replay_ab``), so its statistics and report run on a CPU.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from l2sched.files import write_texts_atomically

#: The arms of one round: prefetch on, off, and off again (the A/A pair).
ARMS = ("on", "off", "off2")
#: Verdicts, by the median gain against the A/A noise.
VERDICTS = ("faster", "same", "slower")


class Engine(Protocol):
    """What ``measure`` needs of a running engine."""

    def generate(self, batch: int, max_tokens: int) -> tuple[float, list]:
        """Greedy decode of ``batch`` fixed prompts for ``max_tokens`` new
        tokens each: ``(seconds, token ids per prompt)``."""

    def switch(self, on: bool) -> None:
        """Turn prefetch on or off in every worker (raises when a worker
        has no installed schedule)."""


@dataclass
class BatchResult:
    """One batch size: per arm the step times (us) of each round, the
    per-round gains ``off - on`` and A/A differences ``off - off2`` (us),
    whether ``on`` and ``off`` produced the same token ids, and the lint's
    predicted gain (us; None when not available)."""

    batch: int
    steps_us: dict = field(default_factory=lambda: {a: [] for a in ARMS})
    gains_us: list = field(default_factory=list)
    aa_us: list = field(default_factory=list)
    tokens_equal: bool = True
    predicted_gain_us: float | None = None

    def summary(self) -> dict:
        """Medians and p10/p90 (us), the noise, the verdict."""
        out = {"batch": self.batch, "rounds": len(self.gains_us),
               "tokens_equal": self.tokens_equal,
               "predicted_gain_us": self.predicted_gain_us}
        for arm, xs in self.steps_us.items():
            out[f"{arm}_us"] = spread(xs)
        out["gain_us"] = spread(self.gains_us)
        out["aa_us"] = spread(self.aa_us)
        out["noise_us"] = noise_us(self.aa_us)
        out["verdict"] = verdict(out["gain_us"]["median"], out["noise_us"])
        return out


def spread(xs: Sequence[float]) -> dict:
    """``{median, p10, p90}`` of ``xs`` (us; None for an empty list). p10 and
    p90 by ``statistics.quantiles`` (inclusive method: they stay within the
    values; the min and max below three values)."""
    xs = sorted(float(x) for x in xs)
    if not xs:
        return {"median": None, "p10": None, "p90": None}
    if len(xs) < 3:
        lo, hi = xs[0], xs[-1]
    else:
        q = statistics.quantiles(xs, n=10, method="inclusive")
        lo, hi = q[0], q[-1]
    return {"median": round(statistics.median(xs), 3), "p10": round(lo, 3),
            "p90": round(hi, 3)}


def noise_us(aa: Sequence[float]) -> float | None:
    """The A/A noise (us): the larger of ``|p10|`` and ``|p90|`` of the
    ``off - off2`` differences (None without any)."""
    s = spread(aa)
    if s["median"] is None:
        return None
    return round(max(abs(s["p10"]), abs(s["p90"])), 3)


def verdict(gain_us: float | None, noise: float | None) -> str:
    """``faster`` when the median gain (us, positive = prefetch faster) is
    above the A/A noise, ``slower`` when below minus the noise, else
    ``same`` (also without data)."""
    if gain_us is None or noise is None:
        return "same"
    if gain_us > noise:
        return "faster"
    if gain_us < -noise:
        return "slower"
    return "same"


def step_us(t_long: float, t_short: float, long_tokens: int, short_tokens: int) -> float:
    """Decode step time (us) from two generate calls of ``long_tokens`` and
    ``short_tokens`` new tokens taking ``t_long`` and ``t_short`` seconds.
    Raises ``ValueError`` when the token counts are equal."""
    if long_tokens == short_tokens:
        raise ValueError("the two generate calls need different token counts")
    return (t_long - t_short) / (long_tokens - short_tokens) * 1e6


def rotation(r: int) -> tuple[str, ...]:
    """The arms of round ``r`` (0-based): ``ARMS`` rotated by ``r`` so that
    every arm leads one round in three."""
    return ARMS[r % 3:] + ARMS[:r % 3]


def from_rounds(batch: int, steps_us: dict) -> BatchResult:
    """A ``BatchResult`` of ``batch`` from per-arm step times (us, one value
    per timed round, rounds aligned across arms): the per-round gains
    ``off - on`` and A/A differences ``off - off2``. Raises ``ValueError``
    when an arm is missing or the arms have different round counts."""
    if set(steps_us) != set(ARMS) or len({len(steps_us[a]) for a in ARMS}) != 1:
        raise ValueError(f"batch {batch}: need {', '.join(ARMS)} with one value per "
                         "round each")
    res = BatchResult(batch)
    for arm in ARMS:
        res.steps_us[arm] = [round(float(x), 3) for x in steps_us[arm]]
    res.gains_us = [round(off - on, 3) for on, off in
                    zip(res.steps_us["on"], res.steps_us["off"])]
    res.aa_us = [round(off - off2, 3) for off, off2 in
                 zip(res.steps_us["off"], res.steps_us["off2"])]
    return res


def measure(engine: Engine, batches: Sequence[int], *, output_len: int, rounds: int,
            warmup: int = 1, on_progress: Callable[[str], None] | None = None
            ) -> list[BatchResult]:
    """The interleaved A/B/A' of every batch size (module docstring):
    ``warmup`` untimed rounds, then ``rounds`` timed ones, the arm order
    rotated every round. ``output_len``: new tokens of the long call (the
    short one makes ``max(1, output_len // 4)``). Raises ``ValueError`` for
    ``output_len < 2`` or ``rounds < 1``."""
    if output_len < 2 or rounds < 1:
        raise ValueError("output_len must be >= 2 and rounds >= 1")
    short = max(1, output_len // 4)
    results = []
    for batch in batches:
        steps: dict = {arm: [] for arm in ARMS}
        first_tokens: dict = {}
        for r in range(warmup + rounds):
            got = {}
            for arm in rotation(r):
                if on_progress:
                    what = "warm-up" if r < warmup else f"round {r - warmup + 1}/{rounds}"
                    on_progress(f"batch {batch}: {what}: prefetch {arm}")
                engine.switch(arm == "on")
                t_long, toks = engine.generate(batch, output_len)
                t_short, _ = engine.generate(batch, short)
                got[arm] = step_us(t_long, t_short, output_len, short)
                first_tokens.setdefault(arm, toks)
            if r >= warmup:
                for arm in ARMS:
                    steps[arm].append(got[arm])
        res = from_rounds(batch, steps)
        res.tokens_equal = first_tokens["on"] == first_tokens["off"] == first_tokens["off2"]
        results.append(res)
    return results


class ReplayEngine(Engine, Protocol):
    """An ``Engine`` whose workers also time their captured decode graphs
    (``replay.replay_ab`` through the worker extension)."""

    def replay_ab(self, batch: int, rounds: int, warmup: int, replays: int) -> dict:
        """``{arm: [us per replay, one per round]}`` of ``batch``, the
        slowest rank's (``replay.worst_of_ranks``)."""

    def missing_graphs(self, batches: list[int]) -> str:
        """"" when every worker can replay a decode graph of every batch
        size, else one line saying which cannot."""


def measure_replays(engine: ReplayEngine, batches: Sequence[int], *, output_len: int,
                    rounds: int, warmup: int = 1, replays: int = 10,
                    on_progress: Callable[[str], None] | None = None
                    ) -> list[BatchResult]:
    """``verify --timing replay``: per batch size, the token check (one
    greedy ``generate`` of ``output_len`` new tokens per arm, prefetch on,
    off, off again) and the step time of each arm from back-to-back replays
    of the captured FULL decode graph (``replay.replay_ab``: the same
    rotation, ``warmup`` untimed rounds, ``rounds`` timed ones of
    ``replays`` replays each). Raises ``ValueError`` for ``rounds < 1``,
    ``replays < 1`` or ``output_len < 1``; the engine's errors propagate
    (``replay.ReplayUnavailable`` for a size without a FULL graph)."""
    if rounds < 1 or replays < 1 or output_len < 1:
        raise ValueError("rounds, replays and output_len must be >= 1")
    results = []
    for batch in batches:
        tokens = {}
        for arm in ARMS:
            if on_progress:
                on_progress(f"batch {batch}: token check: prefetch {arm}")
            engine.switch(arm == "on")
            tokens[arm] = engine.generate(batch, output_len)[1]
        if on_progress:
            on_progress(f"batch {batch}: {warmup} + {rounds} rounds of {replays} graph "
                        "replays per arm")
        res = from_rounds(batch, engine.replay_ab(batch, rounds, warmup, replays))
        res.tokens_equal = tokens["on"] == tokens["off"] == tokens["off2"]
        results.append(res)
    return results


@dataclass
class Report:
    """Everything ``l2sched verify`` writes: the command, the engine's
    settings, what each worker installed, the per-batch summaries."""

    command: str
    settings: dict
    installed: list
    batches: list
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def to_json(self) -> str:
        """The JSON document (indent 1)."""
        return json.dumps(asdict(self), indent=1)


def _us(x) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


def _arm(s: dict) -> str:
    return f"{_us(s['median'])} ({_us(s['p10'])}..{_us(s['p90'])})"


def render_markdown(rep: Report) -> str:
    """The markdown report: settings, installations, one row per batch
    size (step on/off in us with p10..p90, gain, A/A noise, the lint's
    predicted gain, verdict, token ids equal)."""
    lines = ["# l2sched verify", "", f"`{rep.command}`", "",
             f"Started {rep.started}. " + ", ".join(
                 f"{k} {v}" for k, v in rep.settings.items()), ""]
    for w in rep.installed:
        lines.append(f"- worker: {w}")
    lines += ["", "Decode step (us per step, median and p10..p90 over rounds); gain = "
              "off - on (positive: prefetch faster); noise = the A/A pair's "
              "|off - off2| (p10/p90); verdict by the median gain against the noise.",
              "", "| M | on | off | gain | A/A noise | predicted gain | verdict | "
              "tokens equal |", "|---|---|---|---|---|---|---|---|"]
    for b in rep.batches:
        lines.append(
            f"| {b['batch']} | {_arm(b['on_us'])} | {_arm(b['off_us'])} | "
            f"{_arm(b['gain_us'])} | {_us(b['noise_us'])} | "
            f"{_us(b['predicted_gain_us'])} | {b['verdict']} | "
            f"{'yes' if b['tokens_equal'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def write_report(rep: Report, json_path: Path) -> Path:
    """Write ``json_path`` and the markdown beside it (``.md``): both or
    neither (``files.write_texts_atomically``); returns the markdown path."""
    md = json_path.with_suffix(".md")
    write_texts_atomically([(str(json_path), rep.to_json() + "\n"),
                            (str(md), render_markdown(rep))])
    return md
