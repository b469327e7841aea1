"""Interpolation of a device profile's measured points: op times over
token counts (linear in log(tokens), ``OpTimes.at``) and a fill's landed
fraction over its size (linear in MB, ``FillMode.effect_at``). Values are
held flat outside the measured points."""

from __future__ import annotations

import math


def log_interp(m: tuple[int, ...], series: tuple, tokens: int) -> tuple[float, ...]:
    """Each of ``series`` (tuples aligned with ``m``, token counts
    increasing) at ``tokens``: linear in log(tokens) between the points of
    ``m``, held flat outside them. Units are those of ``series``."""
    if tokens <= m[0]:
        return tuple(s[0] for s in series)
    for i in range(1, len(m)):
        if tokens <= m[i]:
            t = (math.log(tokens) - math.log(m[i - 1])) / (math.log(m[i]) - math.log(m[i - 1]))
            return tuple(s[i - 1] + t * (s[i] - s[i - 1]) for s in series)
    return tuple(s[-1] for s in series)


def linear_points(pts: tuple[tuple[float, float], ...], x: float) -> float:
    """``y`` at ``x`` of the ``(x, y)`` points ``pts`` (x increasing, at least
    one point): linear between them, held flat outside them."""
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]
