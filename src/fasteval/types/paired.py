"""Paired tests for two policies on the same episodes, beside those of :mod:`fasteval.types.stats`
(McNemar's test and the paired bootstrap live there and are reused, not copied):

* :func:`signed_rank`: Wilcoxon's signed-rank test of the paired differences (scipy's
  ``wilcoxon`` defaults: zeros dropped, no continuity correction, two-sided);
* :func:`holm`: Holm's step-down adjustment of p-values across tasks;
* :func:`prob_improvement`: P(B > A) + P(B = A) / 2 over paired episodes, with a bootstrap interval;
* :func:`paired_t`: the paired t-test and t-interval of the **mean** difference B - A: the test a verdict on a
  mean difference rests on (the signed-rank test and P(B > A) answer another question, which policy usually
  wins, and stay beside it as secondary statistics).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fasteval.types.stats import DEFAULT_N_BOOT, bootstrap_mean_ci

SIGNED_RANK_EXACT_MAX = 400
"""Nonzero differences up to this count, without ties, use the exact null distribution; beyond
it (or with ties) the normal approximation with the tie-corrected variance is used."""


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """Ranks 1..n of ``values`` (ties get their average rank) and whether any tie occurred."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_vals[1:] != sorted_vals[:-1]]))
    ends = np.concatenate([starts[1:], [values.size]])
    ranks = np.empty(values.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks, bool((ends - starts > 1).any())


def _tie_sizes(values: np.ndarray) -> np.ndarray:
    _, counts = np.unique(values, return_counts=True)
    return counts.astype(np.float64)


def signed_rank_null_pmf(n: int) -> np.ndarray:
    """P(W+ = w), w = 0..n(n+1)/2, for n nonzero differences without ties under the null
    (each sign + or - with probability 1/2): the coefficients of prod_i (1 + x^i) / 2^n."""
    pmf = np.zeros(n * (n + 1) // 2 + 1)
    pmf[0] = 1.0
    top = 0
    for i in range(1, n + 1):
        shifted = np.zeros_like(pmf)
        shifted[i:top + i + 1] = pmf[:top + 1]
        pmf = (pmf + shifted) / 2.0
        top += i
    return pmf


def signed_rank(a: Any, b: Any) -> dict[str, Any]:
    """Wilcoxon's signed-rank test of ``b - a`` (paired). ``statistic`` is min(W+, W-), as scipy's.

    No nonzero difference gives ``p_value = 1`` (nothing to tell apart).
    """
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"signed_rank: expected paired values of equal length, got {x.size} and {y.size}.")
    d = y - x
    if np.isnan(d).any():
        return {"statistic": math.nan, "p_value": math.nan, "n_nonzero": int(np.count_nonzero(d)), "method": "NaN input"}
    d = d[d != 0]
    n = d.size
    if n == 0:
        return {"statistic": 0.0, "p_value": 1.0, "n_nonzero": 0, "method": "no nonzero differences"}
    ranks, ties = _average_ranks(np.abs(d))
    r_plus = float(ranks[d > 0].sum())
    r_minus = float(ranks[d < 0].sum())
    if not ties and n <= SIGNED_RANK_EXACT_MAX:
        pmf = signed_rank_null_pmf(n)
        w = int(round(r_plus))
        p = min(1.0, 2.0 * min(pmf[: w + 1].sum(), pmf[w:].sum()))
        method = "exact"
    else:
        mean = n * (n + 1) / 4.0
        var = n * (n + 1) * (2 * n + 1) / 24.0 - float(((t := _tie_sizes(np.abs(d))) ** 3 - t).sum()) / 48.0
        z = (r_plus - mean) / math.sqrt(var) if var > 0 else 0.0
        p = math.erfc(abs(z) / math.sqrt(2.0))
        method = "normal approximation (tie-corrected)"
    return {"statistic": min(r_plus, r_minus), "p_value": p, "n_nonzero": n, "method": method}


def holm(p_values: Any) -> np.ndarray:
    """Holm's adjusted p-values (same order as given): for the i-th smallest of m,
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``. NaN p-values stay NaN and do not count in m."""
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="mergesort")]
    m = ok.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def prob_improvement(a: Any, b: Any, confidence: float = 0.95, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> dict[str, Any]:
    """P(B > A) + P(B = A) / 2 over the paired episodes, and its percentile bootstrap interval."""
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"prob_improvement: expected paired values of equal length, got {x.size} and {y.size}.")
    wins = (y > x).astype(np.float64) + 0.5 * (y == x)
    if np.isnan(x).any() or np.isnan(y).any():
        return {"value": math.nan, "ci": [math.nan, math.nan]}
    lo, hi = bootstrap_mean_ci(wins, confidence=confidence, n_boot=n_boot, seed=seed)
    return {"value": float(wins.mean()) if wins.size else math.nan, "ci": [lo, hi]}


PAIRED_T = "paired t-test of the mean difference B - A (two-sided), with its t-interval"


def paired_t(a: Any, b: Any, confidence: float = 0.95) -> dict[str, Any]:
    """The paired t-test of the mean of ``b - a`` against 0, and its two-sided t-interval at ``confidence``.

    Fewer than two pairs or a NaN: ``p_value`` and the interval are NaN. All differences equal (sd 0): the
    interval is that difference, and ``p_value`` is 1 when it is 0, else 0."""
    from fasteval.types.distributions import betainc, student_t_ppf

    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired_t: expected paired values of equal length, got {x.size} and {y.size}.")
    d = y - x
    n = d.size
    out = {"mean_diff": float(d.mean()) if n else math.nan, "ci": [math.nan, math.nan], "p_value": math.nan,
           "statistic": math.nan, "df": max(n - 1, 0), "n_pairs": int(n), "method": PAIRED_T}
    if n < 2 or np.isnan(d).any():
        return out
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        out.update(ci=[mean, mean], p_value=1.0 if mean == 0.0 else 0.0,
                   statistic=0.0 if mean == 0.0 else math.copysign(math.inf, mean))
        return out
    se = sd / math.sqrt(n)
    half = student_t_ppf(0.5 + confidence / 2.0, n - 1) * se
    t = mean / se
    nu = n - 1.0
    p = betainc(nu / 2.0, 0.5, nu / (nu + t * t))  # two-sided: P(|T| >= |t|) = I_{nu/(nu+t^2)}(nu/2, 1/2)
    out.update(ci=[mean - half, mean + half], p_value=float(min(1.0, max(0.0, p))), statistic=t)
    return out
