"""The last mile of the LeRobot drop-in (issue 33), with LeRobot installed: ``--policy.<field>`` overrides through
LeRobot's own config classes, and Diffusion's noise under LeRobot's command line. Both are also differential cases
against ``lerobot-eval`` (test_differential.py: ``act-n-action-steps``, ``diffusion-lerobot-noise``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("lerobot")

from fasteval.doors.cli import main  # noqa: E402



def _cli(args: list) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_policy_field_override_is_the_checkpoint_saved_with_that_field(act_checkpoint: Path, tmp_path: Path) -> None:
    """``--policy.n_action_steps=3`` on a checkpoint saved with 10 gives, episode for episode, what the same weights
    saved with 3 give (LeRobot's config class applied it before the policy was built), and other numbers than 10
    (on an env whose every reward depends on the action: ``make_varying_env``); the override is in the manifest
    and the saved config."""
    from fasteval import evaluate
    from fasteval.robot.lerobot.testing import VARYING_ENV_REF, write_act_checkpoint

    out = tmp_path / "run"
    result = _cli([f"--policy.path={act_checkpoint}", "--env", VARYING_ENV_REF, "--obs-format", "lerobot",
                   "--eval.n_episodes=3", "--eval.batch_size=3", "--policy.device=cpu", "--policy.n_action_steps=3",
                   "--seed=0", f"--output_dir={out}"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert json.loads((out / "manifest.json").read_text())["what"]["policy_overrides"] == {"n_action_steps": "3"}
    assert json.loads((out / "config.json").read_text())["policy_overrides"] == {"n_action_steps": "3"}
    spec = dict(env=VARYING_ENV_REF, observation_format="lerobot", n_episodes=3, batch_size=3, seed=0, device="cpu",
                policy_block=3)  # LeRobot's flags call the policy on blocks of the batch size (docs/exactness.md)
    three = write_act_checkpoint(tmp_path / "act3", seed=0, n_action_steps=3)  # the same weights (seed 0)
    saved = evaluate(policy=str(three), **spec)
    ten = evaluate(policy=str(act_checkpoint), **spec)
    ours = [r["sum_reward"] for r in info["per_episode"]]
    assert ours == pytest.approx([r["sum_reward"] for r in saved.per_episode], abs=1e-9)
    assert ours != pytest.approx([r["sum_reward"] for r in ten.per_episode], abs=1e-6)


@pytest.mark.parametrize("field, needle", [("n_action_stepz=3", "unrecognized arguments: --n_action_stepz=3"),
                                           ("n_action_steps=abc", "Couldn't parse 'abc'"),
                                           ("n_action_steps=50", "n_action_steps")])
def test_a_bad_policy_field_gets_lerobots_error_before_any_env_is_built(act_checkpoint: Path, tmp_path: Path,
                                                                        field: str, needle: str) -> None:
    out = tmp_path / "run"
    result = _cli([f"--policy.path={act_checkpoint}", "--env.type=pusht", "--eval.n_episodes=1",
                   f"--policy.{field}", f"--output_dir={out}"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and needle in errors[0] and "Traceback" not in result.output
    assert not out.exists()  # refused before the run folder (or an env) was made


def test_diffusion_under_lerobots_command_line_runs_with_lerobots_noise(diffusion_checkpoint: Path,
                                                                        tmp_path: Path) -> None:
    result = _cli([f"--policy.path={diffusion_checkpoint}", "--env.type=pusht", "--eval.n_episodes=2",
                   "--eval.batch_size=2", "--env.episode_length=4", "--policy.device=cpu", "--print-config"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["noise"], doc["reset_mode"]) == ("global", "wave")
    assert sum("--noise episode" in line for line in result.stderr.splitlines()) == 1
    native = _cli(["--policy", diffusion_checkpoint, "--env", "gym_pusht/PushT-v0", "--print-config"])
    assert native.exit_code == 0 and json.loads(native.stdout)["noise"] == "episode"
