"""A TorchRL eval env with a running VecNorm (issue 42): the engine evaluates a frozen copy, with a warning, so two
evaluations of the same weights and seeds agree; the caller's env is left running; a VecNorm without statistics is
refused."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl.envs")
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.envs import GymEnv, TransformedEnv, VecNorm  # noqa: E402

from fasteval import Evaluator  # noqa: E402
from fasteval.robot.torchrl.envs import running_vecnorms  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402


def actor() -> TensorDictModule:
    lin = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        w = torch.tensor([0.0, 0.3, 1.0, 0.2])
        lin.weight.copy_(torch.stack([-w, w]))
    return TensorDictModule(lin, in_keys=["observation"], out_keys=["action"])


def normalized_env(warm_steps: int, new_api: bool = True) -> TransformedEnv:
    env = TransformedEnv(GymEnv("CartPole-v1"), VecNorm(in_keys=["observation"], decay=0.9, new_api=new_api))
    if warm_steps:
        env.set_seed(0)
        env.rollout(warm_steps, break_when_any_done=False)  # the "training" statistics
    return env


def lengths(result) -> list[int]:
    return [r["length"] for r in result.per_episode]


@pytest.mark.parametrize("new_api", [True, False], ids=["VecNormV2", "VecNorm"])
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_running_vecnorm_is_frozen_with_a_warning_and_repeats_its_numbers(new_api):
    env = normalized_env(200, new_api)
    with pytest.warns(UserWarning, match="running VecNorm.*frozen"):
        with Evaluator(env=env, policy=actor(), n_episodes=6, batch_size=3, seed=1) as ev:
            first, second = ev.evaluate(), ev.evaluate()
    assert lengths(first) == lengths(second)
    assert running_vecnorms(env)  # the caller's env still runs its statistics
    with pytest.warns(UserWarning, match="running VecNorm"):
        with Evaluator(env=env, policy=actor(), n_episodes=6, batch_size=1, seed=1) as other:
            assert lengths(other.evaluate()) == lengths(first)  # one frozen copy per slot: batch-invariant


def test_a_frozen_vecnorm_gives_no_warning():
    env = normalized_env(200)
    env.transform.freeze()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*VecNorm.*")
        with Evaluator(env=env, policy=actor(), n_episodes=2, batch_size=2, seed=1) as ev:
            ev.evaluate()


def test_a_vecnorm_without_statistics_is_refused():
    with pytest.raises(UserInputError, match="no statistics yet"):
        with Evaluator(env=lambda: normalized_env(0), policy=actor(), n_episodes=2, batch_size=2) as ev:
            ev.evaluate()
