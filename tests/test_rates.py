"""Speed figures with the precision they need, and what eval_s covers (issue 42).

A LIBERO run printed ``steps_per_s 0`` (the rate was 0.28) and HalfCheetah's page read ``0.0 ep/s``; eval_s left out
the envs' building and workers' start-up without saying so, which lerobot-eval's eval_s includes for lazy async envs.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from fasteval import Evaluator, evaluate
from fasteval.render.words import EVAL_S_MEANING, rate_text

KA = "fasteval/KnownAnswer-v0"


@pytest.mark.parametrize("value, text", [(0.28, "0.28"), (0.2834, "0.283"), (0.00283, "0.00283"), (5.2, "5.2"),
                                         (32.34, "32.3"), (99.94, "99.9"), (100.4, "100"), (16167.4, "16167"),
                                         (0.0, "0"), (math.nan, "n/a"), (None, "n/a")])
def test_rate_text_keeps_three_significant_digits_below_100(value, text):
    assert rate_text(value) == text


def test_rate_text_groups_thousands_for_pages():
    assert rate_text(16167.4, grouping=True) == "16,167" and rate_text(0.28, grouping=True) == "0.28"


def slow(result, eval_s: float):
    return dataclasses.replace(result, eval_s=eval_s)


def test_the_console_shows_a_slow_rate_not_zero():
    from fasteval.doors.cli import format_summary

    result = evaluate(env=KA, policy="zero", n_episodes=2, batch_size=2, device="cpu")
    steps = result.overall()["env_steps"]
    text = format_summary(slow(result, eval_s=steps / 0.28), profile=False)
    lines = dict(line.split(None, 1) for line in text.splitlines())
    assert lines["steps_per_s"] == "0.28"
    assert lines["episodes_per_s"] == rate_text(2 / (steps / 0.28))
    assert lines["setup_s"].endswith("(envs built, env workers started, policy loaded: not in eval_s)")


def test_setup_s_is_in_the_meta_of_an_engines_first_run_only():
    with Evaluator(env=KA, policy="zero", batch_size=2, device="cpu") as ev:
        first = ev.evaluate(n_episodes=2)
        second = ev.evaluate(n_episodes=2)
    assert first.meta["setup_s"] > 0 and second.meta["setup_s"] == 0.0
    for key in ("eval_s", "eval_ep_s", "steps_per_s", "episodes_per_s"):  # the existing fields stay
        assert key in first.overall()


def test_the_run_page_shows_a_slow_rate_and_says_what_eval_s_covers(tmp_path):
    from html import escape

    from fasteval.render.html import write_run_report

    result = evaluate(env=KA, policy="zero", n_episodes=2, batch_size=2, device="cpu")
    slow(result, eval_s=2 / 0.00283).to_json(tmp_path / "eval_info.json")
    page = write_run_report(tmp_path).read_text()
    assert "0.00283 ep/s" in page and "0.0 ep/s" not in page
    assert escape(EVAL_S_MEANING, quote=True) in page or escape(EVAL_S_MEANING) in page
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["meta"]["setup_s"] > 0


def test_the_sweep_page_and_markdown_show_slow_rates():
    from fasteval.render.html.sweep_page import summary
    from fasteval.render.sweep_markdown import _totals_markdown

    totals = {"episodes": 3, "env_steps": 3000, "wall_s": 1000.0, "runs": 1, "engine_s": 999.0,
              "episodes_per_s": 0.003, "steps_per_s": 3.0, "jobs": {"done": 1}}
    assert "0.003 ep/s" in summary({"cells": [], "totals": totals})
    assert "- episodes/s: 0.003; env steps/s: 3" in _totals_markdown(totals)
