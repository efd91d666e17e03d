"""Every verdict tests the estimand it shows (issue 41): ``fasteval compare``'s verdict on returns, the sweep's
paired verdicts and ``--fail-if-worse`` rest on the paired t-test of the **mean** difference shown with its
t-interval; the signed-rank test and P(B > A) stay as labelled secondary statistics.

The case from the issue: 200 paired episodes, B wins 187 of them by a small margin, A has 13 episodes far
higher. The mean difference's interval includes 0, so the verdict is "no difference" (the signed-rank p is
about 1e-30: it answers "who usually wins", another question), and with A and B swapped ``--fail-if-worse``
passes (exit 0, not 3).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval.doors.compare import compare
from fasteval.types.comparison import compare_task, finish
from fasteval.types.paired import paired_t

N, WINS = 200, 187


def _returns() -> tuple[np.ndarray, np.ndarray]:
    base = 100.0 + np.arange(N, dtype=np.float64) % 17
    a = base.copy()
    b = base + 3.0  # B wins 187 pairs by 3
    a[WINS:] = base[WINS:] + 40.0  # A far higher on 13
    b[WINS:] = base[WINS:]
    return a, b


def test_paired_t_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=40), rng.normal(0.2, 1.0, size=40)
    ours, theirs = paired_t(a, b), stats.ttest_rel(b, a)
    assert ours["p_value"] == pytest.approx(theirs.pvalue, rel=1e-9)
    ci = theirs.confidence_interval(0.95)
    assert ours["ci"] == pytest.approx([ci.low, ci.high], rel=1e-9)
    assert paired_t([1, 2], [1, 2])["p_value"] == 1.0 and paired_t([1, 2], [2, 3])["p_value"] == 0.0


def test_many_small_wins_against_a_few_large_losses_is_no_difference_on_the_mean():
    a, b = _returns()
    task = compare_task(np.zeros(N, bool), np.zeros(N, bool), a, b, has_success=False)
    finish([task])
    r = task["return"]
    assert r["signed_rank_p"] < 1e-20 and r["prob_improvement"] > 0.9  # secondary: B usually wins
    assert r["diff"] == pytest.approx((WINS * 3.0 - (N - WINS) * 40.0) / N)
    assert r["diff_ci"][0] < 0 < r["diff_ci"][1] and r["p_value"] > 0.05
    assert task["verdict"] == "no difference" and "no verdict" in r["secondary"]
    swapped = compare_task(np.zeros(N, bool), np.zeros(N, bool), b, a, has_success=False)
    assert finish([swapped], fail_if_worse=True)["exit_code"] == 0 and swapped["verdict"] == "no difference"


def test_a_real_mean_difference_still_decides():
    a, b = _returns()
    task = compare_task(np.zeros(N, bool), np.zeros(N, bool), a, a - 5.0 + 0.1 * (np.arange(N) % 3),
                        has_success=False)
    assert finish([task], fail_if_worse=True)["exit_code"] == 3 and task["verdict"] == "worse"


def _folder(tmp_path, name, returns):
    from fasteval import evaluate

    result = evaluate(env="CartPole-v1", policy="zero", n_episodes=N, device="cpu")
    doc = json.loads(json.dumps(result.to_eval_info(), default=str))
    for ep, value in zip(doc["per_episode"], returns):
        ep["sum_reward"] = float(value)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "eval_info.json").write_text(json.dumps(doc))
    return folder


def test_the_cli_verdict_and_gate_rest_on_the_mean(tmp_path):
    a, b = _returns()
    fa, fb = _folder(tmp_path, "a", a), _folder(tmp_path, "b", b)
    out = CliRunner().invoke(compare, [str(fa), str(fb), "-o", str(tmp_path / "r")], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "r" / "compare.json").read_text())
    assert doc["tasks"][0]["primary"] == "return" and doc["tasks"][0]["verdict"] == "no difference"
    assert doc["tasks"][0]["return"]["test"].startswith("paired t-test of the mean difference")
    assert "signed-rank p (2nd)" in out.output
    page = (tmp_path / "r" / "compare.html").read_text()
    assert "signed-rank p (secondary)" in page and "t-test p" in page
    swapped = CliRunner().invoke(compare, [str(fb), str(fa), "--fail-if-worse", "-o", str(tmp_path / "s")],
                                 catch_exceptions=False)
    assert swapped.exit_code == 0, swapped.output
    by_max = CliRunner().invoke(compare, [str(fa), str(fb), "--rank-by", "max_reward", "-o", str(tmp_path / "m")],
                                catch_exceptions=False)
    assert by_max.exit_code == 0, by_max.output
    assert json.loads((tmp_path / "m" / "compare.json").read_text())["tasks"][0]["primary"] == "max_reward"
    no_signal = CliRunner().invoke(compare, [str(fa), str(fb), "--rank-by", "success", "-o", str(tmp_path / "x")],
                                   catch_exceptions=False)
    assert no_signal.exit_code == 2 and "no success signal" in no_signal.output


def test_a_live_stop_refuses_a_rank_by_its_test_does_not_decide_on(tmp_path):
    from fasteval.testing.bernoulli import BERNOULLI_ENV

    out = CliRunner().invoke(compare, ["--policy-a", "fasteval.testing.bernoulli:arm_1", "--policy-b", "zero",
                                       "--env", BERNOULLI_ENV, "--env-kwarg", "p=[0.7, 0.8]", "-n", "40",
                                       "--stop-when", "decided", "--rank-by", "return", "-o", str(tmp_path)],
                             catch_exceptions=False)
    assert out.exit_code == 2 and "decides on the success" in out.output
