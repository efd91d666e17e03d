"""Small statistics helpers used in every report."""

from __future__ import annotations

import math


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion, as fractions in [0, 1].

    ``n == 0`` gives ``(nan, nan)``. ``z`` defaults to the two-sided 95% quantile.
    """
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
