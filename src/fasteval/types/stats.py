"""Statistics helpers used in every report.

* :func:`wilson_interval`: a binomial proportion's Wilson score interval (success rates).
* :func:`bootstrap_mean_ci`: percentile bootstrap interval of a mean (returns).
* :func:`iqm`, :func:`aggregate_mean`, :func:`aggregate_iqm`, :func:`stratified_bootstrap_ci`:
  aggregates across tasks with rliable's stratified bootstrap (runs resampled within each task).
* :func:`performance_profile`: rliable's score distribution (the fraction of runs scoring above
  each threshold), with a stratified bootstrap band.
* :func:`average_probability_of_improvement`: rliable's average probability of improvement,
  here over paired episodes within each task, with a stratified bootstrap interval.
* :func:`mcnemar`, :func:`paired_bootstrap_ci`: two policies compared on the same episodes.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


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
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no rounding crumbs
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


# -- bootstrap intervals ------------------------------------------------------------------------
# All resampling uses a seeded ``numpy.random.Generator`` (default seed 0), so a report built twice
# from the same store shows the same intervals. Intervals use the percentile method: the
# ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the bootstrap statistics
# (NumPy's default linear interpolation). NaN inputs are not dropped: a NaN value gives NaN bounds,
# as a NaN return makes the mean NaN everywhere else in fasteval.

DEFAULT_N_BOOT = 2000
_CHUNK_ELEMENTS = 4_000_000  # resample indices drawn per chunk, to bound memory


def _percentile_interval(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    if np.isnan(stats).any():
        return (math.nan, math.nan)
    alpha = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(stats, [alpha, 100.0 - alpha])
    return (float(lo), float(hi))


def _check_boot_args(n_boot: int, confidence: float) -> None:
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot: expected an integer >= 1, got {n_boot!r}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a number in (0, 1), e.g. 0.95, got {confidence!r}.")


_FEW_DISTINCT = 16
"""Resample by value counts when the values have at most ``n / _FEW_DISTINCT`` distinct values."""


def _boot_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` means of resamples (with replacement, same size) of the 1-D ``values``.

    A resample's mean depends only on how many times it draws each distinct value, and those counts
    are multinomial (``n`` draws over the distinct values, with their frequencies). So values with few
    distinct entries (``k <= n / 16``: success flags, the lengths of short episodes, discrete returns)
    are resampled as ``k`` counts per resample (``Generator.multinomial``), not ``n`` indices: the same
    bootstrap distribution at ``O(n_boot * k)`` draws instead of ``O(n_boot * n)`` (a 2,000-episode
    CartPole run's interval went from about 0.2 s to a few ms). Other values draw indices, in chunks.
    """
    n = values.shape[0]
    distinct, counts = np.unique(values, return_counts=True)
    if distinct.size * _FEW_DISTINCT <= n and np.isfinite(distinct).all():  # (0 draws of inf would be NaN)
        draws = rng.multinomial(n, counts / n, size=n_boot)  # [n_boot, k]: how often each value is drawn
        return (draws @ distinct) / n
    out = np.empty(n_boot, dtype=np.float64)
    step = max(1, _CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = values[idx].mean(axis=1)
    return out


def bootstrap_mean_ci(
    values: Any, confidence: float = 0.95, n_boot: int = DEFAULT_N_BOOT, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (1-D).

    Empty input gives ``(nan, nan)``; any NaN value gives ``(nan, nan)``.
    """
    _check_boot_args(n_boot, confidence)
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0 or np.isnan(x).any():
        return (math.nan, math.nan)
    return _percentile_interval(_boot_means(x, n_boot, np.random.default_rng(seed)), confidence)


BOOTSTRAP_UP_TO = 5000
"""Mean returns get a percentile bootstrap 95% interval (2000 resamples, seed 0) up to this many episodes, and the
normal approximation (mean ± 1.96 standard errors) above, where the two agree and the bootstrap would cost seconds."""


def mean_interval(values: Any) -> tuple[float, float, str]:
    """``(low, high, method)``: a 95% interval of the mean of ``values`` (``method``: ``bootstrap`` or ``normal``,
    see :data:`BOOTSTRAP_UP_TO`). Empty or NaN input: NaN bounds."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size <= BOOTSTRAP_UP_TO:
        lo, hi = bootstrap_mean_ci(x)
        return lo, hi, "bootstrap"
    if np.isnan(x).any():
        return math.nan, math.nan, "normal"
    half = 1.959963984540054 * float(x.std(ddof=1)) / math.sqrt(x.size)
    m = float(x.mean())
    return m - half, m + half, "normal"


# -- aggregates across tasks (rliable's definitions) --------------------------------------------
# ``per_task`` is a sequence with one 1-D array per task, holding that task's per-run scores (a
# "run" is one independent evaluation of the policy on the task, e.g. one seed block). Tasks may
# have different numbers of runs. With equal counts this is rliable's ``scores[:, task]``.


def iqm(values: Any) -> float:
    """Interquartile mean: the mean of the middle 50% (``scipy.stats.trim_mean(x, 0.25)``).

    ``int(0.25 * n)`` values are cut from each end of the sorted values. Empty input gives NaN.
    """
    x = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    n = x.size
    if n == 0 or np.isnan(x).any():
        return math.nan
    cut = int(0.25 * n)
    return float(x[cut:n - cut].mean())


def _as_tasks(per_task: Any) -> list[np.ndarray]:
    tasks = [np.asarray(t, dtype=np.float64).reshape(-1) for t in per_task]
    if not tasks or any(t.size == 0 for t in tasks):
        raise ValueError("per_task: expected one non-empty sequence of run scores per task, got an empty task list or task.")
    return tasks


def aggregate_mean(per_task: Any) -> float:
    """Mean across tasks of each task's mean run score (rliable's ``aggregate_mean``)."""
    return float(np.mean([t.mean() for t in _as_tasks(per_task)]))


def aggregate_iqm(per_task: Any) -> float:
    """IQM of all run scores of all tasks together (rliable's ``aggregate_iqm``)."""
    return iqm(np.concatenate(_as_tasks(per_task)))


def stratified_bootstrap_ci(
    per_task: Any,
    statistic: Callable[[list[np.ndarray]], float] = aggregate_mean,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float, float]:
    """Stratified percentile bootstrap interval of ``statistic(per_task)`` (rliable's method).

    Each replicate resamples the runs *within* every task, with replacement and keeping each
    task's run count, then applies ``statistic`` (``aggregate_mean`` or ``aggregate_iqm``) to the
    resampled tasks. Tasks are never resampled, and scores never move between tasks.
    """
    _check_boot_args(n_boot, confidence)
    tasks = _as_tasks(per_task)
    if any(np.isnan(t).any() for t in tasks):
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot, dtype=np.float64)
    for b in range(n_boot):
        stats[b] = statistic([t[rng.integers(0, t.size, size=t.size)] for t in tasks])
    return _percentile_interval(stats, confidence)


def performance_profile(
    per_task: Any, taus: Any, confidence: float = 0.95, n_boot: int = DEFAULT_N_BOOT, seed: int = 0
) -> dict[str, list[float]]:
    """rliable's performance profile (its "score distribution", ``run_score_deviation``): for each
    threshold ``tau``, the fraction of all runs of all tasks whose score is above ``tau``, each task
    weighted by its run count (as rliable's ``np.mean(scores > tau)`` over a runs x tasks matrix).

    The band is rliable's stratified percentile bootstrap: runs resampled within each task, tasks
    kept. Returns ``{"tau", "fraction", "low", "high"}`` (lists, one entry per threshold). Valid
    only where the scores of different tasks share one scale (success rates in [0, 1] do; raw
    returns of different envs do not).
    """
    _check_boot_args(n_boot, confidence)
    tasks = _as_tasks(per_task)
    t = np.asarray(taus, dtype=np.float64).reshape(-1)
    runs = np.concatenate(tasks)
    fraction = (runs[:, None] > t[None, :]).mean(axis=0)
    rng = np.random.default_rng(seed)
    above = np.zeros((n_boot, t.size), dtype=np.float64)
    for scores in tasks:  # the resampled runs of this task, counted above each threshold
        idx = rng.integers(0, scores.size, size=(n_boot, scores.size))
        above += (scores[idx][:, :, None] > t[None, None, :]).sum(axis=1)
    above /= runs.size
    alpha = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(above, [alpha, 100.0 - alpha], axis=0)
    return {"tau": t.tolist(), "fraction": fraction.tolist(), "low": lo.tolist(), "high": hi.tolist()}


def average_probability_of_improvement(
    pairs_per_task: Any, confidence: float = 0.95, n_boot: int = DEFAULT_N_BOOT, seed: int = 0
) -> dict[str, Any]:
    """rliable's average probability of improvement of B over A, over paired episodes: in each task,
    ``P(B > A) + P(B = A) / 2`` over the episodes both ran with the same seed, then the mean over
    tasks (each task weighs the same, whatever its episode count).

    ``pairs_per_task``: one ``(a_scores, b_scores)`` pair of equal-length 1-D arrays per task.
    rliable compares runs (seeds) with a Mann-Whitney statistic; paired episodes are what a sweep
    holds (the same seeds for every policy), and per task the value is scale-free, so tasks on
    different scales (returns of different envs) can be averaged. The interval is a stratified
    percentile bootstrap: pairs resampled within each task. Returns ``{"value", "ci", "tasks"}``;
    a NaN score gives NaN.
    """
    _check_boot_args(n_boot, confidence)
    wins = []
    for a, b in pairs_per_task:
        x = np.asarray(a, dtype=np.float64).reshape(-1)
        y = np.asarray(b, dtype=np.float64).reshape(-1)
        if x.shape != y.shape or x.size == 0:
            raise ValueError(f"average_probability_of_improvement: expected non-empty paired scores of equal length "
                             f"per task, got {x.size} and {y.size}.")
        if np.isnan(x).any() or np.isnan(y).any():
            return {"value": math.nan, "ci": [math.nan, math.nan], "tasks": len(pairs_per_task)}
        wins.append((y > x).astype(np.float64) + 0.5 * (y == x))
    if not wins:
        raise ValueError("average_probability_of_improvement: expected at least one task.")
    value = float(np.mean([w.mean() for w in wins]))
    rng = np.random.default_rng(seed)
    boots = np.mean([_boot_means(w, n_boot, rng) for w in wins], axis=0)
    lo, hi = _percentile_interval(boots, confidence)
    return {"value": value, "ci": [lo, hi], "tasks": len(wins)}


# -- paired comparisons of two policies on the same episodes ------------------------------------

MCNEMAR_EXACT_BELOW = 25
"""Discordant pairs below this count use the exact binomial test (statsmodels' advice); others
use the chi-square statistic with continuity correction."""


def _binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), in exact integer arithmetic."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def mcnemar(a_success: Any, b_success: Any, exact: bool | None = None) -> dict[str, Any]:
    """McNemar's test for two policies' successes on the same episodes (paired booleans).

    ``b`` = episodes only A succeeded on, ``c`` = only B. With ``exact=None`` the exact two-sided
    binomial test is used when ``b + c < MCNEMAR_EXACT_BELOW``, else the chi-square statistic with
    continuity correction ``max(|b - c| - 1, 0)^2 / (b + c)`` on 1 degree of freedom. ``method`` in the
    result says which was used. No discordant pairs gives ``p_value = 1``.
    """
    a = np.asarray(a_success, dtype=bool).reshape(-1)
    b_ = np.asarray(b_success, dtype=bool).reshape(-1)
    if a.shape != b_.shape:
        raise ValueError(f"mcnemar: expected paired outcomes of equal length, got {a.size} and {b_.size}.")
    only_a = int(np.sum(a & ~b_))
    only_b = int(np.sum(~a & b_))
    return mcnemar_from_counts(only_a, only_b, exact=exact, n_pairs=int(a.size))


def mcnemar_from_counts(b: int, c: int, exact: bool | None = None, n_pairs: int | None = None) -> dict[str, Any]:
    """McNemar's test from the discordant counts ``b`` (only A succeeded) and ``c`` (only B)."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar: expected discordant counts >= 0, got b={b}, c={c}.")
    n = b + c
    use_exact = n < MCNEMAR_EXACT_BELOW if exact is None else bool(exact)
    if use_exact:
        statistic = float(min(b, c))
        p = 1.0 if n == 0 else min(1.0, 2.0 * _binom_cdf_half(min(b, c), n))
        method = "exact binomial"
    else:
        # clamped at 0 when b == c (statsmodels gives 1/n there), so equal counts give p = 1
        statistic = max(abs(b - c) - 1.0, 0.0) ** 2 / n
        p = math.erfc(math.sqrt(statistic / 2.0))  # chi-square survival function, 1 d.o.f.
        method = "chi-square with continuity correction"
    return {
        "only_a": b, "only_b": c, "n_discordant": n, "n_pairs": n_pairs,
        "statistic": statistic, "p_value": p, "method": method,
    }


def paired_bootstrap_ci(
    a: Any, b: Any, confidence: float = 0.95, n_boot: int = DEFAULT_N_BOOT, seed: int = 0
) -> dict[str, Any]:
    """Paired bootstrap of the mean difference ``a - b`` over matched episodes.

    Episodes (pairs) are resampled, so each replicate keeps both policies' numbers of an episode
    together. Returns ``mean_diff``, ``ci`` (percentile method) and ``n_pairs``.
    """
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired_bootstrap_ci: expected paired values of equal length, got {x.size} and {y.size}.")
    d = x - y
    mean = float(d.mean()) if d.size else math.nan
    lo, hi = bootstrap_mean_ci(d, confidence=confidence, n_boot=n_boot, seed=seed)
    return {"mean_diff": mean, "ci": [lo, hi], "n_pairs": int(d.size)}
