"""TorchRL's plain GymEnv steps its gymnasium env directly (the fast path, issue 42): the same numbers and episode
data as through TorchRL (``FASTEVAL_TORCHRL_NO_FAST_PATH=1``), taken only where no transform can change the
episode. Saved episodes keep the env's own one-hot actions; a replay buffer of another size is a clear error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl.envs")
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402

from fasteval import evaluate  # noqa: E402
from fasteval.robot.torchrl.envs import NO_FAST_PATH, DirectGymEnv, TorchRLGymEnv, adapt_env  # noqa: E402
from fasteval.run.episode_files import load_replay_buffer, save_episodes  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402


def cartpole_actor() -> TensorDictModule:
    lin = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        w = torch.tensor([0.0, 0.0, 1.0, 0.0])
        lin.weight.copy_(torch.stack([-w, w]))
    return TensorDictModule(lin, in_keys=["observation"], out_keys=["action"])


def pendulum_actor() -> TensorDictModule:
    lin = nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[-1.5, 0.7, -0.3]]))
        lin.bias.fill_(0.1)
    return TensorDictModule(nn.Sequential(lin, nn.Tanh()), in_keys=["observation"], out_keys=["action"])


def run(env_id: str, actor, monkeypatch, fast: bool):
    if fast:
        monkeypatch.delenv(NO_FAST_PATH, raising=False)
    else:
        monkeypatch.setenv(NO_FAST_PATH, "1")
    return evaluate(env=lambda: GymEnv(env_id), policy=actor, n_episodes=5, batch_size=2, seed=7,
                    max_steps=60, return_episode_data=True)


def test_the_fast_path_is_taken_only_for_a_plain_gym_env(monkeypatch):
    monkeypatch.delenv(NO_FAST_PATH, raising=False)
    assert isinstance(adapt_env(GymEnv("CartPole-v1"), True), DirectGymEnv)
    assert isinstance(adapt_env(lambda: GymEnv("Pendulum-v1"), False), DirectGymEnv)
    transformed = adapt_env(TransformedEnv(GymEnv("CartPole-v1"), StepCounter()), True)
    assert type(transformed) is TorchRLGymEnv  # a transform may change the episode: stepped through TorchRL
    monkeypatch.setenv(NO_FAST_PATH, "1")
    assert type(adapt_env(GymEnv("CartPole-v1"), True)) is TorchRLGymEnv


@pytest.mark.parametrize("env_id, make_actor", [("CartPole-v1", cartpole_actor), ("Pendulum-v1", pendulum_actor)])
def test_the_fast_path_gives_torchrls_numbers_and_episode_data(monkeypatch, env_id, make_actor):
    actor = make_actor()
    fast, slow = run(env_id, actor, monkeypatch, True), run(env_id, actor, monkeypatch, False)
    assert fast.per_episode == slow.per_episode
    assert len({r["sum_reward"] for r in fast.per_episode}) > 1  # the episodes differ
    a, b = fast.episode_data, slow.episode_data
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def test_saved_episodes_keep_the_envs_one_hot_actions_and_a_wrong_buffer_size_is_explained(monkeypatch, tmp_path):
    data = run("CartPole-v1", cartpole_actor(), monkeypatch, True).episode_data
    reference = GymEnv("CartPole-v1").rollout(3)  # what TorchRL's own rollouts and collectors write
    assert data["action"].shape == (len(data), 2) and data["action"].dtype == reference["action"].dtype
    assert torch.equal(data["action"].sum(-1), torch.ones(len(data), dtype=data["action"].dtype))
    save_episodes(data, tmp_path / "ep")
    assert len(load_replay_buffer(tmp_path / "ep", max_size=len(data) + 10)) == len(data)
    with pytest.raises(UserInputError, match=f"holds {len(data)} steps; expected a max_size of at least"):
        load_replay_buffer(tmp_path / "ep", max_size=len(data) - 1)
