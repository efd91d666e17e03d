"""Statistics against known values: hand-computed numbers, and scipy where it is installed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval.types.stats import (
    MCNEMAR_EXACT_BELOW,
    aggregate_iqm,
    aggregate_mean,
    average_probability_of_improvement,
    bootstrap_mean_ci,
    iqm,
    mcnemar,
    mcnemar_from_counts,
    paired_bootstrap_ci,
    performance_profile,
    stratified_bootstrap_ci,
    wilson_interval,
)

try:
    import scipy.stats as sps
except ImportError:  # the hand-computed values below still run
    sps = None
needs_scipy = pytest.mark.skipif(sps is None, reason="scipy not installed: only the hand-computed values are checked")


# -- Wilson ------------------------------------------------------------------------------------------

# (successes, n) -> interval; the values are those of the Wilson formula worked by hand (and equal to
# statsmodels' proportion_confint(method="wilson") and scipy's binomtest(...).proportion_ci("wilson")).
WILSON_KNOWN = {
    (8, 10): (0.4901624715366418, 0.9433178485456248),
    (0, 10): (0.0, 0.27753279986288926),
    (10, 10): (0.7224672001371109, 1.0),
    (37, 50): (0.6044684273515115, 0.8412847250644762),
    (1, 3): (0.06149194472039626, 0.7923403991979523),
}


@pytest.mark.parametrize("k, n", sorted(WILSON_KNOWN))
def test_wilson_known_values(k, n):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(WILSON_KNOWN[(k, n)][0], abs=1e-12)
    assert hi == pytest.approx(WILSON_KNOWN[(k, n)][1], abs=1e-12)


def test_wilson_by_hand_8_of_10():
    z = 1.959963984540054
    p, n = 0.8, 10
    centre = (p + z * z / 20) / (1 + z * z / 10)
    half = z * math.sqrt(p * (1 - p) / 10 + z * z / 400) / (1 + z * z / 10)
    assert wilson_interval(8, 10) == pytest.approx((centre - half, centre + half), abs=1e-15)


@needs_scipy
@pytest.mark.parametrize("k, n", [(0, 1), (3, 7), (50, 100), (999, 1000), (12, 13)])
def test_wilson_matches_scipy(k, n):
    ci = sps.binomtest(k, n).proportion_ci(method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_wilson_empty_is_nan():
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


# -- bootstrap of the mean -----------------------------------------------------------------------------

def test_bootstrap_two_values_by_hand():
    # resampled means of [0, 1] (n=2) are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: the 2.5% and 97.5%
    # percentiles are 0 and 1.
    assert bootstrap_mean_ci([0.0, 1.0], n_boot=4000) == (0.0, 1.0)


def test_bootstrap_constant_and_degenerate():
    assert bootstrap_mean_ci([3.5] * 17) == (3.5, 3.5)
    assert bootstrap_mean_ci([2.0]) == (2.0, 2.0)
    assert all(math.isnan(x) for x in bootstrap_mean_ci([]))
    assert all(math.isnan(x) for x in bootstrap_mean_ci([1.0, math.nan, 2.0]))


def test_bootstrap_is_seeded_and_sensible():
    x = np.random.default_rng(5).normal(10.0, 2.0, size=400)
    a, b = bootstrap_mean_ci(x, seed=3), bootstrap_mean_ci(x, seed=3)
    assert a == b
    assert bootstrap_mean_ci(x, seed=4) != a
    lo, hi = a
    assert lo < x.mean() < hi
    # the percentile interval's width is close to 2 * 1.96 * sd / sqrt(n)
    assert hi - lo == pytest.approx(2 * 1.96 * x.std(ddof=1) / math.sqrt(x.size), rel=0.1)


@needs_scipy
def test_bootstrap_close_to_scipy_percentile():
    x = np.random.default_rng(0).exponential(1.0, size=200)
    ours = bootstrap_mean_ci(x, n_boot=20000)
    ref = sps.bootstrap((x,), np.mean, n_resamples=20000, method="percentile", random_state=np.random.default_rng(1))
    assert ours == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=0.02)


@needs_scipy
def test_bootstrap_of_few_distinct_values_draws_counts_with_the_same_distribution():
    """Few distinct values (the lengths of short episodes) are resampled by their counts: the same bootstrap
    distribution as drawing indices (scipy's resampling here), at k draws per resample instead of n."""
    from fasteval.types import stats

    x = np.random.default_rng(2).choice([8.0, 9.0, 10.0], p=[0.3, 0.45, 0.25], size=2000)
    means = stats._boot_means(x, 20000, np.random.default_rng(0))
    assert means.shape == (20000,) and set(np.unique(means * x.size).round(6)) <= set(np.arange(8 * 2000, 10 * 2000 + 1.0))
    ours = bootstrap_mean_ci(x, n_boot=20000)
    ref = sps.bootstrap((x,), np.mean, n_resamples=20000, method="percentile", random_state=np.random.default_rng(1))
    assert ours == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=0.004)
    assert means.std() == pytest.approx(x.std() / math.sqrt(x.size), rel=0.03)  # the bootstrap's standard error
    # an infinite value keeps the index draws (0 draws of inf must not make NaN)
    with_inf = stats._boot_means(np.r_[np.zeros(99), np.inf], 200, np.random.default_rng(0))
    assert not np.isnan(with_inf).any() and set(with_inf) == {0.0, math.inf}


@pytest.mark.parametrize("kwargs", [{"n_boot": 0}, {"confidence": 1.0}, {"confidence": 0.0}])
def test_bootstrap_rejects_bad_args(kwargs):
    with pytest.raises(ValueError, match="expected"):
        bootstrap_mean_ci([1.0, 2.0], **kwargs)


# -- IQM and aggregates across tasks (rliable) ---------------------------------------------------------

def test_iqm_by_hand():
    assert iqm(range(1, 9)) == 4.5  # mean of 3, 4, 5, 6
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8, 9]) == 5.0  # int(0.25 * 9) = 2 cut at each end: mean of 3..7
    assert iqm([7.0]) == 7.0
    assert math.isnan(iqm([]))


@needs_scipy
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 10, 11, 37])
def test_iqm_matches_scipy_trim_mean(n):
    x = np.random.default_rng(n).normal(size=n)
    assert iqm(x) == pytest.approx(sps.trim_mean(x, 0.25), abs=1e-12)


def test_aggregates_follow_rliable():
    # rliable: aggregate_mean = mean over tasks of per-task means; aggregate_iqm = IQM of all scores
    per_task = [[0.0, 1.0, 2.0], [10.0, 20.0]]
    assert aggregate_mean(per_task) == pytest.approx((1.0 + 15.0) / 2)
    assert aggregate_iqm(per_task) == iqm([0.0, 1.0, 2.0, 10.0, 20.0])
    with pytest.raises(ValueError, match="non-empty"):
        aggregate_mean([[1.0], []])


def test_stratified_bootstrap_resamples_within_tasks():
    # Task A's runs all score 0 and task B's all 1: resampling runs within each task can never
    # change the mean across tasks (always 0.5). Pooled resampling would.
    assert stratified_bootstrap_ci([[0.0] * 5, [1.0] * 3]) == (0.5, 0.5)
    # with variation in one task only, the interval reflects that task's resamples alone
    lo, hi = stratified_bootstrap_ci([[0.0, 1.0], [1.0, 1.0, 1.0]], n_boot=4000)
    assert (lo, hi) == (0.5, 1.0)  # task A's mean is 0, 0.5 or 1 -> across-task mean 0.5, 0.75 or 1


def test_stratified_bootstrap_iqm_seeded():
    rng = np.random.default_rng(2)
    per_task = [rng.normal(size=5), rng.normal(size=5), rng.normal(size=5)]
    a = stratified_bootstrap_ci(per_task, aggregate_iqm, seed=1)
    assert a == stratified_bootstrap_ci(per_task, aggregate_iqm, seed=1)
    assert a[0] <= aggregate_iqm(per_task) <= a[1]


# -- rliable's performance profile and probability of improvement ------------------------------------

def test_performance_profile_by_hand():
    # rliable's score distribution: the fraction of all runs (of all tasks) scoring above each tau
    profile = performance_profile([[0.0, 0.5, 1.0], [1.0]], [0.0, 0.5, 1.0], n_boot=500)
    assert profile["tau"] == [0.0, 0.5, 1.0]
    assert profile["fraction"] == [3 / 4, 2 / 4, 0.0]
    assert all(lo <= f <= hi for lo, f, hi in zip(profile["low"], profile["fraction"], profile["high"]))
    assert profile["low"][-1] == profile["high"][-1] == 0.0  # no run is above 1, in any resample
    # as rliable computes it on a runs x tasks matrix: np.mean(scores > tau)
    rng = np.random.default_rng(3)
    scores = rng.uniform(size=(5, 4))  # 5 runs of 4 tasks
    taus = np.linspace(0, 1, 11)
    got = performance_profile(scores.T, taus, n_boot=10)["fraction"]
    assert got == pytest.approx([float(np.mean(scores > t)) for t in taus])


def test_performance_profile_resamples_within_tasks():
    # Task A's runs all score 0.2 and task B's all 0.9: resampled within each task, the fraction
    # above 0.5 is always 3 of 5 (B's runs); pooled resampling would move it.
    profile = performance_profile([[0.2, 0.2], [0.9, 0.9, 0.9]], [0.5], n_boot=400)
    assert profile["fraction"] == profile["low"] == profile["high"] == [0.6]
    seeded = performance_profile([[0.1, 0.6, 0.8], [0.3, 0.9]], [0.5], seed=4)
    assert seeded == performance_profile([[0.1, 0.6, 0.8], [0.3, 0.9]], [0.5], seed=4)
    assert seeded["low"][0] < seeded["fraction"][0] < seeded["high"][0]
    with pytest.raises(ValueError, match="non-empty"):
        performance_profile([[0.5], []], [0.5])


def test_probability_of_improvement_by_hand():
    # per task P(B > A) + P(B = A) / 2 over paired episodes, then the mean over tasks (equal weights)
    task1 = ([0.0, 1.0, 0.0], [1.0, 1.0, 0.0])  # wins 1, 1/2, 1/2: 2/3
    task2 = ([5.0, 5.0], [1.0, 9.0])  # wins 0, 1: 1/2
    result = average_probability_of_improvement([task1, task2], n_boot=500)
    assert result["value"] == pytest.approx((2 / 3 + 1 / 2) / 2)  # pooled episodes would give 3/5
    assert result["tasks"] == 2 and result["ci"][0] <= result["value"] <= result["ci"][1]
    # B better on every episode: 1, and every resample says so
    sure = average_probability_of_improvement([([0.0, 0.0], [1.0, 1.0]), ([3.0], [4.0])], n_boot=200)
    assert sure["value"] == 1.0 and sure["ci"] == [1.0, 1.0]


def test_probability_of_improvement_is_scale_free_and_antisymmetric():
    rng = np.random.default_rng(5)
    tasks = [(rng.normal(size=20), rng.normal(0.3, 1, size=20)) for _ in range(3)]
    value = average_probability_of_improvement(tasks)["value"]
    scaled = [(a * 1000.0, b * 1000.0) if i == 0 else (a, b) for i, (a, b) in enumerate(tasks)]
    assert average_probability_of_improvement(scaled)["value"] == pytest.approx(value)
    swapped = average_probability_of_improvement([(b, a) for a, b in tasks])["value"]
    assert value + swapped == pytest.approx(1.0)


def test_probability_of_improvement_rejects_and_propagates():
    with pytest.raises(ValueError, match="equal length"):
        average_probability_of_improvement([([1.0], [1.0, 2.0])])
    with pytest.raises(ValueError, match="at least one task"):
        average_probability_of_improvement([])
    nan = average_probability_of_improvement([([1.0, math.nan], [2.0, 3.0])])
    assert math.isnan(nan["value"]) and all(math.isnan(x) for x in nan["ci"])


# -- McNemar -------------------------------------------------------------------------------------------

def test_mcnemar_exact_by_hand():
    # b=2, c=8: two-sided exact binomial p = 2 * P(X <= 2 | n=10, 1/2) = 2 * (1 + 10 + 45) / 1024
    result = mcnemar_from_counts(2, 8)
    assert result["method"] == "exact binomial"
    assert result["p_value"] == 112 / 1024
    assert result["n_discordant"] == 10


def test_mcnemar_chi_square_by_hand():
    # b=30, c=12: chi2 = (|30 - 12| - 1)^2 / 42 = 289 / 42; p = erfc(sqrt(chi2 / 2)) (1 d.o.f.)
    result = mcnemar_from_counts(30, 12)
    assert result["method"] == "chi-square with continuity correction"
    assert result["statistic"] == pytest.approx(289 / 42)
    assert result["p_value"] == pytest.approx(0.008711912962379598, rel=1e-12)
    # the textbook table (b=121, c=59): corrected statistic 61^2 / 180
    assert mcnemar_from_counts(121, 59)["statistic"] == pytest.approx(3721 / 180)


@needs_scipy
@pytest.mark.parametrize("b, c", [(0, 5), (3, 9), (12, 12), (30, 12), (121, 59), (40, 41)])
def test_mcnemar_matches_scipy(b, c):
    result = mcnemar_from_counts(b, c)
    if b + c < MCNEMAR_EXACT_BELOW:
        assert result["p_value"] == pytest.approx(sps.binomtest(min(b, c), b + c, 0.5).pvalue, rel=1e-12)
    else:
        stat = max(abs(b - c) - 1, 0) ** 2 / (b + c)
        assert result["p_value"] == pytest.approx(sps.chi2.sf(stat, 1), rel=1e-9)


def test_mcnemar_from_paired_outcomes():
    # constructed table: both succeed 5, only A 7, only B 2, neither 6
    a = [1] * 5 + [1] * 7 + [0] * 2 + [0] * 6
    b = [1] * 5 + [0] * 7 + [1] * 2 + [0] * 6
    result = mcnemar(a, b)
    assert (result["only_a"], result["only_b"], result["n_pairs"]) == (7, 2, 20)
    assert result["p_value"] == pytest.approx(2 * (1 + 9 + 36) / 512)
    assert mcnemar([1, 0], [1, 0])["p_value"] == 1.0  # no discordant pairs
    forced = mcnemar(a, b, exact=False)
    assert forced["method"] == "chi-square with continuity correction"
    assert forced["statistic"] == pytest.approx(16 / 9)
    with pytest.raises(ValueError, match="equal length"):
        mcnemar([1, 0], [1])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_symmetric_and_a_probability(b, c):
    one, two = mcnemar_from_counts(b, c), mcnemar_from_counts(c, b)
    assert one["p_value"] == two["p_value"]
    assert 0.0 <= one["p_value"] <= 1.0


# -- paired bootstrap ----------------------------------------------------------------------------------

def test_paired_bootstrap_constant_difference():
    a = np.random.default_rng(0).normal(size=50)
    result = paired_bootstrap_ci(a + 1.0, a)
    assert result["mean_diff"] == pytest.approx(1.0)
    assert result["ci"] == pytest.approx([1.0, 1.0])
    assert result["n_pairs"] == 50


def test_paired_bootstrap_keeps_pairs_together():
    # large shared noise, small constant shift: the paired interval is tight and excludes 0
    rng = np.random.default_rng(1)
    base = rng.normal(0, 100, size=200)
    shift = 0.5 + rng.normal(0, 0.1, size=200)
    lo, hi = paired_bootstrap_ci(base + shift, base)["ci"]
    assert 0.4 < lo < 0.5 < hi < 0.6
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap_ci([1.0], [1.0, 2.0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=40))
def test_wilson_contains_the_estimate(outcomes):
    k, n = sum(outcomes), len(outcomes)
    lo, hi = wilson_interval(k, n)
    # 1e-15 slack: at k = 0 the lower bound is centre - half in floating point, which can come out
    # a few ulps above 0 (e.g. 5.6e-17 for n = 3); likewise at k = n for the upper bound.
    assert 0.0 <= lo <= k / n + 1e-15 and k / n - 1e-15 <= hi <= 1.0
