"""A raced policy's own page and a return-rule run lead with the interval valid at the stop (issue 41).

The success-rule page already led with the anytime-valid interval and marked Wilson's descriptive; a return rule
showed the bootstrap interval first (the valid one second), and a raced policy's own page showed only the fixed-n
intervals, as if its n had been chosen in advance. Both now lead with the valid interval (the race's is the
ranking's: adjusted for the best of K, or labelled as not) and mark the bootstrap and Wilson intervals descriptive.
"""

from __future__ import annotations

import json
import re

import pytest

from fasteval.testing.checkpoints import CheckpointFamily

from tests.report_fixtures import cli

MLP = "src/fasteval/assets/cartpole_mlp"


def _card(html: str, card_id: str) -> str:
    m = re.search(rf'<div class="card" id="{card_id}"[^>]*>.*?<div class="detail">(.*?)</div></div>', html, re.S)
    assert m, card_id
    return m.group(0)


FAMILY = CheckpointFamily((0.1, 0.9), share=1.0)
RACES = {
    "return": ("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "200", "--stop-when", "best",
               "--rank-by", "return"),
    "success": ("--env", FAMILY.env_ref, "--env-kwarg", "p=[0.1, 0.9]", "--env-kwarg", "share=1.0",
                "--policy", FAMILY.policy(0), "--policy", FAMILY.policy(1), "-n", "200", "--stop-when", "best"),
}


@pytest.mark.parametrize("metric", sorted(RACES))
def test_a_raced_policys_own_page_leads_with_the_races_valid_interval(tmp_path, metric):
    folder = tmp_path / "run"
    out = cli(*RACES[metric], "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    for row in info["ranking"]:
        meta = info["policies"][row["policy"]]["meta"]["race"]
        assert (meta["ci_low"], meta["ci_high"], meta["interval"]) == (row["ci_low"], row["ci_high"], row["interval"])
        own = (folder / "policies" / row["policy"] / "report.html").read_text()
        valid = _card(own, "glance-valid")
        assert own.index('id="glance-valid"') < own.index('id="glance-success"') < own.index('id="glance-return"')
        assert f'data-low="{row["ci_low"]}"' in valid and f'data-high="{row["ci_high"]}"' in valid
        assert "(valid at the race" in valid and "1 - alpha/2" in valid
        assert "descriptive, the race chose this policy" in _card(own, "glance-return")
        if metric == "success":  # Wilson's, as the success-rule page marks it
            assert "Wilson 95% (fixed n: descriptive, the race chose this policy" in _card(own, "glance-success")
            assert "%" in valid.split('class="value">')[1][:12]


def test_a_return_rule_run_leads_with_the_anytime_valid_interval(tmp_path):
    folder = tmp_path / "run"
    out = cli("--env", "CartPole-v1", "--policy", MLP, "-n", "200", "--stop-when", "return:above=100",
              "--return-bounds", "0,500", "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    stopping = info["stopping"]
    assert stopping["metric"] == "return" and stopping["k"] < 200
    detail = _card((folder / "report.html").read_text(), "glance-return")
    lead, rest = detail.split("<br>", 1)
    assert "anytime-valid 95% (valid at the stop)" in lead and "bootstrap" not in lead
    assert "bootstrap" in rest and "descriptive after the stop" in rest
    page = (folder / "report.html").read_text()
    assert "anytime-valid interval at the stop leads" in page
