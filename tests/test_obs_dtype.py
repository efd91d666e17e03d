"""Observations of another dtype (``--obs-dtype``): float observations cast to the policy's dtype.

The known-answer env with float64 observations (``KnownAnswerFloat64Env``) makes the main test run
everywhere; the MuJoCo test runs where ``gymnasium[mujoco]`` is installed.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from fasteval import evaluate
from fasteval.doors.cli import main
from fasteval.run.config import spec_from_config
from fasteval.types.errors import PolicyDryRunError, UserInputError
from fasteval.robot.policies.obs_dtype import ObservationCast, build_obs_cast, policy_float_dtype, resolve_obs_dtype
from fasteval.types.spec import EvalSpec
from fasteval.doors.sweep.spec import SweepOptions
from fasteval.testing.envs import KnownAnswerFloat64Env, expected_episode

KA64 = "fasteval.testing.envs:make_known_answer_float64_env"
KA32 = "fasteval.testing.envs:make_known_answer_env"
DTYPE_ERROR = "mat1 and mat2 must have the same dtype"


class LinearParity(nn.Module):
    """A one-layer float MLP that picks the parity bit: logits ``[-x2, x2]`` -> argmax. No casts inside."""

    def __init__(self, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.layer = nn.Linear(3, 2, dtype=dtype)
        with torch.no_grad():
            self.layer.weight.copy_(torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]]))
            self.layer.bias.zero_()
        self.seen: list[torch.dtype] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.dtype)
        return self.layer(obs).argmax(-1)


def parity(obs: np.ndarray) -> int:
    return int(round(float(obs[-1])))


def expected(n: int, seed: int = 0) -> list[tuple[int, float, int]]:
    rows = [expected_episode(seed + i, parity) for i in range(n)]
    return [(r["seed"], r["sum_reward"], r["length"]) for r in rows]


def got(result) -> list[tuple[int, float, int]]:
    return [(r["seed"], r["sum_reward"], r["length"]) for r in result.per_episode]


def test_float64_env_observations_are_float64():
    env = KnownAnswerFloat64Env()
    obs, _ = env.reset(seed=5)
    assert obs.dtype == np.float64 and env.observation_space.dtype == np.float64
    assert np.array_equal(obs, np.array([5 / 97, 0.0, 1.0], dtype=np.float32).astype(np.float64))


@pytest.mark.parametrize("batch_size", [1, 3])
def test_float32_policy_on_float64_observations_gives_the_known_answers(batch_size):
    policy = LinearParity()
    result = evaluate(env=KA64, policy=policy, n_episodes=7, batch_size=batch_size, seed=3, device="cpu")
    assert got(result) == expected(7, seed=3)
    assert set(policy.seen) == {torch.float32}


def test_keep_gives_the_dtype_error_on_the_dry_run():
    with pytest.raises(PolicyDryRunError, match=DTYPE_ERROR):
        evaluate(env=KA64, policy=LinearParity(), n_episodes=2, device="cpu", obs_dtype="keep")


def test_explicit_float64_for_a_float64_policy_on_float32_observations():
    policy = LinearParity(torch.float64)
    result = evaluate(env=KA32, policy=policy, n_episodes=5, batch_size=2, device="cpu", obs_dtype="float64")
    assert got(result) == expected(5)
    assert set(policy.seen) == {torch.float64}
    auto = LinearParity(torch.float64)  # auto reads the policy's dtype too
    assert got(evaluate(env=KA32, policy=auto, n_episodes=5, batch_size=2, device="cpu")) == expected(5)
    with pytest.raises(PolicyDryRunError, match=DTYPE_ERROR):
        evaluate(env=KA32, policy=LinearParity(torch.float64), n_episodes=2, device="cpu", obs_dtype="keep")


def test_resolution_rules():
    assert policy_float_dtype(LinearParity()) == torch.float32
    assert policy_float_dtype(LinearParity(torch.float64)) == torch.float64
    assert policy_float_dtype(nn.ReLU()) is None  # no parameters
    assert policy_float_dtype(object()) is None  # a select_action object
    assert resolve_obs_dtype("keep", LinearParity()) is None
    assert resolve_obs_dtype("auto", nn.ReLU()) is None
    assert resolve_obs_dtype("float64", nn.ReLU()) == torch.float64
    f32 = torch.zeros(2, 3)
    assert build_obs_cast("auto", LinearParity(), f32) is None  # nothing to cast: no stage, no cost
    assert build_obs_cast("auto", LinearParity(), f32.double()) is not None
    assert build_obs_cast("keep", LinearParity(), f32.double()) is None
    with pytest.raises(UserInputError, match="obs_dtype: expected"):
        EvalSpec(env="CartPole-v1", obs_dtype="int8")


def test_cast_writes_into_one_buffer_and_leaves_integers_alone():
    from tensordict import TensorDict

    src = TensorDict({"pixels": torch.zeros(2, 4, 4, 3, dtype=torch.uint8), "state": torch.zeros(2, 3, dtype=torch.float64),
                      "ready": torch.zeros(2, 3, dtype=torch.float32)}, batch_size=[2])
    out, steps = ObservationCast(torch.float32).build(src)
    assert out["pixels"] is src["pixels"] and out["ready"] is src["ready"]  # shared, not copied
    assert out["state"].dtype == torch.float32 and len(steps) == 1
    ptr = out["state"].data_ptr()
    for value in (1.25, -3.5):
        src["state"].fill_(value)
        for step in steps:
            step()
        assert out["state"].data_ptr() == ptr and torch.equal(out["state"], torch.full((2, 3), value))
    same, none = ObservationCast(torch.float32).build(src.exclude("state"))
    assert none == [] and same is not None


class DictObsEnv(gym.Env):
    """uint8 image + float64 state; one step per episode."""

    observation_space = gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8),
                                         "state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"pixels": np.full((4, 4, 3), 7, np.uint8), "state": np.full(3, 0.5)}, {}

    def step(self, action):
        obs, _ = self.reset()
        return obs, 1.0, True, False, {}


def make_dict_env():
    return DictObsEnv()


class SeesDtypes(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.seen: list[dict] = []

    def forward(self, obs):
        self.seen.append({k: obs[k].dtype for k in obs.keys()})
        return torch.zeros(obs.batch_size[0], dtype=torch.long)


def test_raw_dict_observations_keep_uint8_images():
    from fasteval.doors.suites import Task, run_suite  # noqa: F401  (callable envs go through the suite registry)

    policy = SeesDtypes()
    result = run_suite({"g": {0: make_dict_env}}, policy=policy, n_episodes=2, batch_size=2, device="cpu")
    assert len(result.per_episode) == 2
    assert policy.seen and all(s == {"pixels": torch.uint8, "state": torch.float32} for s in policy.seen)


def test_cli_obs_dtype_default_auto_keep_and_bad_value(tmp_path):
    runner = CliRunner()
    base = ["--policy", "tests.test_obs_dtype:LinearParity", "--env", KA64, "-n", "4", "-b", "2", "--device", "cpu"]
    ok = runner.invoke(main, [*base, "-o", str(tmp_path / "auto")])
    assert ok.exit_code == 0, ok.output
    keep = runner.invoke(main, [*base, "--obs-dtype", "keep", "-o", str(tmp_path / "keep")])
    assert keep.exit_code == 2 and DTYPE_ERROR in keep.output, keep.output
    bad = runner.invoke(main, [*base, "--obs-dtype", "int8", "-o", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--obs-dtype" in bad.output


def test_obs_dtype_in_config_files_and_sweep_options(tmp_path):
    spec, _ = spec_from_config({"env": KA64, "obs_dtype": "float64"})
    assert spec.obs_dtype == "float64"
    assert SweepOptions(obs_dtype="keep").eval_fields()["obs_dtype"] == "keep"
    with pytest.raises(UserInputError, match="obs_dtype"):
        SweepOptions(obs_dtype="half")


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs gymnasium[mujoco]: ./scripts/install.sh mujoco")
def test_float32_mlp_on_mujoco_float64_observations():
    env = gym.make("HalfCheetah-v5")
    assert env.observation_space.dtype == np.float64
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, n_act), nn.Tanh())
    result = evaluate(env="HalfCheetah-v5", policy=mlp, n_episodes=2, batch_size=2, max_steps=5, device="cpu")
    assert [r["length"] for r in result.per_episode] == [5, 5]
    with pytest.raises(PolicyDryRunError, match=DTYPE_ERROR):
        evaluate(env="HalfCheetah-v5", policy=mlp, n_episodes=1, max_steps=5, device="cpu", obs_dtype="keep")
