"""The race of ``--stop-when best`` (fasteval.types.sequential.race) and its known-answer family.

* the family (fasteval.testing.checkpoints): exact marginals for every share of shared difficulty,
  the vectorised simulator equal to the env seed for seed (and through the engine, at batch 1 and 7);
* the race's bets: at m = 1/2 they are PairedEProcess's (bit for bit), and the new confidence
  sequence covers under continuous monitoring, next to the tested BettingCS;
* the race: bit-identical decisions for any block sizes and any arrival order (shuffled), the leader
  never dropped, every drop backed by its paired interval, ties, the cap, returns, resume;
* the family-wise guarantee by simulation: no policy within eps of the best is dropped in more than
  alpha of the races (at confidence 0.8, so that a broken union bound shows: the same race without
  it fails the check).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fasteval.testing.bernoulli import BERNOULLI_ENV, bernoulli_outcomes, expected_bernoulli_episode
from fasteval.testing.checkpoints import CheckpointFamily
from fasteval.types.sequential import BettingCS, PairedEProcess
from fasteval.types.sequential.betting import log_capital
from fasteval.types.sequential.eprocess import discordant_outcomes
from fasteval.types.sequential.race import Race, RaceGate, is_race_rule, parse_race_rule
from fasteval.types.sequential.race_cs import log_wealth, mixture_cs


# -- the family ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("share", [0.0, 0.4, 1.0])
def test_family_marginals_are_exact_for_every_share(share):
    fam = CheckpointFamily((0.1, 0.35, 0.5, 0.9), share=share)
    n = 200_000
    x = fam.outcomes(np.arange(n))
    se = np.sqrt(np.array(fam.rates) * (1 - np.array(fam.rates)) / n)
    assert np.all(np.abs(x.mean(axis=1) - fam.rates) < 4 * se)
    # the correlation of two checkpoints is the share's: r (min(p, q) - p q) / (sd_p sd_q)
    p, q = fam.rates[1], fam.rates[3]
    expect = share * (min(p, q) - p * q) / math.sqrt(p * (1 - p) * q * (1 - q))
    assert abs(np.corrcoef(x[1], x[3])[0, 1] - expect) < 0.015
    if share == 1.0:  # comonotone: the better one succeeds wherever the worse one does
        assert not np.any(x[1] & ~x[3])


def test_shared_and_independent_coupling_are_share_1_and_0_seed_for_seed():
    seeds = range(-20, 400)
    for coupling, share in (("shared", 1.0), ("independent", 0.0)):
        for arm in (0, 1):
            old = [expected_bernoulli_episode(s, [0.3, 0.7], arm, coupling) for s in seeds]
            new = [expected_bernoulli_episode(s, [0.3, 0.7], arm, share=share) for s in seeds]
            assert old == new


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_simulator_equals_the_env_seed_for_seed(share):
    seeds = np.arange(-30, 2000)
    rates = (0.2, 0.5, 0.55, 0.8)
    out = bernoulli_outcomes(seeds, rates, share, max_length=4)
    for arm in range(len(rates)):
        exact = [expected_bernoulli_episode(int(s), rates, arm, max_length=4, share=share) for s in seeds]
        assert out["success"][arm].tolist() == [e["success"] for e in exact]
        assert out["sum_reward"][arm].tolist() == [e["sum_reward"] for e in exact]
        assert out["length"].tolist() == [e["length"] for e in exact]


def test_arm_policies_of_any_index_resolve():
    from fasteval.testing import bernoulli

    assert bernoulli.arm_12().arm == 12 and bernoulli.arm_0().arm == 0
    with pytest.raises(AttributeError):
        bernoulli.arm_01  # noqa: B018 (not a canonical index)
    fam = CheckpointFamily.spread(0.3, 0.8, 3)
    assert fam.policies() == [f"fasteval.testing.bernoulli:arm_{k}" for k in range(3)] and fam.best == 2
    with pytest.raises(ValueError, match="rates"):
        CheckpointFamily((0.5, 1.5))
    with pytest.raises(ValueError, match="share"):
        CheckpointFamily((0.5,), share=2)


@pytest.mark.parametrize("batch_size", [1, 7])
def test_family_policies_run_end_to_end_with_the_simulators_outcomes(batch_size):
    from fasteval import evaluate

    fam = CheckpointFamily((0.3, 0.6, 0.65, 0.8), share=0.5)
    seed, n = 123, 40
    expected = fam.outcomes(seed + np.arange(n))
    returns = fam.outcomes(seed + np.arange(n), "return")
    for k in (1, 3):
        result = evaluate(env=fam.env_ref, env_kwargs=fam.env_kwargs, policy=fam.policy(k), n_episodes=n, seed=seed,
                          batch_size=batch_size, device="cpu")
        assert result.column("success").tolist() == expected[k].tolist()
        assert np.array_equal(result.column("sum_reward"), returns[k])
    assert fam.env_ref == BERNOULLI_ENV


# -- the bets and the confidence sequence --------------------------------------------------------------------
def test_bets_at_one_half_are_the_paired_eprocess_bit_for_bit():
    rng = np.random.default_rng(3)
    a, b = rng.random(500) < 0.6, rng.random(500) < 0.7
    y = discordant_outcomes(a, b)  # NaN on concordant pairs: skipped by both
    e = PairedEProcess(0.95)
    e.threshold, e._log_threshold = math.inf, math.inf  # never stop: compare the whole path
    e.update(y)
    better = log_wealth(y, 0.5, "long", max_bet=1.0)
    worse = log_wealth(y, 0.5, "short", max_bet=1.0)
    assert better[-1] == e.log_better and worse[-1] == e.log_worse
    path = e.trajectory(points=10_000)
    assert np.array_equal(np.exp(better), np.array(path["e_value_better"]))


@pytest.mark.parametrize("kind, mean, seed", [("bernoulli", 0.3, 0), ("bernoulli", 0.95, 1), ("beta", 2 / 7, 2)])
def test_mixture_cs_covers_under_continuous_monitoring_like_bettingcs(kind, mean, seed):
    """At the true mean the sequence excludes it iff a wealth reaches 2/alpha: read every look at once."""
    rng = np.random.default_rng(seed)
    runs, horizon, conf = 400, 400, 0.9
    x = (rng.random((runs, horizon)) < mean).astype(float) if kind == "bernoulli" else rng.beta(2, 5, (runs, horizon))
    line = math.log(2 / (1 - conf))
    ever = np.maximum(log_wealth(x, mean, "long"), log_wealth(x, mean, "short")).max(axis=1) >= line
    betting = log_capital(x, mean, conf).max(axis=1) >= math.log(1 / (1 - conf))
    assert ever.mean() <= 0.1 + 3 * math.sqrt(0.09 / runs)
    assert betting.mean() <= 0.1 + 3 * math.sqrt(0.09 / runs)
    # the final-time bounds found by bisection are the edges of the set the wealths define
    low, high = mixture_cs(x[:20], conf)
    for r in range(20):
        for m, inside in ((low[r] - 1e-9, False), (low[r] + 1e-6, True), (high[r] - 1e-6, True), (high[r] + 1e-9, False)):
            if not 0 < m < 1:
                continue
            w = max(log_wealth(x[r], m, "long")[-1], log_wealth(x[r], m, "short")[-1])
            assert (w < line) == inside, (r, m)
        assert low[r] < x[r].mean() < high[r]  # the sample mean is always inside (unlike a running intersection)


def test_mixture_cs_edge_cases():
    low, high = mixture_cs(np.full((1, 0), np.nan).reshape(1, 0), 0.95)
    assert low[0] == 0.0 and high[0] == 1.0
    low, high = mixture_cs([np.nan, 1.0, 1.0, np.nan], 0.95)  # NaN skipped
    assert 0.0 < low < 1.0 and high == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="values"):
        mixture_cs([0.5, 1.5], 0.95)


# -- the race ------------------------------------------------------------------------------------------------
def _race_a(n=600, share=0.0, rule="best:eps=0.02", seed=0):
    fam = CheckpointFamily.spread(0.3, 0.8, 6, share=share)
    return fam, fam.outcomes(seed + np.arange(n)), rule


def _drops(status):
    return [(e.policy, e.k, e.by, e.e_value) for e in status.eliminations]


def test_race_drops_clear_losers_and_keeps_the_best():
    fam, x, rule = _race_a()
    race = Race(rule, fam.n_policies, cap=x.shape[1], holm=False)  # the union bound's line for every drop
    status = race.feed(x)
    assert status.done and fam.best in status.remaining and status.leader == fam.best
    assert len(status.eliminations) >= 3
    for e in status.eliminations:  # every drop: the winner's paired interval over the loser lies above eps
        assert e.by in range(fam.n_policies) and e.by != e.policy and e.e_value >= race.line
        interval = race.paired_interval(e.by, e.policy)
        assert interval["n_pairs"] == e.k and interval["cs_low"] >= 0.02 - 1e-12
        assert race.outcomes(e.policy).size == e.k
    summary = race.summary()
    assert summary["total_episodes"] == sum(p["episodes"] for p in summary["policies"])
    assert summary["policies"][fam.best]["rank"] == 1 and summary["leader"] == fam.best
    assert {d["policy"] for d in summary["eliminations"]} == {e.policy for e in status.eliminations}


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 90), min_size=1, max_size=40), st.integers(0, 3))
def test_race_is_the_same_for_any_block_sizes(sizes, which):
    fam, x, rule = _race_a(n=500, share=(0.0, 0.5, 1.0, 0.3)[which], rule=("best", "best:eps=0.02")[which % 2])
    whole = Race(rule, fam.n_policies, cap=450).feed(x)
    race, pos = Race(rule, fam.n_policies, cap=450), 0
    for size in itertools.cycle(sizes):
        status = race.feed(x[:, pos:pos + size])
        pos += size
        if pos >= x.shape[1]:
            break
    assert _drops(status) == _drops(whole) and (status.k, status.reason, status.leader) == (whole.k, whole.reason, whole.leader)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gate_gives_the_same_race_for_any_arrival_order(seed):
    fam, x, rule = _race_a(n=400, share=0.5, seed=seed)
    reference = Race(rule, fam.n_policies, cap=400)
    ref_status = reference.feed(x)
    rng = np.random.default_rng(seed)
    items = [(p, i) for p in range(fam.n_policies) for i in range(400)]
    order = rng.permutation(len(items))
    gate = RaceGate(Race(rule, fam.n_policies, cap=400), min_feed=int(rng.integers(1, 9)))
    pos = 0
    while pos < len(order):  # arrive in random batches, each batch of mixed policies
        size = int(rng.integers(1, 60))
        for j in order[pos:pos + size]:
            p, i = items[j]
            gate.add(p, [i], [bool(x[p, i])])
        pos += size
    status = gate.flush()
    assert _drops(status) == _drops(ref_status) and status.k == ref_status.k and status.reason == ref_status.reason
    assert gate.race.summary()["vs_leader"] == reference.summary()["vs_leader"]
    for e in status.eliminations:  # a dropped policy's later episodes are past its stop, none is lost
        assert sorted(gate.past_stop[e.policy]) == list(range(e.k, 400))


def test_failed_episodes_count_as_finished_without_an_outcome():
    fam, x, rule = _race_a(n=300)
    values = x.astype(object)
    values[2, 5] = values[4, 17] = None
    a = Race(rule, fam.n_policies, cap=300).feed(values)
    gate = RaceGate(Race(rule, fam.n_policies, cap=300))
    for p in range(fam.n_policies):
        gate.add(p, range(299, -1, -1), values[p, ::-1].tolist())
    assert _drops(gate.flush()) == _drops(a)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.05, 0.2]))
def test_the_leader_is_never_dropped_and_someone_remains(seed, eps):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 7))
    x = rng.random((K, 300)) < rng.random((K, 1))
    race = Race(f"best:eps={eps}", K, cap=300)
    for start in range(0, 300, 37):
        status = race.feed(x[:, start:start + 37])
        assert status.remaining and (status.leader is None or status.leader in status.remaining)
        for e in status.new:  # the winner's mean over the shared prefix is higher by more than eps
            assert x[e.by, :e.k].mean() - x[e.policy, :e.k].mean() > eps


def test_ties_need_a_margin_and_shared_difficulty():
    fam = CheckpointFamily((0.500, 0.5025, 0.505, 0.5075, 0.51), share=1.0)
    x = fam.outcomes(np.arange(6000))
    tied = Race("best:eps=0.02", 5, cap=6000).feed(x)
    assert tied.done and tied.tied and tied.reason == "tied" and len(tied.remaining) == 5 and tied.k < 6000
    no_margin = Race("best:eps=0.02", 5, cap=6000).feed(CheckpointFamily(fam.rates, share=0.0).outcomes(np.arange(6000)))
    assert not no_margin.tied and no_margin.reason == "cap"  # without shared difficulty: far more episodes needed


def test_cap_and_raise_cap():
    fam, x, rule = _race_a(n=600)
    full = Race(rule, fam.n_policies, cap=600).feed(x)
    race = Race(rule, fam.n_policies, cap=150)
    first = race.feed(x)
    assert first.reason == "cap" and first.k == 150
    with pytest.raises(ValueError, match="larger cap"):
        race.raise_cap(100)
    race.raise_cap(600)
    assert _drops(race.feed(x[:, 150:])) == _drops(full)
    ended = Race("best", 2, cap=500)
    assert ended.feed(np.array([[True] * 500, [False] * 500])).reason == "one_left"
    with pytest.raises(ValueError, match="already ended"):
        ended.raise_cap(1000)


def test_resume_by_priming_a_new_gate_with_the_records():
    fam, x, rule = _race_a(n=500, share=0.5)
    uninterrupted = Race(rule, fam.n_policies, cap=500).feed(x)
    gate = RaceGate(Race(rule, fam.n_policies, cap=500))
    for p in range(fam.n_policies):  # a first segment recorded episodes 0..199 of every policy (in any order)
        gate.prime(p, range(199, -1, -1), x[p, 199::-1].tolist())
    resumed = RaceGate(Race(rule, fam.n_policies, cap=500))
    for p in range(fam.n_policies):
        k_p = next((e.k for e in gate.race.eliminations if e.policy == p), 200)
        resumed.prime(p, range(k_p), x[p, :k_p].tolist())  # what the record keeps of policy p
    for p in resumed.race.remaining_policies:
        resumed.add(p, range(200, 500), x[p, 200:].tolist())
    assert _drops(resumed.flush()) == _drops(uninterrupted)


def test_race_on_returns():
    fam = CheckpointFamily.spread(0.2, 0.8, 4, share=0.5)
    r = fam.outcomes(np.arange(800), "return")
    race = Race("return:best:eps=0.01", 4, cap=800, return_bounds=(0.0, 1.0))
    status = race.feed(r)
    assert status.leader == fam.best and status.eliminations
    best = race.summary()["policies"][fam.best]
    assert best["estimate"] == pytest.approx(float(r[fam.best, :best["episodes"]].mean()))
    assert best["cs_low"] < best["estimate"] < best["cs_high"]
    with pytest.raises(ValueError, match="outside"):
        Race("return:best", 4, return_bounds=(0.0, 0.5)).feed(r)


def test_rules_and_setup_errors():
    assert parse_race_rule("best").eps == 0.0 and parse_race_rule("best:eps=0.02").eps == 0.02
    assert parse_race_rule("return:best:eps=5").metric == "return"
    assert is_race_rule("best:eps=0.1") and not is_race_rule("above=0.8") and not is_race_rule("bestest")
    for bad, match in (("best:eps=x", "not a number"), ("best:eps=-1", ">= 0"), ("best:eps=1.5", "fraction"),
                       ("worst", "race rule")):
        with pytest.raises(ValueError, match=match):
            parse_race_rule(bad)
    with pytest.raises(ValueError, match="at least two"):
        Race("best", 1)
    with pytest.raises(ValueError, match="return-bounds"):
        Race("return:best", 3)
    with pytest.raises(ValueError, match="smaller than the width"):
        Race("return:best:eps=2", 3, return_bounds=(0, 1))
    with pytest.raises(ValueError, match="shape"):
        Race("best", 3).feed(np.zeros((2, 4)))


# -- the family-wise guarantee, by simulation ----------------------------------------------------------------
def _violations(rates, eps, races, cap, union_bound=True):
    """Races (confidence 0.8) that drop a policy within eps of the best."""
    fam = CheckpointFamily(rates, share=0.0)
    good = {k for k, r in enumerate(rates) if r >= max(rates) - eps - 1e-12}
    bad = 0
    for r in range(races):
        race = Race(f"best:eps={eps}", len(rates), cap=cap, confidence=0.8)
        if not union_bound:  # each pair at the full alpha: what the union bound is there to prevent
            race.alpha_pair, race.line = race.alpha, 2.0 / race.alpha
            race._log_line = math.log(race.line)
            K = len(rates)  # and the drops' line 2 / alpha too (Holm's first line is K (K - 1) / alpha)
            race.holm, race.alpha = False, race.alpha * K * (K - 1) / 2.0
        status = race.feed(fam.outcomes(r * 100_000 + np.arange(cap)))
        bad += any(e.policy in good for e in status.eliminations)
    return bad


@pytest.mark.parametrize("rates, eps", [((0.6, 0.58, 0.58, 0.58), 0.02), ((0.5, 0.5, 0.5, 0.5), 0.0)])
def test_family_wise_error_stays_below_alpha_and_fails_without_the_union_bound(rates, eps):
    races, alpha = 150, 0.2
    limit = alpha * races  # expected count under the bound is far lower (about 0.05 per race here)
    assert _violations(rates, eps, races, 400) <= limit
    assert _violations(rates, eps, races, 400, union_bound=False) > limit



def test_holms_step_down_lowers_the_line_after_each_drop_and_saves_episodes():
    """Issue 41: with Holm (the default) the first drop needs ``K (K - 1) / alpha``, and after d drops the line
    is ``(K - 1) (K - d) / alpha`` (the K hypotheses "q is within eps of the best", step-down); every drop's
    e-value reaches the line of its step; the best is kept and fewer episodes are used than without Holm."""
    fam, x, rule = _race_a()
    K = fam.n_policies
    holm, plain = Race(rule, K, cap=x.shape[1]), Race(rule, K, cap=x.shape[1], holm=False)
    status, _ = holm.feed(x), plain.feed(x)
    assert status.done and fam.best in status.remaining
    lines = [e.line for e in status.eliminations]
    assert lines[0] == pytest.approx(K * (K - 1) / holm.alpha)
    assert all(e.e_value >= e.line for e in status.eliminations) and lines == sorted(lines, reverse=True)
    assert all(line >= (K - 1) * (K - d) / holm.alpha - 1e-9 for d, line in enumerate(lines))
    assert holm.episodes_used().sum() < plain.episodes_used().sum()
    assert holm.summary()["holm"] is True and "Holm" in holm.summary()["method"]


def test_holms_race_keeps_the_family_wise_error_by_simulation():
    """Three equal best policies and two clear losers: once the losers go, Holm lowers the line for the rest;
    dropping any of the three best is an error, and it stays below alpha (100 races, fixed seeds)."""
    fam = CheckpointFamily((0.2, 0.2, 0.6, 0.6, 0.6), share=0.0)
    wrong = 0
    for s in range(100):
        race = Race("best", fam.n_policies, cap=800)
        race.feed(fam.outcomes(np.arange(s * 800, s * 800 + 800), "success"))
        wrong += any(fam.rates[e.policy] >= 0.6 for e in race.eliminations)
    assert wrong / 100 <= 0.05
