"""The anytime-valid statistics of fasteval.types.sequential.

* the betting confidence sequence against an independent scalar implementation written from
  Waudby-Smith & Ramdas's formulas (one candidate mean at a time, plain Python floats);
* bit-identical results whatever the chunking (what batch invariance rests on);
* coverage under continuous monitoring in a small simulation (the 10,000-run figures are in
  benchmarks/bench_sequential.py), next to Wilson's interval on the same runs, which fails it;
* the paired e-process: batch form equals the streaming one, type-I error under the null;
* the rules, the monitor and the prefix gate (any arrival order gives the same k).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fasteval.types.sequential import (
    BettingCS, PairedEProcess, PrefixGate, StopMonitor, betting_cs, log_capital, parse_return_bounds, parse_stop_rule,
)
from fasteval.types.sequential.eprocess import BETS, discordant_outcomes, mapped_differences, paired_log_wealth


# -- an independent implementation of the hedged betting confidence sequence ---------------------
def reference_bounds(x: list[float], alpha: float, grid: int) -> tuple[list[float], list[float]]:
    """Scalar loops over time and over candidate means, straight from the paper's definitions."""
    n = len(x)
    lams = []
    total, sq = 0.0, 0.0
    var_prev = 0.25
    for t in range(1, n + 1):
        lams.append(math.sqrt(2 * math.log(2 / alpha) / (var_prev * t * math.log(1 + t))))
        total += x[t - 1]
        mu_t = (0.5 + total) / (t + 1)
        sq += (x[t - 1] - mu_t) ** 2
        var_prev = (0.25 + sq) / (t + 1)
    ms = [j / grid for j in range(grid + 1)]
    kept_low = [[True] * (grid + 1) for _ in range(n)]
    kept_high = [[True] * (grid + 1) for _ in range(n)]
    for j, m in enumerate(ms):
        up, down = 0.5, 0.5
        for t in range(n):
            lp = lams[t] if m == 0 else min(lams[t], 0.5 / m)
            lm = lams[t] if m == 1 else min(lams[t], 0.5 / (1 - m))
            up *= 1 + lp * (x[t] - m)
            down *= 1 - lm * (x[t] - m)
            kept_low[t][j] = up < 1 / alpha
            kept_high[t][j] = down < 1 / alpha
    lows, highs, lo_run, hi_run = [], [], 0.0, 1.0
    for t in range(n):
        first = next((j for j in range(grid + 1) if kept_low[t][j]), None)
        last = next((j for j in range(grid, -1, -1) if kept_high[t][j]), None)
        low = 1.0 if first is None else (ms[first - 1] if first > 0 else 0.0)
        high = 0.0 if last is None else (ms[last + 1] if last < grid else 1.0)
        lo_run, hi_run = max(lo_run, low), min(hi_run, high)
        lows.append(lo_run)
        highs.append(hi_run)
    return lows, highs


@pytest.mark.parametrize("kind, n, seed", [("bernoulli 0.5", 60, 0), ("bernoulli 0.05", 80, 1), ("beta", 50, 2)])
def test_betting_cs_matches_the_scalar_reference(kind, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.beta(2, 5, n) if kind == "beta" else (rng.random(n) < float(kind.split()[1])).astype(float)
    low, high = betting_cs(x, 0.9, grid=200)
    ref_low, ref_high = reference_bounds(list(x), 0.1, 200)
    assert np.allclose(low, ref_low, atol=1e-12) and np.allclose(high, ref_high, atol=1e-12)
    assert high[-1] - low[-1] < 0.6  # it does narrow: the comparison is not between two [0, 1]s


def test_betting_cs_is_bit_identical_whatever_the_chunking():
    rng = np.random.default_rng(3)
    x = rng.beta(0.5, 0.5, 700)
    whole = BettingCS(0.95).update(x)
    for size in (1, 7, 64, 255, 256, 257):
        cs = BettingCS(0.95)
        parts = [cs.update(x[i:i + size]) for i in range(0, x.size, size)]
        assert np.array_equal(np.concatenate([p[0] for p in parts]), whole[0])
        assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])


def test_betting_cs_shape_of_the_interval():
    x = np.r_[np.ones(80), np.zeros(20)]
    np.random.default_rng(4).shuffle(x)
    low, high = betting_cs(x)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) <= 0)  # running intersection
    assert low[-1] <= x.mean() <= high[-1]
    # wider than the fixed-n Wilson interval at the same n: that is the price of validity
    from fasteval.types.stats import wilson_interval
    w_lo, w_hi = wilson_interval(80, 100)
    assert low[-1] < w_lo and high[-1] > w_hi
    assert high[-1] - low[-1] < 0.35


@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.floats(0, 1), st.floats(0, 1))
@settings(max_examples=60, deadline=None)
def test_long_wealth_falls_and_short_wealth_rises_in_m(x, m1, m2):
    """What makes the sequence an interval (and the grid bounds conservative)."""
    lo, hi = sorted((m1, m2))
    xs = np.asarray(x)
    assert log_capital(xs, lo, side="long")[-1] >= log_capital(xs, hi, side="long")[-1] - 1e-9
    assert log_capital(xs, lo, side="short")[-1] <= log_capital(xs, hi, side="short")[-1] + 1e-9


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BettingCS().update([0.5, 1.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BettingCS().update([np.nan])
    with pytest.raises(ValueError, match="confidence"):
        BettingCS(1.0)


def test_coverage_under_continuous_monitoring_small_simulation():
    """400 runs of 300 looks at p = 0.3: the sequence covers at every look in >= 95% of runs
    (binomial noise: a 95%-covering sequence falls below 0.925 with probability < 1%); Wilson's
    interval, looked at after every episode of the same runs, covers far less (so this check can
    tell a valid interval from an invalid one)."""
    rng = np.random.default_rng(5)
    p = 0.3
    x = (rng.random((400, 300)) < p).astype(float)
    covered = log_capital(x, p).max(axis=1) < math.log(20)
    assert covered.mean() >= 0.925
    t = np.arange(1, 301)
    z = 1.959963984540054
    ph = np.cumsum(x, axis=1) / t
    centre = (ph + z * z / (2 * t)) / (1 + z * z / t)
    half = z * np.sqrt(ph * (1 - ph) / t + z * z / (4 * t * t)) / (1 + z * z / t)
    wilson = (~((p < centre - half) | (p > centre + half)).any(axis=1)).mean()
    assert wilson < 0.85


def test_grid_bounds_agree_with_the_wealth_at_grid_means():
    rng = np.random.default_rng(6)
    x = (rng.random(150) < 0.6).astype(float)
    cs = BettingCS(0.95, grid=100)
    low, high = cs.update(x)
    m = 0.6
    wealth_out = (log_capital(x, m) >= math.log(20)).any()
    grid_out = bool(((m < low) | (m > high)).any())
    assert grid_out <= wealth_out  # the grid never excludes a mean the wealth keeps


# -- the paired e-process -----------------------------------------------------------------------
def test_paired_batch_equals_streaming_and_chunking():
    rng = np.random.default_rng(7)
    a, b = rng.random(800) < 0.6, rng.random(800) < 0.62
    y = discordant_outcomes(a, b)
    lb, lw = paired_log_wealth(y)
    whole = PairedEProcess(0.999999)
    assert whole.update(y) is None
    assert whole.log_better == lb[-1] and whole.log_worse == lw[-1]
    for size in (1, 7, 64):
        e = PairedEProcess(0.999999)
        for i in range(0, y.size, size):
            e.update(y[i:i + size])
        assert e.log_better == whole.log_better and e.n_pairs == 800


def test_paired_decides_and_freezes_at_the_decision():
    a = np.zeros(300, bool)
    b = np.ones(300, bool)  # every pair discordant, B's
    e = PairedEProcess(0.95)
    k = e.update(discordant_outcomes(a, b))
    lb, _ = paired_log_wealth(discordant_outcomes(a, b))
    assert k == int(np.argmax(lb >= math.log(40))) + 1 and e.verdict == "better"
    assert e.n_pairs == k and e.e_better >= 40 and e.update([1.0]) is None
    # mixture of constant bets: after D straight wins the wealth is mean_j (1 + lam_j / 2)^D
    assert math.isclose(e.e_better, float(np.mean((1 + BETS / 2) ** k)), rel_tol=1e-9)
    e = PairedEProcess(0.95)
    assert e.update(discordant_outcomes(b, a)) == k and e.verdict == "worse"


def test_paired_type_one_error_small_simulation():
    """Two equal policies (p = 0.6, independent), 600 runs of 300 pairs: the e-process with early
    stopping rejects in <= 5% of runs (its bound; it is far below in practice), while McNemar's
    test checked every 10 pairs on the same runs rejects in more than 8% (so peeking is caught)."""
    stats = pytest.importorskip("scipy.stats")

    rng = np.random.default_rng(8)
    a, b = rng.random((600, 300)) < 0.6, rng.random((600, 300)) < 0.6
    lb, lw = paired_log_wealth(np.where(a == b, np.nan, b.astype(float)))
    rejected = (np.maximum(lb, lw) >= math.log(40)).any(axis=1)
    assert rejected.mean() <= 0.05
    only_b, disc = np.cumsum(~a & b, axis=1)[:, 9::10], np.cumsum(a != b, axis=1)[:, 9::10]
    p = np.where(disc > 0, np.minimum(1, 2 * stats.binom.cdf(np.minimum(only_b, disc - only_b), disc, 0.5)), 1)
    assert (p <= 0.05).any(axis=1).mean() > 0.08


def test_paired_power_on_a_clear_difference():
    rng = np.random.default_rng(9)
    decided = []
    for _ in range(50):
        a, b = rng.random(200) < 0.4, rng.random(200) < 0.9
        e = PairedEProcess(0.95)
        e.update(discordant_outcomes(a, b))
        decided.append(e.verdict)
    assert decided.count("better") >= 48 and "worse" not in decided


def test_mapped_differences_and_their_bounds():
    y = mapped_differences([0, 10, 5], [10, 0, 5], (0, 10))
    assert np.allclose(y, [1.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="outside --return-bounds"):
        mapped_differences([0, 11], [0, 0], (0, 10))


# -- rules, monitor, prefix gate ------------------------------------------------------------------
@pytest.mark.parametrize("text, metric, kind, value", [
    ("ci<=0.05", "success", "ci", 0.05), ("above=0.8", "success", "above", 0.8), ("below = 0.3", "success", "below", 0.3),
    ("return:ci<=5", "return", "ci", 5.0), ("return:above=-20", "return", "above", -20.0), ("success:below=0.5", "success", "below", 0.5),
])
def test_parse_rules(text, metric, kind, value):
    rule = parse_stop_rule(text)
    assert (rule.metric, rule.kind, rule.value) == (metric, kind, value)


@pytest.mark.parametrize("text, needle", [
    ("ci<0.05", "cannot read"), ("above=80", "fraction in"), ("ci<=0.7", "below 0.5"), ("ci<=0", "> 0"),
    ("decided", "fasteval compare"), ("above=x", "not a number"), ("", "expected a rule"), ("above=nan", "finite"),
])
def test_parse_rule_errors_say_what_to_do(text, needle):
    with pytest.raises(ValueError, match=needle):
        parse_stop_rule(text)


def test_decided_only_where_allowed_and_return_bounds():
    assert parse_stop_rule("decided", allow_decided=True).kind == "decided"
    assert parse_return_bounds("-1,1") == (-1.0, 1.0)
    for bad in ("1,1", "a,b", "1", "0,inf"):
        with pytest.raises(ValueError, match="return-bounds"):
            parse_return_bounds(bad)
    with pytest.raises(ValueError, match="needs --return-bounds"):
        StopMonitor("return:ci<=1")
    with pytest.raises(ValueError, match="inside --return-bounds"):
        StopMonitor("return:above=20", return_bounds="0,10")


def test_monitor_stops_where_the_sequence_first_clears_the_threshold():
    rng = np.random.default_rng(10)
    x = rng.random(1000) < 0.95
    low, high = betting_cs(x.astype(float))
    expected = int(np.argmax(low > 0.8)) + 1
    mon = StopMonitor("above=0.8")
    assert mon.feed(x) == expected
    s = mon.summary()
    assert s["fired"] and s["reason"] == "rule" and s["k"] == expected and s["decision"] == "above"
    assert s["cs_low"] == low[expected - 1] > 0.8 and s["estimate"] == x[:expected].mean()
    eps = StopMonitor("ci<=0.1")
    k = eps.feed(x)
    assert k == int(np.argmax((high - low) / 2 <= 0.1)) + 1


def test_trajectory_estimate_is_the_mean_of_the_first_k_in_every_feed():
    """The estimate a --stop-when page draws: after each outcome, the mean of the first k (in the
    rule's scale: returns, not the unit interval), across feeds of any size, up to the stop."""
    rng = np.random.default_rng(12)
    r = 100 * rng.beta(5, 2, 300)
    mon = StopMonitor("return:ci<=1", return_bounds=(-20, 100))
    for part in np.array_split(r, [1, 7, 8, 50, 120]):  # an empty feed among them
        mon.feed(part)
    tr = mon.trajectory(points=10_000)
    k = np.asarray(tr["k"])
    assert k.tolist() == list(range(1, r.size + 1))
    np.testing.assert_allclose(tr["estimate"], np.cumsum(r) / k, rtol=1e-12)
    stopped = StopMonitor("above=0.8")
    x = (rng.random(1000) < 0.95).astype(float)
    n = stopped.feed(x)
    last = stopped.trajectory()
    assert last["k"][-1] == n and math.isclose(last["estimate"][-1], x[:n].mean())


def test_monitor_return_rule_and_out_of_bounds_returns():
    rng = np.random.default_rng(11)
    r = 100 * rng.beta(5, 2, 500)  # mean 71.4, bounds 0..100
    mon = StopMonitor("return:above=50", return_bounds=(0, 100))
    k = mon.feed(r)
    low, _ = betting_cs(r / 100)
    assert k == int(np.argmax(low > 0.5)) + 1
    s = mon.summary()
    assert s["cs_low"] > 50 and math.isclose(s["estimate"], r[:k].mean())
    with pytest.raises(ValueError, match="outside them"):
        StopMonitor("return:ci<=1", return_bounds=(0, 100)).feed([50, 101])


def test_monitor_cap_and_never_firing():
    mon = StopMonitor("above=0.5", cap=50)  # a rate of exactly 0.5: neither above nor surely not above
    assert mon.feed(np.arange(30) % 2 == 0) is None
    assert mon.feed(np.arange(40) % 2 == 0) is None
    s = mon.summary()
    assert s["k"] == 50 and s["reason"] == "cap" and not s["fired"] and s["decision"] is None


def test_above_stops_for_futility_once_the_interval_lies_below_the_threshold():
    """Issue 41: ``above=0.8`` on a 50% policy stops as soon as the interval lies wholly below 0.8 ("surely not
    above"), not at the cap; no claim of above is made. ``below=T`` is the mirror."""
    half = np.arange(200) % 2 == 0
    mon = StopMonitor("above=0.8", cap=200)
    k = mon.feed(half)
    s = mon.summary()
    assert k is not None and k < 40 and s["reason"] == "futility" and s["decision"] == "not_above"
    assert not s["fired"] and s["cs_high"] < 0.8 and s["k"] == k
    mirror = StopMonitor("below=0.2", cap=200)
    assert mirror.feed(~half) == k  # the mirrored outcomes, read from the other side
    assert mirror.summary()["decision"] == "not_below" and mirror.summary()["cs_low"] > 0.2


@given(st.data())
@settings(max_examples=40, deadline=None)
def test_prefix_gate_gives_the_same_k_in_any_arrival_order(data):
    n = 160
    seed = data.draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    outcomes = rng.random(n) < data.draw(st.sampled_from([0.95, 0.97, 0.99]))
    failed = set(data.draw(st.lists(st.integers(0, n - 1), max_size=5)))
    values = [None if i in failed else bool(outcomes[i]) for i in range(n)]
    expected = StopMonitor("above=0.7")
    kept = [v for v in values if v is not None]
    hit = expected.feed(kept)
    order = data.draw(st.permutations(range(n)))
    chunk = data.draw(st.integers(1, 40))
    gate = PrefixGate(StopMonitor("above=0.7"), min_feed=data.draw(st.integers(1, 20)))
    fired, arrived = [], list(order)
    for i in range(0, n, chunk):
        ixs = order[i:i + chunk]
        k = gate.add(ixs, [values[j] for j in ixs])
        if k is not None:
            fired.append(k)
            arrived = order[: i + chunk]
            break  # the engine stops launching here; in-flight ones may still arrive (below)
    else:
        k = gate.flush()  # the end of the run: the buffered prefix goes to the monitor
        if k is not None:
            fired.append(k)
    if hit is None:
        assert fired == [] and gate.k is None
        return
    # k: the index just after the hit-th outcome (failed episodes count as finished, no outcome)
    present = np.cumsum([v is not None for v in values])
    k_expected = int(np.argmax(present == hit)) + 1
    assert fired == [k_expected] and gate.k == k_expected
    s = gate.summary()
    assert s["k"] == k_expected and s["cs_low"] == expected.summary()["cs_low"]
    assert s["n_failed_in_prefix"] == len([f for f in failed if f < k_expected])
    assert s["computed_past_stop"] == sorted(ix for ix in arrived if ix >= k_expected)
    late = [ix for ix in order[len(arrived):] if ix >= k_expected][:3]
    assert gate.add(late, [True] * len(late)) is None
    assert gate.summary()["computed_past_stop"] == sorted(s["computed_past_stop"] + late)


def test_futility_stops_keep_the_error_rates_and_the_coverage_by_simulation():
    """Issue 41: with futility stops, ``above=0.8`` at the boundary (p = 0.8, the worst case for both claims)
    claims "above" and "surely not above" (a false claim only when p > 0.8, so here the test is of the bound
    itself) each at most alpha/2-ish of the time, and the interval at the stop covers p at least at its
    level (200 runs of cap 300, fixed seed). The savings below the threshold are what futility is for."""
    rng = np.random.default_rng(41)
    above = not_above = cover = 0
    runs = 200
    for _ in range(runs):
        mon = StopMonitor("above=0.8", 0.95, None, 300)
        mon.feed(rng.random(300) < 0.8)
        s = mon.summary()
        above += s["decision"] == "above"
        not_above += s["decision"] == "not_above"
        cover += s["cs_low"] <= 0.8 <= s["cs_high"]
    assert above / runs <= 0.05 and not_above / runs <= 0.05 and cover / runs >= 0.95
    low = [StopMonitor("above=0.8", 0.95, None, 300) for _ in range(20)]
    ks = [m.feed(rng.random(300) < 0.5) for m in low]
    assert all(k is not None for k in ks) and np.mean(ks) < 60  # p = 0.5: stopped in a fraction of the cap
