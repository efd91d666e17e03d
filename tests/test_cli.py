"""CLI tests with click's CliRunner: happy path, eval_info.json layout, and bad input (exit 2)."""

import json
import math

import pytest
from click.testing import CliRunner

from fasteval.cli import main, parse_env_kwargs
from fasteval.testing import expected_episode

KA = "fasteval/KnownAnswer-v0"


def run(args, **kwargs):
    return CliRunner().invoke(main, args, catch_exceptions=False, **kwargs)


def test_known_answer_run_writes_exact_eval_info(tmp_path):
    result = run(["--env", KA, "--policy", "zero", "-n", "11", "-b", "4", "--seed", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert set(info) >= {"per_episode", "per_task", "per_group", "overall"}
    expected = [expected_episode(3 + i) for i in range(11)]
    got = info["per_episode"]
    assert [e["episode_ix"] for e in got] == list(range(11))
    for record, exp in zip(got, expected):
        for key in ("seed", "sum_reward", "max_reward", "length", "success"):
            assert record[key] == exp[key], (key, record, exp)
    overall = info["overall"]
    assert overall["n_episodes"] == 11
    assert overall["avg_sum_reward"] == pytest.approx(sum(e["sum_reward"] for e in expected) / 11)
    assert overall["pc_success"] == pytest.approx(100 * sum(e["success"] for e in expected) / 11)
    for key in ("avg_max_reward", "eval_s", "eval_ep_s", "env_steps", "steps_per_s", "episodes_per_s"):
        assert key in overall
    assert info["per_group"][KA]["n_episodes"] == 11
    assert info["per_task"][0]["metrics"]["sum_rewards"] == [e["sum_reward"] for e in expected]
    assert "avg_sum_reward" in result.output


def test_env_kwargs_are_parsed_as_json(tmp_path):
    result = run(["--env", KA, "-n", "4", "--seed", "0", "--env-kwarg", "nan_reward_seeds=[2]", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert math.isnan(info["per_episode"][2]["sum_reward"])
    assert info["overall"]["n_nan_reward_episodes"] == 1
    assert "NaN-reward episodes" in result.output


def test_parse_env_kwargs():
    assert parse_env_kwargs(("a=1", "b=[1, 2]", "c=hello", "d=true", "e={\"x\": 1}")) == {
        "a": 1, "b": [1, 2], "c": "hello", "d": True, "e": {"x": 1}}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--env", "CartPoel-v1"], "Did you mean"),
        (["--env", "nosuchplugin_xyz/Thing-v0"], "pip install nosuchplugin-xyz"),
        (["--env", KA, "--policy", "no/such/folder"], "expected 'zero', 'random'"),
        (["--env", KA, "--policy", "fasteval.testing.policies:NoSuchThing"], "has no attribute"),
        (["--env", KA, "--policy", "some/file.py:make"], "--trust-remote-code"),
        (["--env", KA, "--env-kwarg", "novalue"], "key=value"),
        (["--env", KA, "-n", "0"], "0"),
        (["--env", KA, "--vectorization", "threads"], "threads"),
        (["--env", KA, "--env-kwarg", "bogus_kwarg=1"], "bogus_kwarg"),
    ],
)
def test_bad_input_exits_2_with_a_message(args, needle, tmp_path):
    result = CliRunner().invoke(main, [*args, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


def test_action_shape_mismatch_names_both_shapes(tmp_path):
    # CartPole has Discrete(2) actions; a 3-logit module does not fit.
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "tests.helpers:three_logits", "-b", "4", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "(4, 3)" in result.output and "(4, 2)" in result.output


def test_policy_that_raises_on_dry_run_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "tests.helpers:raising_policy", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "dry run" in result.output


def test_help_documents_defaults():
    result = run(["--help"])
    assert result.exit_code == 0
    assert "sync" in result.output and "default" in result.output
