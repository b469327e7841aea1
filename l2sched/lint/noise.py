"""The noise floor of a predicted step-time change: the A/A floors per
decode-token count M that ``l2sched fit`` must beat to choose prefetch over
no prefetch (``fit.bound`` re-exports them), and that the lint's
predicted-net-loss rule (L2S110) and the vLLM plugin's gate
(``on_predicted_loss``) must exceed to call a schedule slower: one table,
so the three agree.

Source: the out-of-sample validation run on the lent H200,
``benchmarks/results/h200-2026-12-01-validation-2.md`` ("Noise floor per M
from the A/A arm (90th percentile of |A/A gain| over resampled rounds):
M=1: 3.9 us, M=4: 17.2 us, M=16: 17.3 us, M=64: 31.1 us"); other M take the
floor of the nearest measured M in log(M).

``aa_noise_floor`` is the rule those floors were made by, for a run's own
A/A pair (the no-prefetch step captured twice, replayed in the same
rounds): the lab's validation reports and the profile's ``fill_fork``
probe use it.

Units: microseconds (us).
"""

from __future__ import annotations

import math
import random
import statistics

#: A/A noise floors (us) per decode-token count M, measured on one H200
#: (benchmarks/results/h200-2026-12-01-validation-2.md, "Noise floor per M").
AA_NOISE_FLOOR_US = {1: 3.9, 4: 17.2, 16: 17.3, 64: 31.1}
#: Where ``AA_NOISE_FLOOR_US`` comes from (quoted in the fitted header and
#: in L2S110's data).
AA_NOISE_FLOOR_SOURCE = "benchmarks/results/h200-2026-12-01-validation-2.md"


def noise_floor_us(tokens: int, floors: dict[int, float] | None = None) -> float:
    """The noise floor (us) at ``tokens`` decode tokens: ``floors`` (default
    ``AA_NOISE_FLOOR_US``) at that M, else at the measured M nearest in
    log(M) (the smaller M on a tie)."""
    table = floors or AA_NOISE_FLOOR_US
    if tokens in table:
        return table[tokens]
    best = min(table, key=lambda m: (abs(math.log(m) - math.log(tokens)), m))
    return table[best]


#: Bootstrap resamples and quantile of ``aa_noise_floor``, and its lower
#: bound (us): one CUDA-graph replay of a step is timed to ~1 us by events
#: (the rule of docs/lint.md#validation, written before the first
#: validation run).
AA_BOOTSTRAP = 400
AA_QUANTILE = 0.9
AA_MIN_FLOOR_US = 1.0


def aa_noise_floor(none_us: list[float], aa_us: list[float], seed: int = 0) -> float:
    """The noise floor (us) from the per-round step times of the two
    no-prefetch captures (``none_us[i]`` and ``aa_us[i]`` replayed in round
    ``i``): the rounds resampled with replacement (``AA_BOOTSTRAP`` samples,
    fixed ``seed``), the ``AA_QUANTILE`` quantile of |median(none) -
    median(aa)| over the resamples, never below ``AA_MIN_FLOOR_US``. Raises
    ``ValueError`` when the lists are empty or of different lengths."""
    if not none_us or len(none_us) != len(aa_us):
        raise ValueError(f"A/A needs paired rounds, got {len(none_us)} and {len(aa_us)}")
    rng = random.Random(seed)
    n = len(none_us)
    diffs = []
    for _ in range(AA_BOOTSTRAP):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(abs(statistics.median(none_us[i] for i in idx)
                         - statistics.median(aa_us[i] for i in idx)))
    diffs.sort()
    q = diffs[min(len(diffs) - 1, int(AA_QUANTILE * len(diffs)))]
    return max(AA_MIN_FLOOR_US, q)
