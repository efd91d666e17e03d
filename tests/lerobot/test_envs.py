"""LeRobot env types built by LeRobot's own env config and factory (fasteval.robot.lerobot.envs)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402
from fasteval.robot.lerobot.envs import ENV_REF, FlattenNested, env_config, prepare_libero  # noqa: E402


def test_act_on_lerobot_built_pusht_matches_lerobot_eval(act_checkpoint: Path) -> None:
    """Raw env observations through LeRobot's preprocess_observation: the exact route."""
    from fasteval.robot.lerobot.reference import lerobot_eval

    theirs = lerobot_eval(act_checkpoint, n_episodes=3, batch_size=3, seed=7, episode_length=40)["per_episode"]
    ours = evaluate(env=ENV_REF, env_kwargs={"type": "pusht", "episode_length": 40}, policy=str(act_checkpoint),
                    n_episodes=3, batch_size=3, seed=7, device="cpu", reset_mode="wave")
    assert [r["length"] for r in ours.per_episode] == [40, 40, 40]
    for a, b in zip(ours.per_episode, theirs):
        assert (a["seed"], a["success"]) == (b["seed"], b["success"])
        assert a["sum_reward"] == pytest.approx(b["sum_reward"], abs=1e-4)
        assert a["max_reward"] == pytest.approx(b["max_reward"], abs=1e-4)


def test_compat_resolves_lerobot_types() -> None:
    from fasteval.doors.compat import resolve_env_type

    env_id, kwargs, _ = resolve_env_type("libero", None)
    assert (env_id, kwargs) == (ENV_REF, {"type": "libero", "task": "libero_10"})
    env_id, kwargs, _ = resolve_env_type("robocasa", "A,B")
    assert (env_id, kwargs) == (ENV_REF, {"type": "robocasa", "task": ["A", "B"]})
    assert resolve_env_type("pusht", None)[0] != ENV_REF  # the table's own entries keep their route
    with pytest.raises(ValueError, match="any LeRobot env type"):
        resolve_env_type("no_such_type", None)


def test_libero_config_without_a_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(tmp_path / "libero"))
    monkeypatch.setenv("FASTEVAL_LIBERO_ASSETS", str(tmp_path / "assets"))
    config = env_config("libero", task="libero_spatial", task_id=3, obs_type="pixels_agent_pos")
    assert (config.task, config.task_ids, config.type) == ("libero_spatial", [3], "libero")
    written = (tmp_path / "libero" / "config.yaml").read_text()
    assert f"assets: {tmp_path / 'assets'}\n" in written
    for key in ("benchmark_root", "bddl_files", "init_states", "datasets"):
        assert f"{key}: " in written
    (tmp_path / "libero" / "config.yaml").write_text("assets: mine\n")
    assert prepare_libero() == tmp_path / "libero" / "config.yaml"  # an existing file is kept
    assert (tmp_path / "libero" / "config.yaml").read_text() == "assets: mine\n"


class _TwoCameras(gym.Env):
    observation_space = gym.spaces.Dict({
        "pixels": gym.spaces.Dict({"top": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                                   "wrist": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)}),
        "agent_pos": gym.spaces.Box(-1, 1, (3,), np.float64),
    })
    action_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}


def test_nested_cameras_flatten_and_reach_lerobot_keys() -> None:
    from lerobot.envs.utils import preprocess_observation
    from tensordict import TensorDict

    from fasteval.robot.lerobot.policy import lerobot_batch

    env = FlattenNested(_TwoCameras())
    assert sorted(env.observation_space.spaces) == ["agent_pos", "pixels/top", "pixels/wrist"]
    raw = _TwoCameras.observation_space.sample()
    flat = env.observation(raw)
    td = TensorDict({k: torch.from_numpy(np.asarray(v)[None]) for k, v in flat.items()}, batch_size=[1])
    ours = lerobot_batch(td)
    theirs = preprocess_observation({"pixels": {k: v[None] for k, v in raw["pixels"].items()},
                                     "agent_pos": raw["agent_pos"][None]})
    assert sorted(ours) == sorted(theirs) == ["observation.images.top", "observation.images.wrist", "observation.state"]
    for key in ours:
        assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key])


@pytest.fixture
def libero_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LIBERO's config in a temporary folder (no question, nothing written under the home folder)."""
    import importlib.util

    if importlib.util.find_spec("libero") is None:  # not imported here: its import would ask a question
        pytest.skip("hf-libero is not installed")
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(tmp_path / "libero"))
    prepare_libero()


def test_libero_suite_expands_to_its_task_ids_from_one_command(libero_config: None) -> None:
    """--env.type=libero --env.task=libero_spatial: LeRobot's suite of 10 tasks (group libero_spatial, ids 0..9),
    each one env config with task_ids=[i]. Everything short of building or stepping an env (no assets here)."""
    from libero.libero import benchmark

    from fasteval.doors.compat import resolve_env_type
    from fasteval.types.spec import EvalSpec
    from fasteval.doors.suites import suite_from_spec

    env_id, kwargs, _ = resolve_env_type("libero", "libero_spatial")
    suite = suite_from_spec(EvalSpec(env=env_id, env_kwargs=kwargs))
    names = benchmark.get_benchmark_dict()["libero_spatial"]().get_task_names()
    assert list(suite) == ["libero_spatial"] and list(suite["libero_spatial"]) == list(range(10)) and len(names) == 10
    for task_id, task in suite["libero_spatial"].items():
        assert task.env == ENV_REF and task.name == names[task_id]
        assert dict(task.env_kwargs) == {"type": "libero", "task": "libero_spatial", "task_id": task_id}
        config = env_config(**task.env_kwargs)
        assert (config.task, config.task_ids) == ("libero_spatial", [task_id])


def test_libero_suites_task_ids_and_errors(libero_config: None) -> None:
    from fasteval.types.errors import UserInputError
    from fasteval.robot.lerobot.envs import suite_tasks

    tasks = suite_tasks("libero", "libero_spatial,libero_object", task_ids=[3, 1, 3])
    assert [(g, i) for g, i, _, _ in tasks] == [("libero_spatial", 1), ("libero_spatial", 3),
                                                ("libero_object", 1), ("libero_object", 3)]  # LeRobot's order
    assert suite_tasks("libero", "libero_spatial", task_id=2) is None  # one task: the plain single-env path
    with pytest.raises(UserInputError, match=r"task ids \[10\] out of range.*ids 0\.\.9"):
        suite_tasks("libero", "libero_spatial", task_ids=[10])
    with pytest.raises(UserInputError, match="unknown --env.task 'libero_spatail'; expected one of .*libero_spatial"):
        suite_tasks("libero", "libero_spatail")


def test_a_hub_env_type_is_refused_by_the_env_itself():
    """A file may name fasteval's env constructor without --trust-remote-code (fasteval.types.trust): the constructor
    itself refuses LeRobot's hub env types, whose code LeRobot would download and run."""
    from fasteval.robot.lerobot.envs import env_config
    from fasteval.types.errors import UserInputError

    with pytest.raises(UserInputError, match="fasteval runs no hub code"):
        env_config("isaaclab_arena")


def test_the_docs_own_spelling_without_a_task_runs_the_types_default_task(tmp_path: Path) -> None:
    """docs/lerobot.md's ``--env fasteval.robot.lerobot.envs:make_env --env-kwarg type=pusht ...`` (no task) runs
    PushT-v0 (issue 42: a traceback, ``suite_tasks() missing 1 required positional argument: 'task'``); without
    ``type`` the command says what to give (exit 2)."""
    import json

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--policy", "zero", "--env", ENV_REF, "--env-kwarg", "type=pusht",
                                       "--env-kwarg", "episode_length=5", "-n", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert [(r["task_group"], r["task"], r["length"]) for r in info["per_episode"]] == [("pusht", "PushT-v0", 5)] * 2
    missing = CliRunner().invoke(main, ["--policy", "zero", "--env", ENV_REF, "-n", "2", "-o", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "--env-kwarg type=<type>" in missing.output, missing.output
    assert "Traceback" not in missing.output
