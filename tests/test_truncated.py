"""Truncated sequential designs (types/sequential/spending.py, group_sequential.py, truncated.py).

Checked against references and by simulation with fixed seeds:

* the spending functions' shape (0 at t = 0, all of the budget at t = 1, nondecreasing);
* the exact recursion against the plain enumeration of every increment vector, and a single
  look against scipy's exact binomial test;
* the bounds spend at most ``A(t_j)`` by each look and are the smallest that do (one count
  less would overspend);
* type-I error: exact (<= alpha by construction) and by simulation (one policy at p = T, and
  two policies under independent, seed-shared and low-discordance nulls);
* batch invariance: the stop and the summary are the same whatever the chunking of the prefix.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from fasteval.types.sequential.eprocess import discordant_outcomes
from fasteval.types.sequential.group_sequential import (
    OneSidedExact, binomial_pmf, efficacy_bounds, futility_bounds, look_points, operating, reference_operating,
)
from fasteval.types.sequential.spending import FAMILIES, Spending
from fasteval.types.sequential.truncated import (
    TruncatedDesign, TruncatedPaired, TruncatedThreshold, implied_alternative,
)

SPENDINGS = [Spending("power", 1.0), Spending("power", 1.5), Spending("obrien-fleming"), Spending("pocock"),
             Spending("hsd", -4.0), Spending("hsd", 0.0)]


# -- spending ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spending", SPENDINGS, ids=lambda s: s.label())
def test_spending_starts_at_zero_ends_at_the_budget_and_never_falls(spending):
    t = np.linspace(0.0, 1.0, 101)
    a = spending.cumulative(t, 0.025)
    assert a[0] == 0.0 and a[-1] == 0.025
    assert np.all(np.diff(a) >= 0) and np.all(a <= 0.025)
    assert spending.at(1.7, 0.025) == 0.025 and spending.at(-1.0, 0.025) == 0.0


def test_spending_known_values():
    assert Spending("power", 2.0).at(0.5, 0.04) == pytest.approx(0.01)
    assert Spending("pocock").at(0.5, 0.05) == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 2))
    # O'Brien-Fleming type: 2 (1 - Phi(z_{1 - a/2} / sqrt(t)))
    assert Spending("obrien-fleming").at(0.25, 0.05) == pytest.approx(2 * stats.norm.sf(1.959963984540054 / 0.5))


@pytest.mark.parametrize("family, param, needle", [("linear", None, "expected a family"), ("pocock", 1.0, "takes no parameter"),
                                                   ("power", -1.0, "> 0"), ("power", "x", "expected a number")])
def test_spending_refuses_bad_input(family, param, needle):
    with pytest.raises(ValueError, match=needle):
        Spending(family, param)
    assert set(FAMILIES) == {"power", "obrien-fleming", "pocock", "hsd"}


# -- the exact recursion ------------------------------------------------------------------------------
@pytest.mark.parametrize("m, p", [(1, 0.3), (50, 0.8), (1000, 0.5), (700, 0.025), (3, 0.0), (3, 1.0)])
def test_binomial_pmf_against_exact_rational_arithmetic(m, p):
    from fractions import Fraction

    fp = Fraction(p)
    ref = np.array([float(math.comb(m, k) * fp ** k * (1 - fp) ** (m - k)) for k in range(m + 1)])
    got = binomial_pmf(m, p)
    keep = ref > 1e-300
    assert np.all(np.abs(got[keep] - ref[keep]) <= 1e-11 * ref[keep]) and np.all(got[~keep] < 1e-290)
    assert not got.flags.writeable


def test_the_statistics_import_without_scipy():
    import subprocess
    import sys

    code = ("import sys; sys.modules['scipy'] = None\n"
            "from fasteval.types.sequential import TruncatedThreshold, TruncatedDesign, TruncatedPaired\n"
            "from fasteval.types.sequential.spending import Spending\n"
            "print(Spending('obrien-fleming').at(0.5, 0.05), TruncatedThreshold(0.8, 'above', TruncatedDesign(50, 0.025)).c[-1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr  # scipy is a test dependency only


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.floats(0.05, 0.95), st.data())
def test_recursion_equals_the_enumeration_of_every_path(incs, p, data):
    n = np.cumsum(incs)  # increments of 0 allowed: a look with nothing new
    c = [data.draw(st.integers(0, int(v) + 1)) for v in n]
    f = [data.draw(st.integers(-1, int(v))) for v in n]
    fast = operating(n, c, f, p)
    slow = reference_operating(n, c, f, p)
    for key in ("reject", "futility_before_cap", "expected_n"):
        assert fast[key] == pytest.approx(slow[key], abs=1e-12), key
    assert sum(fast["stop_at_look"]) == pytest.approx(1.0)


def test_one_look_is_the_exact_binomial_test():
    for n, p0, alpha in ((20, 0.8, 0.025), (137, 0.8, 0.025), (50, 0.5, 0.05)):
        c, spent = efficacy_bounds([n], p0, alpha, Spending())
        ref = next(k for k in range(n + 2) if stats.binom.sf(k - 1, n, p0) <= alpha)
        assert c[0] == ref
        assert spent == pytest.approx(stats.binom.sf(ref - 1, n, p0))


@pytest.mark.parametrize("spending", SPENDINGS[:4], ids=lambda s: s.label())
def test_bounds_spend_at_most_the_budget_by_each_look_and_are_the_smallest_that_do(spending):
    n = look_points(120, 8)
    p0, alpha = 0.7, 0.025
    c, spent = efficacy_bounds(n, p0, alpha, spending)
    assert spent <= alpha
    rejected = np.cumsum(operating(n, c, None, p0)["reject_at_look"])
    budget = spending.cumulative(n / n[-1], alpha)
    assert np.all(rejected <= budget * (1 + 1e-12))
    assert rejected[-1] == pytest.approx(spent)
    for j in range(n.size):  # one count lower at look j overspends by look j
        if c[j] <= n[j]:
            lower = c.copy()
            lower[j] -= 1
            assert np.cumsum(operating(n, lower, None, p0)["reject_at_look"])[j] > budget[j]


def test_the_null_worst_case_is_p0():
    n = look_points(80, 10)
    c, spent = efficacy_bounds(n, 0.6, 0.05, Spending())
    f, _ = futility_bounds(n, c, 0.6, 0.05, Spending(), 0.75, 0.1)
    rates = [operating(n, c, f, p)["reject"] for p in (0.3, 0.5, 0.55, 0.6)]
    assert rates == sorted(rates) and rates[-1] <= spent <= 0.05


def test_one_sided_exact_refuses_bad_input():
    with pytest.raises(ValueError, match="p0"):
        OneSidedExact(1.0, 0.05, Spending())
    with pytest.raises(ValueError, match="futility"):
        OneSidedExact(0.5, 0.05, Spending(), p1=0.4, beta=0.1)
    with pytest.raises(ValueError, match="nonnegative"):
        OneSidedExact(0.5, 0.05, Spending()).look(-1, 0.5)
    assert look_points(5, 20).tolist() == [1, 2, 3, 4, 5]
    assert look_points(100, 4).tolist() == [25, 50, 75, 100]


# -- one policy against a threshold ------------------------------------------------------------------
def test_design_validation():
    for kwargs, needle in (({"cap": 0}, "positive integer"), ({"cap": 10.5}, "positive integer"), ({"alpha": 0.6}, "alpha"),
                           ({"looks": 0}, "looks"), ({"power": 0.3}, "power"), ({"spending": "power"}, "Spending")):
        with pytest.raises(ValueError, match=needle):
            TruncatedDesign(**{"cap": 100, "alpha": 0.025, **kwargs})
    with pytest.raises(ValueError, match="side"):
        TruncatedThreshold(0.8, "over", TruncatedDesign(100, 0.025))


def test_from_rule_maps_the_rule_and_the_confidence():
    t = TruncatedThreshold.from_rule("above=0.8", 150, confidence=0.95)
    assert (t.side, t.threshold, t.design.alpha, t.design.cap) == ("above", 0.8, pytest.approx(0.025), 150)
    assert TruncatedThreshold.from_rule("below=0.3", 90, confidence=0.9).design.alpha == pytest.approx(0.05)
    for rule in ("ci<=0.05", "return:above=10"):
        with pytest.raises(ValueError, match="truncated design"):
            TruncatedThreshold.from_rule(rule, 100)


def test_exact_type_one_error_is_at_most_alpha_and_spent_by_the_cap():
    for side, t in (("above", 0.8), ("below", 0.8), ("above", 0.3)):
        d = TruncatedThreshold(t, side, TruncatedDesign(200, 0.025))
        null = d.operating(t)
        assert null["reject"] <= 0.025 and null["reject"] == pytest.approx(d.alpha_spent, rel=0.05, abs=0.003)
        assert d.alpha_spent > 0.02  # all of alpha, less what discreteness leaves, is spent by the cap


def test_below_is_above_on_the_failures():
    below = TruncatedThreshold(0.8, "below", TruncatedDesign(150, 0.025))
    above = TruncatedThreshold(0.2, "above", TruncatedDesign(150, 0.025))
    assert below.c.tolist() == above.c.tolist() and below.f.tolist() == above.f.tolist()
    assert below.operating(0.7)["reject"] == pytest.approx(above.operating(0.3)["reject"])
    b = below.bounds()
    assert b["claim"][-1] == 150 - below.c[-1]


def test_implied_alternative_has_the_power_and_no_less_effect_does():
    design = TruncatedDesign(160, 0.025)
    p1 = implied_alternative(0.8, design)
    n = design.look_points()
    c, _ = efficacy_bounds(n, 0.8, 0.025, design.spending)
    assert futility_bounds(n, c, 0.8, 0.025, design.spending, p1, 0.1, design.beta_spending)[1] >= 0.9
    assert futility_bounds(n, c, 0.8, 0.025, design.spending, p1 - 1e-3, 0.1, design.beta_spending)[1] < 0.9
    assert implied_alternative(0.8, TruncatedDesign(3, 0.025)) is None  # too small a cap for any effect


def test_a_cap_too_small_never_claims_and_runs_to_the_cap():
    d = TruncatedThreshold(0.8, "above", TruncatedDesign(3, 0.025))
    assert d.p1 is None and d.operating(1.0)["reject"] == 0.0
    assert d.feed([True, True, True]) == 3 and d.reason == "cap" and not d.fired


def test_type_one_error_by_simulation_one_policy():
    d = TruncatedThreshold(0.8, "above", TruncatedDesign(150, 0.025))
    rng = np.random.default_rng(31)
    runs = 6000
    claims = 0
    for _ in range(runs):
        d2 = TruncatedThreshold(0.8, "above", d.design)
        d2.feed(rng.random(150) < 0.8)
        claims += d2.fired
    exact = d.operating(0.8)["reject"]
    se = math.sqrt(exact * (1 - exact) / runs)
    assert exact <= 0.025 and abs(claims / runs - exact) < 4 * se


def test_power_and_savings_at_the_design_effect_exactly():
    d = TruncatedThreshold(0.8, "above", TruncatedDesign(170, 0.025))
    alt = d.operating(0.9)
    assert alt["reject"] >= 0.88 and alt["expected_n"] < 0.7 * 137  # 137: the fixed-n test's n for 90% power


def test_feed_stops_at_looks_only_and_freezes():
    d = TruncatedThreshold(0.8, "above", TruncatedDesign(100, 0.025, looks=10))
    assert d.feed([True] * 9) is None  # no look before 10 outcomes
    k = d.feed([True] * 50)
    assert k in d.looks and d.fired and d.n == k and d.summary()["decision"] == "above"
    assert d.feed([False] * 10) is None and d.n == k
    s = d.summary()
    assert s["design"] == "truncated" and s["reason"] == "rule" and s["valid_until"] == 100
    assert s["looks"][-1]["n"] == k and s["looks"][-1]["events"] >= s["looks"][-1]["claim_at"]


def test_futility_stop_is_not_a_claim():
    d = TruncatedThreshold(0.8, "above", TruncatedDesign(200, 0.025))
    k = d.feed([False] * 200)
    assert k == d.looks[0] and d.reason == "futility" and not d.fired and d.summary()["decision"] is None


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 60), min_size=1, max_size=12), st.sampled_from(["above", "below"]),
       st.floats(0.6, 0.98))
def test_the_stop_is_the_same_whatever_the_chunking(seed, sizes, side, rate):
    design = TruncatedDesign(150, 0.025)
    x = np.random.default_rng(seed).random(150) < rate
    whole = TruncatedThreshold(0.8, side, design)
    k = whole.feed(x)
    parts = TruncatedThreshold(0.8, side, design)
    cuts = np.cumsum(sizes)
    hits = [parts.feed(p) for p in np.split(x, cuts[cuts < 150])]
    assert next((h for h in hits if h is not None), None) == k
    assert parts.summary() == whole.summary()


def test_finish_takes_a_last_look_spending_what_is_left():
    design = TruncatedDesign(100, 0.025, looks=10)
    d = TruncatedThreshold(0.8, "above", design)
    # a path that stays between the bounds at every look, 95 outcomes (5 episodes failed for good)
    target = (d.c + np.maximum(d.f, 0)) // 2
    x = np.zeros(100, dtype=bool)
    prev_n = prev_s = 0
    for n, s in zip(d.looks, target):
        x[prev_n:prev_n + (s - prev_s)] = True
        prev_n, prev_s = n, s
    x[95:] = False
    x[90:95] = True  # 5 more successes after the 9th look
    assert d.feed(x[:95]) is None and not d.stopped
    n = np.append(d.looks[:9], 95)
    t = np.append(d.looks[:9] / 100, 1.0)
    c, spent = efficacy_bounds(n, 0.8, 0.025, design.spending, t)
    assert spent <= 0.025 and c[:9].tolist() == d.c[:9].tolist()  # the earlier looks keep their bounds
    hit = d.finish()
    assert d.stopped and d.summary()["looks"][-1] == {"n": 95, "events": d.events, "claim_at": int(c[-1]),
                                                      "futile_at": int(c[-1]) - 1}
    assert (hit == 95) == (d.events >= c[-1]) and d.reason == ("rule" if hit else "cap")
    at_look = TruncatedThreshold(0.8, "above", design)
    at_look.feed(x[:40])  # stopped right after a look: nothing new to look at
    if not at_look.stopped:
        assert at_look.finish() is None and at_look.reason == "cap"


# -- two policies, paired -----------------------------------------------------------------------------
def _pairs(rng, n, pa, pb, r):
    z = rng.standard_normal(n) * math.sqrt(r)
    a = z + rng.standard_normal(n) * math.sqrt(1 - r) < stats.norm.ppf(pa)
    b = z + rng.standard_normal(n) * math.sqrt(1 - r) < stats.norm.ppf(pb)
    return a, b


@pytest.mark.parametrize("pa, r", [(0.7, 0.0), (0.7, 0.6), (0.95, 0.0)], ids=["independent", "shared-seed", "rare-discordance"])
def test_type_one_error_by_simulation_paired(pa, r):
    design = TruncatedDesign(300, 0.025)
    rng = np.random.default_rng(32)
    runs = 1500
    decided = 0
    for _ in range(runs):
        a, b = _pairs(rng, 300, pa, pa, r)
        test = TruncatedPaired(design)
        test.update(discordant_outcomes(a, b))
        assert test.alpha_spent <= 0.025  # exact, given the discordant counts this run saw
        decided += test.decision != 0
    assert decided / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)


def test_paired_power_on_a_clear_difference_and_direction():
    rng = np.random.default_rng(33)
    design = TruncatedDesign(200, 0.025)
    better = worse = 0
    for _ in range(300):
        a, b = _pairs(rng, 200, 0.5, 0.75, 0.0)
        t = TruncatedPaired(design)
        t.update(discordant_outcomes(a, b))
        better += t.decision == 1
        t = TruncatedPaired(design)
        t.update(discordant_outcomes(b, a))
        worse += t.decision == -1
    assert better / 300 > 0.9 and worse / 300 > 0.9


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 50), min_size=1, max_size=10))
def test_paired_stop_is_the_same_whatever_the_chunking(seed, sizes):
    rng = np.random.default_rng(seed)
    a, b = _pairs(rng, 240, 0.6, 0.72, 0.3)
    y = discordant_outcomes(a, b)
    design = TruncatedDesign(240, 0.025)
    whole = TruncatedPaired(design)
    k = whole.update(y)
    parts = TruncatedPaired(design)
    cuts = np.cumsum(sizes)
    hits = [parts.update(p) for p in np.split(y, cuts[cuts < 240])]
    assert next((h for h in hits if h is not None), None) == k
    assert parts.summary() == whole.summary()
    assert whole.stopped and whole.n_pairs in design.look_points()


def test_paired_freezes_after_the_stop_and_refuses_bad_values():
    t = TruncatedPaired(TruncatedDesign(100, 0.025, looks=5))
    k = t.update(np.ones(100))
    assert k == 20 and t.verdict == "better" and t.reason == "rule"
    assert t.update(np.zeros(50)) is None and t.n_pairs == 20 and t.b_wins == 20
    s = t.summary()
    assert s["decision"] == "better" and s["looks"][-1] == {"n": 20, "discordant": 20, "b_wins": 20,
                                                            "decide_at": s["looks"][-1]["decide_at"], "futile_at": -1}
    with pytest.raises(ValueError, match="expected 1"):
        TruncatedPaired(TruncatedDesign(10, 0.025)).update([0.5])


def test_paired_no_discordant_pairs_runs_to_the_cap_without_a_decision():
    t = TruncatedPaired(TruncatedDesign(60, 0.025))
    assert t.update(np.full(60, np.nan)) == 60 and t.reason == "cap" and t.decision == 0 and t.alpha_spent == 0.0


def test_paired_futility_stops_without_a_decision_under_the_null():
    rng = np.random.default_rng(34)
    design = TruncatedDesign(600, 0.025)
    stops = []
    for _ in range(200):
        a, b = _pairs(rng, 600, 0.7, 0.7, 0.0)
        t = TruncatedPaired(design)
        t.update(discordant_outcomes(a, b))
        stops.append((t.n_pairs, t.reason))
    assert np.mean([k for k, _ in stops]) < 0.8 * 600
    assert sum(reason == "futility" for _, reason in stops) > 100


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.integers(1, 64), st.sampled_from(["above", "below"]))
def test_prefix_gate_in_front_of_a_truncated_design_gives_the_same_k_in_any_arrival_order(seed, batch, side):
    """Episodes finish in any order (a batch runs ahead, some fail for good): k in episode indices,
    and the summary, are those of the plain prefix."""
    from fasteval.types.sequential.rules import PrefixGate

    rng = np.random.default_rng(seed)
    cap = 160
    x = rng.random(cap) < (0.9 if side == "above" else 0.7)
    failed = set(rng.choice(cap, size=3, replace=False).tolist())
    values = [None if i in failed else bool(v) for i, v in enumerate(x)]
    reference = TruncatedThreshold.from_rule(f"{side}=0.8", cap)
    ref_gate = PrefixGate(reference)
    ref_gate.add(range(cap), values)
    order = np.concatenate([rng.permutation(np.arange(s, min(cap, s + batch))) for s in range(0, cap, batch)])
    gate = PrefixGate(TruncatedThreshold.from_rule(f"{side}=0.8", cap), min_feed=int(rng.integers(1, 9)))
    for start in range(0, cap, batch):
        ix = order[start:start + batch]
        gate.add(ix.tolist(), [values[i] for i in ix])
    assert gate.k == ref_gate.k
    a, b = gate.summary(), ref_gate.summary()
    assert {k: v for k, v in a.items() if k not in ("computed_past_stop", "n_computed_past_stop")} == \
        {k: v for k, v in b.items() if k not in ("computed_past_stop", "n_computed_past_stop")}
    if gate.k is not None:
        assert a["reason"] in ("rule", "futility", "cap") and a["design"] == "truncated"
