"""Every interval a report shows is valid for how the run was stopped, or labelled descriptive (issue 31).

* a ``--stop-when`` run: ``pc_success_ci95`` is the anytime-valid sequence at the stop, Wilson's only as
  ``pc_success_ci95_fixed_n``; the summary, ``eval_info.json`` and the page say so; a simulation shows
  why (Wilson at the stop misses far more than 5%, the sequence does not);
* a success rule on an env without a success signal exits 2; ``--design truncated`` decides as the
  design's monitor fed the exact outcomes, and says so;
* the live comparison: the anytime-valid interval of B - A and its trajectory (the page's bounds plot),
  the fixed-n numbers labelled descriptive, "reject at e >= 40", the margin gate on the anytime bound;
* the non-inferiority gate's exact test holds its level at the boundary (computed exactly);
* the sweep's across-env intervals cover the mean of the env rates (computed exactly), and its paired
  tests are ``fasteval compare``'s, Holm-adjusted across the report.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval import evaluate
from fasteval.testing.bernoulli import BERNOULLI_ENV, expected_bernoulli_episode
from fasteval.types.sequential import StopMonitor
from fasteval.types.sequential.stopped import FIXED_N_METHOD, METHOD, sequence_bounds
from fasteval.types.stats import wilson_interval


def cli(*args):
    from fasteval.doors.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def compare_cli(*args):
    from fasteval.doors.compare import compare

    return CliRunner().invoke(compare, [str(a) for a in args], catch_exceptions=False)


# -- a stopped run ---------------------------------------------------------------------------------------------
def test_a_stopped_run_reports_the_anytime_valid_interval_and_keeps_wilson_under_its_own_name():
    result = evaluate(env=BERNOULLI_ENV, env_kwargs={"p": 0.95}, policy="zero", n_episodes=400, device="cpu",
                      batch_size=16, stop_when="above=0.8")
    o, stop = result.overall(), result.meta["stopping"]
    k = stop["k"]
    wins = sum(expected_bernoulli_episode(i, 0.95)["success"] for i in range(k))
    assert o["n_episodes"] == k and o["n_success"] == wins
    assert o["pc_success_ci95_method"] == METHOD
    assert o["pc_success_ci95"] == pytest.approx([100 * stop["cs_low"], 100 * stop["cs_high"]], abs=1e-9)
    assert o["pc_success_ci95_fixed_n"] == pytest.approx([100 * x for x in wilson_interval(wins, k)])
    assert o["pc_success_ci95"] != pytest.approx(o["pc_success_ci95_fixed_n"])
    task = result.per_task()[0]["aggregated"]
    assert task["pc_success_ci95_method"] == METHOD and task["pc_success_ci95"] == o["pc_success_ci95"]
    # a run of fixed n keeps Wilson's, under its name
    fixed = evaluate(env=BERNOULLI_ENV, env_kwargs={"p": 0.95}, policy="zero", n_episodes=40, device="cpu").overall()
    assert fixed["pc_success_ci95_method"] == FIXED_N_METHOD and "pc_success_ci95_fixed_n" not in fixed


def test_wilson_at_a_data_dependent_stop_misses_and_the_sequence_does_not():
    """``above=0.8`` with a true rate of 0.82 (the issue's case): the share of stopped runs whose interval at
    the stop excludes 0.82. The sequence is valid at any stop; Wilson's interval is not."""
    rng = np.random.default_rng(31)
    runs, cap, p = 300, 600, 0.82
    wilson_miss = sequence_miss = 0
    for _ in range(runs):
        x = rng.random(cap) < p
        k = StopMonitor("above=0.8", 0.95, cap=cap).feed(x) or cap
        lo, hi = wilson_interval(int(x[:k].sum()), k)
        wilson_miss += not lo <= p <= hi
        lo, hi = sequence_bounds(x[:k], 0.95)
        sequence_miss += not lo <= p <= hi
    assert sequence_miss / runs <= 0.05
    assert wilson_miss / runs > 0.08 and wilson_miss > 2 * sequence_miss


def test_the_cli_summary_and_the_page_name_the_interval_of_a_stopped_run(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", BERNOULLI_ENV, "--env-kwarg", "p=0.95", "--policy", "zero", "-n", 400, "-b", 16,
              "--device", "cpu", "--stop-when", "above=0.8", "-o", out)
    assert res.exit_code == 0, res.output
    assert "anytime-valid CI" in res.output and "valid at the stop" in res.output
    doc = json.loads((out / "eval_info.json").read_text())
    assert doc["overall"]["pc_success_ci95_method"] == METHOD and doc["overall"]["pc_success_ci95_fixed_n"]
    html = (out / "report.html").read_text()
    assert "anytime-valid 95% (valid at the stop)" in html and "Wilson 95% [" not in html
    assert "descriptive" in html  # the return intervals are fixed-n ones


# -- a success rule needs a success signal ---------------------------------------------------------------------
@pytest.mark.parametrize("rule", ["ci<=0.05", "above=0.8"])
def test_a_success_rule_on_an_env_without_a_success_signal_exits_2(tmp_path, rule):
    out = tmp_path / "run"
    res = cli("--env", "CartPole-v1", "--policy", "zero", "-n", 300, "-b", 4, "--device", "cpu",
              "--stop-when", rule, "-o", out)
    assert res.exit_code == 2, res.output
    assert "success signal" in res.output and "return:" in res.output and "kept" in res.output
    assert (out / "episodes.jsonl").read_text().strip()  # the finished episodes are kept


# -- --design truncated ----------------------------------------------------------------------------------------
def test_design_truncated_on_the_command_line_decides_as_its_monitor(tmp_path):
    from fasteval.types.sequential import TruncatedDesign, TruncatedThreshold

    out = tmp_path / "run"
    res = cli("--env", BERNOULLI_ENV, "--env-kwarg", "p=0.95", "--policy", "zero", "-n", 150, "-b", 7,
              "--device", "cpu", "--stop-when", "above=0.8", "--design", "truncated", "-o", out)
    assert res.exit_code == 0, res.output
    monitor = TruncatedThreshold(0.8, "above", TruncatedDesign(150, 0.025))
    k = monitor.feed([expected_bernoulli_episode(i, 0.95)["success"] for i in range(150)])
    stop = json.loads((out / "eval_info.json").read_text())["stopping"]
    assert k is not None and stop["k"] == k and stop["design"] == "truncated" and stop["decision"] == "above"
    assert "decided by" in res.output and "truncated design" in res.output
    assert stop["resumable"] is False
    refused = cli("--resume", out, "-n", 300, "--trust-remote-code")
    assert refused.exit_code == 2 and "cannot be extended" in refused.output
    bad = cli("--env", BERNOULLI_ENV, "--policy", "zero", "-n", 150, "--stop-when", "ci<=0.05", "--design", "truncated",
              "-o", tmp_path / "bad")
    assert bad.exit_code == 2 and "above=T or below=T" in bad.output
    for batch in (1, 64):  # the same stop at any batch size (decisions on index prefixes, at the design's looks)
        again = cli("--env", BERNOULLI_ENV, "--env-kwarg", "p=0.95", "--policy", "zero", "-n", 150, "-b", batch,
                    "--device", "cpu", "--stop-when", "above=0.8", "--design", "truncated", "-o", tmp_path / f"b{batch}")
        assert again.exit_code == 0, again.output
        assert json.loads((tmp_path / f"b{batch}" / "eval_info.json").read_text())["stopping"]["k"] == k


# -- the live comparison ---------------------------------------------------------------------------------------
LIVE = ["--env", BERNOULLI_ENV, "--env-kwarg", "p=[0.55,0.85]", "--env-kwarg", "coupling=independent"]
ARM_1 = "fasteval.testing.bernoulli:arm_1"


def test_live_comparison_interval_of_b_minus_a_labels_and_plot(tmp_path):
    from fasteval.types.sequential.eprocess import centred_differences, difference_sequence

    res = compare_cli("--policy-a", ARM_1, "--policy-b", "zero", *LIVE, "-n", 600, "--stop-when", "decided",
                      "-b", 16, "--margin", 0.05, "-o", tmp_path)
    doc = json.loads((tmp_path / "compare.json").read_text())
    seq, task = doc["sequential"], doc["tasks"][0]
    k = seq["k"]
    a = [expected_bernoulli_episode(s, [0.55, 0.85], 1, "independent")["success"] for s in range(k)]
    b = [expected_bernoulli_episode(s, [0.55, 0.85], 0, "independent")["success"] for s in range(k)]
    ref = difference_sequence(centred_differences(a, b), 0.95)
    diff = seq["difference"]
    assert diff["low"] == pytest.approx(2 * ref["low"] - 1) and diff["high"] == pytest.approx(2 * ref["high"] - 1)
    observed = (sum(b) - sum(a)) / k
    assert diff["low"] <= observed <= diff["high"] and diff["high"] < 0  # B (0.55) is worse than A (0.85)
    tr = seq["trajectory"]
    assert len(tr["diff_k"]) == len(tr["diff_low"]) == len(tr["diff_high"]) and tr["diff_k"][-1] == k
    assert seq["threshold"] == 40.0  # 2 / alpha, not 39.999999999999964
    assert task["verdict_basis"] == "e-process" == doc["overall"]["verdict_basis"]
    assert task["fixed_n_tests"] == "descriptive, not valid after the stop"
    assert task["non_inferiority"]["method"].startswith("anytime-valid") and not task["non_inferiority"]["non_inferior"]
    assert task["non_inferiority"]["lower_bound"] == pytest.approx(diff["lower_bound_one_sided"])
    md = (tmp_path / "compare.md").read_text()
    assert "reject at e >= 40" in md and "descriptive, not valid after the stop" in md and "39.99" not in md
    assert "reject at e >= 40" in res.output
    from fasteval.render.html.compare_page import render_compare_page

    html = render_compare_page(doc)
    assert "anytime-valid bounds on B - A" in html and "descriptive, not valid after the stop" in html
    assert "Holm-adjusted p-value." not in html  # the page and compare.json give the same verdict basis


def test_the_truncated_design_of_a_comparison_needs_a_live_stop(tmp_path):
    res = compare_cli("--policy-a", ARM_1, "--policy-b", "zero", *LIVE, "-n", 100, "--design", "truncated", "-o", tmp_path)
    assert res.exit_code == 2 and "--stop-when decided" in res.output
    runs = compare_cli(tmp_path / "x", tmp_path / "y", "--design", "truncated", "-o", tmp_path)
    assert runs.exit_code == 2 and "live comparisons" in runs.output


def test_live_comparison_with_the_truncated_design_decides_as_its_test(tmp_path):
    from fasteval.types.sequential import TruncatedDesign, TruncatedPaired
    from fasteval.types.sequential.eprocess import discordant_outcomes

    compare_cli("--policy-a", ARM_1, "--policy-b", "zero", *LIVE, "-n", 200, "--stop-when", "decided", "-b", 16,
                "--design", "truncated", "-o", tmp_path)
    doc = json.loads((tmp_path / "compare.json").read_text())
    seq = doc["sequential"]
    a = [expected_bernoulli_episode(s, [0.55, 0.85], 1, "independent")["success"] for s in range(200)]
    b = [expected_bernoulli_episode(s, [0.55, 0.85], 0, "independent")["success"] for s in range(200)]
    test = TruncatedPaired(TruncatedDesign(200, 0.025))
    k = test.update(discordant_outcomes(a, b))
    assert k is not None and seq["k"] == k and seq["design"] == "truncated" and seq["decision"] == "worse"
    assert doc["tasks"][0]["verdict_basis"] == "truncated design" and "truncated design" in seq["decided_by"]
    # the interval at the stop is the anytime-valid one (valid whatever decided the stop), not the design's test
    observed = (sum(b[:k]) - sum(a[:k])) / k
    assert seq["difference"]["low"] <= observed <= seq["difference"]["high"]


# -- the non-inferiority gate ----------------------------------------------------------------------------------
def _boundary_size(n: int, margin: float, alpha: float, shares) -> float:
    """The exact rejection rate of the gate's test at the boundary p_B - p_A = -margin, largest over the
    discordant shares ``shares`` (every (b, c) outcome of n pairs enumerated)."""
    from fasteval.types.noninferiority import exact_p_value

    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    rejects = [(b, c) for b in range(n + 1) for c in range(n + 1 - b) if exact_p_value(b, c, n, margin)[0] <= alpha]
    worst = 0.0
    for s in shares:
        qb, qc = (s + margin) / 2, (s - margin) / 2
        size = sum(math.exp(log_fact[n] - log_fact[b] - log_fact[c] - log_fact[n - b - c] + b * math.log(qb)
                            + (c * math.log(qc) if c else 0.0) + (n - b - c) * math.log1p(-s)) for b, c in rejects)
        worst = max(worst, size)
    return worst


@pytest.mark.parametrize("n,margin", [(20, 0.1), (30, 0.2)])
def test_the_margin_gate_holds_its_level_at_the_boundary_exactly(n, margin):
    size = _boundary_size(n, margin, 0.05, np.linspace(margin + 0.01, 0.99, 25))
    assert 0.0 < size <= 0.05


def test_tangos_statistic_read_against_the_normal_quantile_does_not_hold_its_level():
    """Why the gate computes an exact p-value: the same statistic read as N(0, 1) rejects a true null in
    more than 5% of runs at n = 20 (the largest over the nuisance, computed exactly)."""
    from fasteval.types.noninferiority import tango_statistic

    n, margin = 20, 0.1
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    rejects = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)
               if tango_statistic(b, c, n, margin) >= 1.6448536269514722]
    worst = max(sum(math.exp(log_fact[n] - log_fact[b] - log_fact[c] - log_fact[n - b - c] + b * math.log((s + margin) / 2)
                             + c * math.log((s - margin) / 2) + (n - b - c) * math.log1p(-s)) for b, c in rejects)
                for s in np.linspace(margin + 1e-3, 0.999, 200))
    assert worst > 0.055


def test_the_margin_gate_passes_equal_policies_and_fails_a_regression():
    from fasteval.types.noninferiority import paired_proportions

    rng = np.random.default_rng(0)
    a = rng.random(400) < 0.8
    assert paired_proportions(a, a, 0.1, 0.05)["non_inferior"]  # equal on every pair
    worse = a & (rng.random(400) < 0.7)  # about 24 points worse
    assert not paired_proportions(a, worse, 0.1, 0.05)["non_inferior"]


# -- sweeps ----------------------------------------------------------------------------------------------------
def _exact_coverage(interval, rates, counts, confidence=0.95) -> float:
    """P(the interval of the per-env counts covers the true mean of the env rates), summed over every outcome."""
    from scipy.stats import binom

    true = float(np.mean(rates))
    pmfs = [binom.pmf(np.arange(n + 1), n, p) for p, n in zip(rates, counts)]
    cover = 0.0
    for xs in itertools.product(*[range(n + 1) for n in counts]):
        _, lo, hi = interval(list(xs), counts, confidence)
        if lo <= true <= hi:
            cover += math.prod(pmf[x] for pmf, x in zip(pmfs, xs))
    return cover


@pytest.mark.parametrize("counts", [(10, 10), (5, 20), (8, 8, 8), (12, 4, 20)])
def test_across_env_intervals_cover_the_mean_of_the_env_rates_exactly(counts):
    pytest.importorskip("scipy")
    from fasteval.types.stratified import iqm_interval, stratified_interval

    for rates in [(0.5,) * len(counts), (0.1, 0.9, 0.5)[:len(counts)], (0.95, 0.99, 0.8)[:len(counts)],
                  (0.05, 0.3, 0.7)[:len(counts)]]:
        assert _exact_coverage(stratified_interval, rates, counts) >= 0.95, (rates, counts)
    # the IQM's interval: the IQM of Bonferroni bounds, valid by monotonicity (checked for the IQM of the rates)
    from fasteval.types.stats import iqm

    rates = (0.2, 0.6, 0.9)[:len(counts)]
    true = iqm(np.asarray(rates))
    from scipy.stats import binom

    pmfs = [binom.pmf(np.arange(n + 1), n, p) for p, n in zip(rates, counts)]
    cover = sum(math.prod(pmf[x] for pmf, x in zip(pmfs, xs))
                for xs in itertools.product(*[range(n + 1) for n in counts])
                if iqm_interval(list(xs), counts)[1] <= true <= iqm_interval(list(xs), counts)[2])
    assert cover >= 0.95


def test_one_seed_block_per_env_gives_an_interval_not_a_point():
    from fasteval.types.stratified import stratified_interval

    est, lo, hi = stratified_interval([23, 18, 28], [30, 30, 30])
    assert lo < est < hi and hi - lo > 0.1


def test_sweep_paired_tests_are_compares_exact_test_with_holm_across_the_report():
    from fasteval.doors.sweep.report import _paired
    from fasteval.types.paired import holm
    from fasteval.types.stats import mcnemar_from_counts

    rng = np.random.default_rng(5)
    policies = {"da": "a", "db": "b", "dc": "c"}
    envs = {("E1", ""): "e1", ("E2", ""): "e2"}
    by_cell = {}
    for digest in policies:
        for env_id, kw in envs:
            by_cell[(digest, env_id, kw)] = [
                {"task": "t", "seed": s, "success": bool(rng.random() < {"da": 0.5, "db": 0.7, "dc": 0.55}[digest]),
                 "sum_reward": float(rng.random()), "has_success_signal": True} for s in range(60)]
    rows = _paired(policies, envs, by_cell)
    assert len(rows) == 6 and all(r["family"] == 6 for r in rows)
    raw = []
    for r in rows:
        m = r["success_mcnemar"]
        assert m["method"] == "exact binomial"
        assert m["p_value"] == pytest.approx(mcnemar_from_counts(m["only_a"], m["only_b"], exact=True)["p_value"])
        raw.append(m["p_value"])
    assert [r["success_mcnemar"]["p_holm"] for r in rows] == pytest.approx(list(holm(raw)))


def test_a_sweep_stopped_on_its_data_reports_anytime_valid_intervals(tmp_path):
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep
    from fasteval.types.sequential.stopped import simultaneous_bounds

    spec = {"name": "s", "episodes": 300, "seeds": [0, 1000],
            "policies": [{"name": "zero", "ref": "zero"}],
            "envs": [{"name": "coin", "id": BERNOULLI_ENV, "kwargs": {"p": 0.95}},
                     {"name": "coin2", "id": BERNOULLI_ENV, "kwargs": {"p": 0.97}}],
            "options": {"batch_size": 8, "device": "cpu", "stop_when": "above=0.8"}}
    assert run_sweep(SweepSpec.from_dict(spec), tmp_path / "sw", executor=LocalExecutor(workers=1)).ok
    doc = json.loads((tmp_path / "sw" / "report.json").read_text())
    assert doc["stop_when"] == "above=0.8" and doc["interval_basis"] == METHOD
    cells = {c["env"]: c for c in doc["cells"]}
    streams = {}
    for name, p in (("coin", 0.95), ("coin2", 0.97)):
        k0, k1 = (StopMonitor("above=0.8", 0.95, cap=300).feed(
            [expected_bernoulli_episode(s + i, p)["success"] for i in range(300)]) for s in (0, 1000))
        streams[name] = [expected_bernoulli_episode(i, p)["success"] for i in range(k0)] + [
            expected_bernoulli_episode(1000 + i, p)["success"] for i in range(k1)]
        c = cells[name]
        assert c["episodes"] == k0 + k1 and c["success_ci95_method"] == METHOD
        lo, hi = sequence_bounds(np.asarray(streams[name], dtype=float), 0.95)
        assert c["success_ci95"] == pytest.approx([100 * lo, 100 * hi])
    across = doc["across_envs"][0]
    bounds = np.array(simultaneous_bounds([np.asarray(streams[n], dtype=float) for n in ("coin", "coin2")], 0.95))
    assert across["mean_success_ci95"] == pytest.approx(list(100 * bounds.mean(axis=0)))
    md = (tmp_path / "sw" / "report.md").read_text()
    assert "anytime-valid" in md and "descriptive" in md


def test_a_suites_page_says_its_per_task_claims_are_not_corrected_for_the_number_of_tasks(tmp_path):
    from fasteval.doors.suites import Task, run_suite
    from fasteval.render.html import write_run_report

    suite = {"coins": {0: Task(BERNOULLI_ENV, {"p": 0.95}), 1: Task(BERNOULLI_ENV, {"p": 0.99})}}
    result = run_suite(suite, policy="zero", n_episodes=300, stop_when="above=0.8", batch_size=8, device="cpu")
    result.to_json(tmp_path / "eval_info.json")
    write_run_report(tmp_path, json.loads((tmp_path / "eval_info.json").read_text()))
    html = (tmp_path / "report.html").read_text()
    assert "not corrected for the number of tasks" in html and "1 - 0.05/T" in html


def test_the_distribution_functions_match_scipy():
    sps = pytest.importorskip("scipy.stats")
    from fasteval.types.distributions import beta_ppf, betainc, clopper_pearson, student_t_ppf

    rng = np.random.default_rng(3)
    for a, b, x in zip(rng.uniform(0.3, 60, 40), rng.uniform(0.3, 60, 40), rng.uniform(0, 1, 40)):
        assert betainc(a, b, x) == pytest.approx(sps.beta.cdf(x, a, b), abs=1e-10)
        assert beta_ppf(x, a, b) == pytest.approx(sps.beta.ppf(x, a, b), abs=1e-8)
    for x, n in [(0, 10), (10, 10), (3, 17), (40, 123), (7.5, 20.3)]:
        lo, hi = clopper_pearson(x, n, 0.95)
        ref_lo = 0.0 if x == 0 else sps.beta.ppf(0.025, x, n - x + 1)
        ref_hi = 1.0 if x == n else sps.beta.ppf(0.975, x + 1, n - x)
        assert (lo, hi) == pytest.approx((ref_lo, ref_hi), abs=1e-8)
    for q, nu in [(0.95, 1), (0.975, 2), (0.95, 9), (0.99, 30.5), (0.9, 400)]:
        assert student_t_ppf(q, nu) == pytest.approx(sps.t.ppf(q, nu), rel=1e-8)


def test_comparing_run_folders_that_stopped_on_their_data_labels_the_fixed_n_tests(tmp_path):
    base = ["--env", BERNOULLI_ENV, "--env-kwarg", "p=[0.7,0.8]", "--env-kwarg", "coupling=independent", "-b", 16,
            "--device", "cpu"]
    assert cli(*base, "--policy", "zero", "-n", 200, "--stop-when", "above=0.6", "-o", tmp_path / "a").exit_code == 0
    assert cli(*base, "--policy", ARM_1, "-n", 200, "-o", tmp_path / "b").exit_code == 0
    res = compare_cli(tmp_path / "a", tmp_path / "b", "-o", tmp_path / "cmp")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["a"]["stop_when"] == "above=0.6" and doc["b"]["stop_when"] is None
    assert doc["overall"]["stopped_runs"] == ["A"] and doc["tasks"][0]["fixed_n_tests"].startswith("descriptive")
    assert "stopped on its data" in res.output and "stopped on its data" in (tmp_path / "cmp" / "compare.md").read_text()
    from fasteval.render.html.compare_page import render_compare_page

    assert "stopped on its data" in render_compare_page(doc)
    # two runs of fixed n: nothing to label
    assert cli(*base, "--policy", "zero", "-n", 60, "-o", tmp_path / "c").exit_code == 0
    compare_cli(tmp_path / "c", tmp_path / "b", "-o", tmp_path / "cmp2")
    plain = json.loads((tmp_path / "cmp2" / "compare.json").read_text())
    assert "stopped_runs" not in plain["overall"] and "fixed_n_tests" not in plain["tasks"][0]
