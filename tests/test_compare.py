"""``fasteval compare`` and its statistics.

* McNemar's exact test, the paired bootstrap, the signed-rank test and Holm's adjustment are held
  to scipy / statsmodels on random inputs;
* run folders of the Bernoulli known-answer env: a planted regression exits 3 under
  ``--fail-if-worse``, an equal pair exits 0, unpaired inputs are refused with exit 2;
* sweep cells compare like run folders.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval.doors.compare import build_document, compare, load_side, render_markdown
from fasteval.testing.bernoulli import BERNOULLI_ENV, expected_bernoulli_episode
from fasteval.types.comparison import compare_task, finish
from fasteval.types.paired import holm, prob_improvement, signed_rank, signed_rank_null_pmf
from fasteval.types.stats import mcnemar_from_counts, paired_bootstrap_ci

try:
    import scipy.stats as sps
except ImportError:  # the test extra installs it; without it only the reference checks skip
    sps = None
needs_scipy = pytest.mark.skipif(sps is None, reason="scipy not installed (pip install -e .[test])")
ARM_1 = "fasteval.testing.bernoulli:arm_1"


# -- statistics against scipy / statsmodels ----------------------------------------------------------
@needs_scipy
def test_mcnemar_exact_matches_scipy_binomtest_on_random_counts():
    rng = np.random.default_rng(0)
    for b, c in rng.integers(0, 60, size=(60, 2)):
        ours = mcnemar_from_counts(int(b), int(c), exact=True)["p_value"]
        ref = 1.0 if b + c == 0 else sps.binomtest(int(b), int(b + c), 0.5).pvalue
        assert math.isclose(ours, ref, rel_tol=1e-9, abs_tol=1e-12), (b, c)


@needs_scipy
def test_paired_bootstrap_matches_scipy_bootstrap():
    """Same resampling scheme (pairs resampled together, percentile interval); different random
    streams, so the bounds agree to a small fraction of the interval width."""
    rng = np.random.default_rng(1)
    for n in (30, 200):
        a = rng.normal(0, 1, n)
        b = a + rng.normal(0.3, 1, n)
        ours = paired_bootstrap_ci(b, a, n_boot=20000)
        ref = sps.bootstrap((b, a), lambda x, y: np.mean(x - y), paired=True, vectorized=False, n_resamples=20000,
                            method="percentile", random_state=np.random.default_rng(2)).confidence_interval
        width = ref.high - ref.low
        assert abs(ours["ci"][0] - ref.low) < 0.05 * width and abs(ours["ci"][1] - ref.high) < 0.05 * width
        assert math.isclose(ours["mean_diff"], float(np.mean(b - a)))


@needs_scipy
@pytest.mark.parametrize("n", [1, 4, 11, 25, 50, 120])
def test_signed_rank_exact_matches_scipy(n):
    rng = np.random.default_rng(n)
    a = rng.normal(size=n)
    b = a + rng.normal(0.3, 1, size=n)
    ours = signed_rank(a, b)
    ref = sps.wilcoxon(b, a, method="exact")
    assert ours["method"] == "exact"
    assert math.isclose(ours["p_value"], ref.pvalue, rel_tol=1e-9) and ours["statistic"] == ref.statistic


@needs_scipy
def test_signed_rank_with_ties_and_zeros_matches_scipy_normal_approximation():
    rng = np.random.default_rng(3)
    for _ in range(10):
        a = rng.integers(0, 6, 90).astype(float)
        b = rng.integers(0, 7, 90).astype(float)
        ours = signed_rank(a, b)
        ref = sps.wilcoxon(b, a, method="asymptotic", correction=False)
        assert ours["method"].startswith("normal")
        assert math.isclose(ours["p_value"], ref.pvalue, rel_tol=1e-9) and ours["statistic"] == ref.statistic


def test_signed_rank_null_distribution_by_hand():
    # n = 3: subsets of {1,2,3} by sum: 0:{}, 1:{1}, 2:{2}, 3:{3},{1,2}, 4:{1,3}, 5:{2,3}, 6:{1,2,3}
    assert np.allclose(signed_rank_null_pmf(3) * 8, [1, 1, 1, 2, 1, 1, 1])
    assert signed_rank([1, 2], [1, 2])["p_value"] == 1.0


def test_holm_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(4)
    for m in (1, 2, 5, 12):
        p = rng.random(m) ** 3
        assert np.allclose(holm(p), multitest.multipletests(p, method="holm")[1])
    assert np.isnan(holm([0.01, np.nan])[1]) and holm([0.01, np.nan])[0] == 0.01


def test_prob_improvement_by_hand():
    out = prob_improvement([0, 1, 2, 3], [1, 1, 0, 5])
    assert out["value"] == (1 + 0.5 + 0 + 1) / 4
    assert out["ci"][0] <= out["value"] <= out["ci"][1]


def test_verdicts_holm_and_gate():
    rng = np.random.default_rng(5)
    base = rng.random(400) < 0.7
    worse = base & (rng.random(400) < 0.8)  # B loses ~14 points, never gains
    t_worse = compare_task(base, worse, base.astype(float), worse.astype(float))
    t_same = compare_task(base, base, base.astype(float), base.astype(float))
    overall = finish([t_worse, t_same], fail_if_worse=True)
    assert t_worse["verdict"] == "worse" and t_same["verdict"] == "no difference"
    assert t_worse["p_holm"] == min(1.0, 2 * t_worse["success"]["p_value"])  # smallest of two: times 2
    assert overall["verdict"] == "worse" and overall["exit_code"] == 3
    assert finish([compare_task(base, base, base.astype(float), base.astype(float))], fail_if_worse=True)["exit_code"] == 0
    # non-inferiority: equal policies are non-inferior within 10 points, the regression is not
    ni = compare_task(base, base, base, base, margin=0.1)["non_inferiority"]
    assert ni["non_inferior"] and ni["p_value"] < 0.05 and ni["method"].startswith("exact unconditional")
    assert not compare_task(base, worse, base, worse, margin=0.05)["non_inferiority"]["non_inferior"]


# -- run folders ------------------------------------------------------------------------------------------
def _run(tmp_path, name, policy, n=300, seed=0, **env_kwargs):
    from fasteval import evaluate

    kwargs = {"p": [0.7, 0.8], **env_kwargs}
    result = evaluate(env=BERNOULLI_ENV, env_kwargs=kwargs, policy=policy, n_episodes=n, seed=seed, batch_size=16, device="cpu")
    folder = tmp_path / name
    folder.mkdir()
    result.to_json(folder / "eval_info.json")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return {"good": _run(tmp, "good", ARM_1), "good2": _run(tmp, "good2", ARM_1), "bad": _run(tmp, "bad", "zero"),
            "other_env": _run(tmp, "other_env", ARM_1, coupling="independent"), "other_seed": _run(tmp, "other_seed", ARM_1, seed=10_000)}


def _compare(*args):
    return CliRunner().invoke(compare, [str(a) for a in args], catch_exceptions=False)


def test_planted_regression_exits_3_and_equal_pair_exits_0(runs, tmp_path):
    out = _compare(runs["good"], runs["bad"], "--fail-if-worse", "-o", tmp_path / "r")
    assert out.exit_code == 3, out.output
    doc = json.loads((tmp_path / "r" / "compare.json").read_text())
    task = doc["tasks"][0]
    # shared coupling: arm 1 (0.8) succeeds on every seed arm 0 (0.7) does, so every discordant pair is A's
    exp_a = [expected_bernoulli_episode(s, [0.7, 0.8], 1)["success"] for s in range(300)]
    exp_b = [expected_bernoulli_episode(s, [0.7, 0.8], 0)["success"] for s in range(300)]
    assert task["success"]["a_successes"] == sum(exp_a) and task["success"]["b_successes"] == sum(exp_b)
    assert task["success"]["only_b"] == 0 and task["success"]["only_a"] == sum(exp_a) - sum(exp_b)
    assert task["verdict"] == "worse" and doc["overall"]["exit_code"] == 3
    assert "worse" in out.output and (tmp_path / "r" / "compare.md").read_text().startswith("## Comparison: B vs A")
    page = (tmp_path / "r" / "compare.html").read_text()  # the comparison's HTML page (issue 24)
    assert "worse" in page and page.lstrip().lower().startswith("<!doctype html")
    same = _compare(runs["good"], runs["good2"], "--fail-if-worse", "-o", tmp_path / "s")
    assert same.exit_code == 0, same.output
    assert json.loads((tmp_path / "s" / "compare.json").read_text())["tasks"][0]["verdict"] == "no difference"
    better = _compare(runs["bad"], runs["good"], "--fail-if-worse", "-o", tmp_path / "b")
    assert better.exit_code == 0 and "better" in better.output


def test_compare_says_which_folder_it_wrote_into(runs, tmp_path, monkeypatch):
    """The default folder is the current one; the last line names it (absolute), and -o names its own (issue 42)."""
    monkeypatch.chdir(tmp_path)
    out = _compare(runs["good"], runs["good2"])
    assert out.exit_code == 0, out.output
    last = out.output.strip().splitlines()[-1]
    assert last == f"wrote compare.json, compare.md, compare.html in {tmp_path.resolve()} (the current folder; -o DIR writes them elsewhere)"
    assert all((tmp_path / n).is_file() for n in ("compare.json", "compare.md", "compare.html"))
    out = _compare(runs["good"], runs["good2"], "-o", "sub")
    assert out.output.strip().splitlines()[-1] == f"wrote compare.json, compare.md, compare.html in {(tmp_path / 'sub').resolve()}"


def test_margin_gate(runs, tmp_path):
    out = _compare(runs["good"], runs["good2"], "--fail-if-worse", "--margin", "0.05", "-o", tmp_path)
    assert out.exit_code == 0
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["overall"]["non_inferior"] is True and doc["margin"] == 0.05
    out = _compare(runs["good"], runs["bad"], "--fail-if-worse", "--margin", "0.02", "-o", tmp_path)
    assert out.exit_code == 3


@pytest.mark.parametrize("other, needle", [("other_env", "not paired"), ("other_seed", "share no episode")])
def test_unpaired_runs_are_refused(runs, tmp_path, other, needle):
    out = _compare(runs["good"], runs[other], "-o", tmp_path)
    assert out.exit_code == 2 and needle in out.output
    assert not (tmp_path / "compare.json").exists()


def test_bad_arguments_exit_2(runs, tmp_path):
    assert _compare(runs["good"], "-o", tmp_path).exit_code == 2
    missing = _compare(runs["good"], tmp_path / "nope", "-o", tmp_path)
    assert missing.exit_code == 2 and "not a folder" in missing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "neither eval_info.json" in _compare(runs["good"], empty, "-o", tmp_path).output


@pytest.mark.parametrize("option, value", [("--margin", "nan"), ("--margin", "inf"), ("--alpha", "nan"),
                                           ("--confidence", "nan")])
def test_non_finite_numbers_exit_2(runs, tmp_path, option, value):
    """``nan`` passes click's FloatRange (every comparison with NaN is false): it was accepted as a margin."""
    out = _compare(runs["good"], runs["good"], option, value, "-o", tmp_path)
    assert out.exit_code == 2 and "not a finite number" in out.output, out.output
    assert not (tmp_path / "compare.json").exists()


def test_run_log_of_an_unfinished_run_compares_like_its_eval_info(runs, tmp_path):
    """A folder with episodes.jsonl + manifest.json (no eval_info.json) pairs by the same rules."""
    from fasteval.run.rundir import RunDirectory, format_records

    info = json.loads((runs["bad"] / "eval_info.json").read_text())
    folder = tmp_path / "partial"
    run = RunDirectory(folder)
    run.open_logs()
    run.append_episode_text(format_records(info["per_episode"][:120]))
    run.close()
    run.write_manifest({"spec": {k: info["meta"][k] for k in ("env", "env_kwargs", "policy", "seed")}, "status": "interrupted"})
    doc = build_document(load_side(str(runs["good"]), "A"), load_side(str(folder), "B"))
    task = doc["tasks"][0]
    assert task["n_pairs"] == 120 and task["unpaired_a"] == 180 and task["unpaired_b"] == 0
    assert "## Comparison" in render_markdown(doc)


def test_sweep_cells(tmp_path):
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep

    spec = {"name": "c", "episodes": 80, "seeds": [0],
            "policies": [{"name": "base", "ref": ARM_1}, {"name": "cand", "ref": "zero"}],
            "envs": [{"name": "coin", "id": BERNOULLI_ENV, "kwargs": {"p": [0.7, 0.8]}}],
            "options": {"batch_size": 8, "device": "cpu"}}
    out = tmp_path / "sweep"
    assert run_sweep(SweepSpec.from_dict(spec), out, executor=LocalExecutor(workers=1)).ok
    res = _compare(f"{out}::base", f"{out}::cand::coin", "--fail-if-worse", "-o", tmp_path)
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["tasks"][0]["n_pairs"] == 80 and doc["tasks"][0]["success"]["only_b"] == 0
    exp = sum(expected_bernoulli_episode(s, [0.7, 0.8], 1)["success"] - expected_bernoulli_episode(s, [0.7, 0.8], 0)["success"] for s in range(80))
    assert doc["tasks"][0]["success"]["only_a"] == exp
    assert res.exit_code == (3 if doc["overall"]["any_worse"] else 0)
    assert "no episodes of policy" in _compare(f"{out}::nobody", f"{out}::cand", "-o", tmp_path).output


# -- live comparison ----------------------------------------------------------------------------------------
LIVE = ["--env", BERNOULLI_ENV, "--env-kwarg", "p=[0.55,0.85]", "--env-kwarg", "coupling=independent"]


def _live(tmp_path, a, b, *extra):
    out = _compare("--policy-a", a, "--policy-b", b, *LIVE, *extra, "-o", tmp_path)
    return out, json.loads((tmp_path / "compare.json").read_text())


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_live_stop_when_decided_gives_the_same_k_at_any_batch_size(tmp_path, batch):
    out, doc = _live(tmp_path, ARM_1, "zero", "-n", "600", "--stop-when", "decided", "-b", str(batch), "--fail-if-worse")
    seq = doc["sequential"]
    # independent coupling, 0.85 vs 0.55: the exact outcomes, fed in index order, fix k
    from fasteval.types.sequential import PairedEProcess
    from fasteval.types.sequential.eprocess import discordant_outcomes

    a = [expected_bernoulli_episode(s, [0.55, 0.85], 1, "independent")["success"] for s in range(600)]
    b = [expected_bernoulli_episode(s, [0.55, 0.85], 0, "independent")["success"] for s in range(600)]
    e = PairedEProcess(0.95)
    k = e.update(discordant_outcomes(a, b))
    assert k is not None and seq["k"] == k and seq["decision"] == "worse" == e.verdict and seq["reason"] == "rule"
    assert doc["tasks"][0]["n_pairs"] == k and doc["tasks"][0]["verdict"] == "worse"
    assert doc["tasks"][0]["verdict_basis"] == "e-process" and out.exit_code == 3
    assert math.isclose(seq["e_value_worse"], e.e_worse) and seq["trajectory"]["k"][-1] == k
    assert all(i >= k for i in seq["computed_past_stop"])
    assert doc["tasks"][0]["success"]["a_successes"] == sum(a[:k])


def test_live_equal_policies_run_to_the_cap_and_pass_the_gate(tmp_path):
    out, doc = _live(tmp_path, ARM_1, ARM_1, "-n", "120", "--stop-when", "decided", "-b", "16", "--fail-if-worse")
    assert out.exit_code == 0, out.output
    seq = doc["sequential"]
    assert seq["reason"] == "cap" and seq["k"] == 120 and seq["decision"] is None
    assert doc["tasks"][0]["verdict"] == "no difference" and doc["tasks"][0]["success"]["n_discordant"] == 0


def test_live_without_a_rule_runs_n_pairs_and_uses_the_fixed_n_tests(tmp_path):
    out, doc = _live(tmp_path, ARM_1, "zero", "-n", "200", "-b", "16")
    assert doc["sequential"] is None and doc["tasks"][0]["n_pairs"] == 200
    assert doc["tasks"][0]["verdict_basis"] == "holm" and doc["mode"] == "live"


def test_live_bad_options_exit_2(tmp_path):
    assert "needs --policy-a" in _compare("--policy-a", ARM_1, *LIVE, "-o", tmp_path).output
    out = _compare("--policy-a", ARM_1, "--policy-b", "zero", *LIVE, "--stop-when", "above=0.8", "-o", tmp_path)
    assert out.exit_code == 2 and "'decided'" in out.output
