"""Meta-World through LeRobot's env path: a two-task suite from one command, with LeRobot's camera.

With the lerobot extra installed, ``--env.type=metaworld`` is LeRobot's Meta-World (``pixels`` from the
``corner2`` camera, 480x480, and ``agent_pos``), built task by task by LeRobot's factory; the suite has
LeRobot's groups and task ids. In wave mode every episode matches LeRobot's own ``eval_policy_all`` on the
same suite, per task and per seed. Episodes are cut to ``STEPS`` steps on both sides (fasteval:
``--max-steps``, since LeRobot's Meta-World ignores ``--env.episode_length``; LeRobot: the envs'
``_max_episode_steps``, which its rollout reads).
Needs ``MUJOCO_GL=egl`` on a machine without a display.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("metaworld")

from fasteval.robot.lerobot.envs import ENV_REF, suite_tasks  # noqa: E402

TASKS = ["push-v3", "reach-v3"]
STEPS = 8
SEED = 5
TOL = 1e-4


@pytest.fixture(scope="module")
def metaworld_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fasteval.robot.lerobot.testing import write_metaworld_act_checkpoint

    return write_metaworld_act_checkpoint(tmp_path_factory.mktemp("act_metaworld"), seed=0)


def test_env_type_metaworld_is_lerobots_when_lerobot_is_installed() -> None:
    from fasteval.doors.compat import resolve_env_type

    env_id, kwargs, _ = resolve_env_type("metaworld", ",".join(TASKS))
    assert (env_id, kwargs) == (ENV_REF, {"type": "metaworld", "task": TASKS})
    with pytest.raises(ValueError, match="needs --env.task"):  # as the table's: LeRobot's default is a v2 task
        resolve_env_type("metaworld", None)


def test_suite_tasks_follow_lerobots_groups() -> None:
    from lerobot.envs.metaworld import DIFFICULTY_TO_TASKS

    assert suite_tasks("metaworld", TASKS) == [
        ("push-v3", 0, {"type": "metaworld", "task": "push-v3"}, "push-v3"),
        ("reach-v3", 0, {"type": "metaworld", "task": "reach-v3"}, "reach-v3"),
    ]
    easy = suite_tasks("metaworld", "easy", obs_type="pixels_agent_pos")
    expected = [("easy", i, name) for i, name in enumerate(DIFFICULTY_TO_TASKS["easy"])]
    assert [(g, i, name) for g, i, _, name in easy] == expected and len(expected) > 1
    assert all(kw == {"type": "metaworld", "obs_type": "pixels_agent_pos", "task": name} for _, _, kw, name in easy)
    assert suite_tasks("metaworld", "push-v3") is None  # one task: no suite


def test_lerobot_metaworld_env_has_the_camera_and_the_step_limit() -> None:
    from fasteval.robot.lerobot.envs import make_env

    env = make_env(type="metaworld", task="push-v3")
    try:
        assert env.observation_space["pixels"].shape == (480, 480, 3)
        assert env.observation_space["agent_pos"].shape == (4,)
        assert env.spec.max_episode_steps == 500  # LeRobot's rollout limit (_max_episode_steps)
        assert env.unwrapped.task_description == "Push the puck to a goal"
    finally:
        env.close()


def test_two_task_suite_from_the_cli_matches_lerobot_eval(metaworld_act: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fasteval.doors.cli import main
    from fasteval.robot.lerobot.reference import lerobot_eval

    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        f"--policy.path={metaworld_act}", "--env.type=metaworld", f"--env.task={','.join(TASKS)}",
        "--eval.n_episodes=2", "--eval.batch_size=2", f"--max-steps={STEPS}", "--policy.device=cpu", "--videos=0",
        f"--seed={SEED}", f"--output_dir={out}", "--reset-mode", "wave"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]] == [(t, 0, t) for t in TASKS]
    assert sorted(info["per_group"]) == TASKS
    assert all(g["n_episodes"] == 2 and g["avg_length"] == STEPS for g in info["per_group"].values())

    theirs = lerobot_eval(metaworld_act, n_episodes=2, batch_size=2, seed=SEED, env_type="metaworld",
                          task=",".join(TASKS), max_episode_steps=STEPS)["per_task"]
    assert [(t["task_group"], t["task_id"]) for t in theirs] == [(t, 0) for t in TASKS]
    assert any(r["sum_reward"] > 0 for t in theirs for r in t["per_episode"])  # not a comparison of zeros
    for ours, ref in zip(info["per_task"], theirs):
        metrics = ours["metrics"]
        assert metrics["seeds"] == [r["seed"] for r in ref["per_episode"]] == [SEED, SEED + 1]
        for i, row in enumerate(ref["per_episode"]):
            assert metrics["sum_rewards"][i] == pytest.approx(row["sum_reward"], abs=TOL)
            assert metrics["max_rewards"][i] == pytest.approx(row["max_reward"], abs=TOL)
            assert metrics["successes"][i] == row["success"]
    # the two tasks differ (the task kwarg reached each env): reach-v3 pays far more than push-v3 here
    assert info["per_group"]["reach-v3"]["avg_sum_reward"] != info["per_group"]["push-v3"]["avg_sum_reward"]


def test_async_workers_and_continuous_batching_equal_sync_wave(metaworld_act: Path) -> None:
    """LeRobot's Meta-World built in fasteval's worker processes (each with its own EGL context), slots
    refilled at once: the same episodes as a synchronous wave, bit for bit (same batch size)."""
    from fasteval import evaluate

    spec = dict(env=ENV_REF, env_kwargs={"type": "metaworld", "task": "reach-v3"}, policy=str(metaworld_act),
                n_episodes=3, batch_size=2, max_steps=6, device="cpu", seed=11)
    wave = evaluate(**spec, reset_mode="wave")
    continuous = evaluate(**spec, vectorization="async")
    assert (wave.meta["batching"], continuous.meta["batching"]) == ("wave", "continuous")
    assert [r["length"] for r in wave.per_episode] == [6, 6, 6]
    key = ("seed", "sum_reward", "max_reward", "success", "length")
    assert [tuple(r[k] for k in key) for r in continuous.per_episode] == [tuple(r[k] for k in key)
                                                                          for r in wave.per_episode]
