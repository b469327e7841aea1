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

Units: microseconds (us).
"""

from __future__ import annotations

import math

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
