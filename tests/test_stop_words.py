"""What a stopped run says (issue 41): an anytime ``above=T`` run that stops for futility says "surely not above
T" (no claim), and a ``--design truncated`` run that claims prints the design's exact bound beside the
anytime-valid interval, labelled wider than the test that decided."""

from __future__ import annotations

import json

from fasteval.testing.bernoulli import BERNOULLI_ENV
from tests.report_fixtures import cli


def _run(tmp_path, p, *extra):
    folder = tmp_path / "run"
    out = cli("--env", BERNOULLI_ENV, "--env-kwarg", f"p={p}", "--policy", "fasteval.testing.bernoulli:arm_0",
              "-n", "300", *extra, "-o", str(folder))
    assert out.exit_code == 0, out.output
    return out.output, json.loads((folder / "eval_info.json").read_text())


def test_an_anytime_above_rule_stops_for_futility_and_says_surely_not_above(tmp_path):
    output, info = _run(tmp_path, 0.3, "--stop-when", "above=0.8")
    stop = info["stopping"]
    assert stop["reason"] == "futility" and stop["k"] < 60 and stop["cs_high"] < 0.8
    assert "surely not above 0.8" in output and "no claim" in output


def test_a_truncated_claim_prints_the_designs_bound_and_labels_the_interval(tmp_path):
    output, info = _run(tmp_path, 0.97, "--stop-when", "above=0.8", "--design", "truncated")
    stop = info["stopping"]
    assert stop["reason"] == "rule" and "the design's exact bound of" in stop["decision_bound"]
    assert "the design's exact bound of" in output and "wider than the design's test" in output


def test_the_run_page_says_surely_not_above_and_the_designs_bound(tmp_path):
    from fasteval.render.html.run_page import decision_words

    futile = {"decision": "not_above", "threshold": 0.8, "cs_low": 0.1, "cs_high": 0.7, "k": 20, "reason": "futility",
              "confidence": 0.95, "metric": "success"}
    answer, why, _ = decision_words(futile)
    assert answer.startswith("surely not above") and "futility" in why
    claim = {"decision": "above", "threshold": 0.8, "cs_low": 0.77, "cs_high": 1.0, "k": 33, "reason": "rule",
             "confidence": 0.95, "metric": "success", "fired": True,
             "decision_bound": "31 successes of 33, at or above the design's exact bound of 30 at this look"}
    answer, why, _ = decision_words(claim)
    assert "exact bound of 30" in why and "wider than that test" in why
