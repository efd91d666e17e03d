"""TorchRL actors (ProbabilisticActor, TensorDictSequential) under ``exploration`` (fasteval.robot.policies.torchrl_actors):
deterministic by default; random draws per-episode noise, so the numbers stay the same at every batch size."""

from __future__ import annotations

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from click.testing import CliRunner  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402
from torchrl.modules import OneHotCategorical, ProbabilisticActor, TanhNormal  # noqa: E402

from fasteval import Evaluator, evaluate  # noqa: E402
from fasteval.doors.cli import main  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402

N, SEED = 10, 7


def cartpole_actor(scale: float = 1.0) -> ProbabilisticActor:
    """Logits ``scale * [-theta, theta]``: a soft 'push toward the fall' policy (random samples often disagree)."""
    lin = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(scale * torch.tensor([[0.0, 0.0, -1.0, -0.5], [0.0, 0.0, 1.0, 0.5]]))
    logits = TensorDictModule(lin, in_keys=["observation"], out_keys=["logits"])
    return ProbabilisticActor(logits, in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical)


def make_actor() -> ProbabilisticActor:
    """For ``module:callable`` references."""
    torch.manual_seed(0)
    return cartpole_actor(20.0)


def records(result):
    return [(r["episode_ix"], r["seed"], r["length"], r["sum_reward"]) for r in result.per_episode]


def test_deterministic_is_the_default_and_is_the_distributions_mode():
    actor = cartpole_actor(20.0)
    got = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=4, seed=SEED)
    greedy = evaluate(env="CartPole-v1", policy=actor.module[0], n_episodes=N, batch_size=4, seed=SEED)  # argmax of logits
    assert records(got) == records(greedy)
    assert got.meta["exploration"] == "deterministic"


def test_the_exploration_type_is_ours_whatever_the_callers():
    """fasteval sets the type itself: a caller's set_exploration_type(RANDOM) around evaluate changes nothing."""
    actor = cartpole_actor(2.0)
    plain = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=4, seed=SEED)
    with set_exploration_type(ExplorationType.RANDOM):
        inside = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=4, seed=SEED)
    assert records(plain) == records(inside)


@pytest.mark.parametrize("batch_size", [1, 3, N])
def test_random_exploration_is_batch_invariant(batch_size):
    actor = cartpole_actor(2.0)
    got = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=batch_size, seed=SEED, exploration="random")
    one = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=2, seed=SEED, exploration="random")
    assert records(got) == records(one)
    det = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=2, seed=SEED)
    assert records(got) != records(det)  # the samples are not the mode: the test can fail
    assert got.meta["exploration"] == "random" and "per-episode" in got.meta["exploration_noise"]


def reference_random_rollout(actor, seed: int) -> tuple[int, float]:
    """The definition: episode ``seed``'s env reset with ``seed``, its draws from a generator seeded with ``seed``,
    one row at a time under TorchRL's RANDOM exploration."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    gen = torch.Generator().manual_seed(seed)
    length, total = 0, 0.0
    with torch.random.fork_rng(), torch.inference_mode(), set_exploration_type(ExplorationType.RANDOM):
        while True:
            torch.default_generator.set_state(gen.get_state())
            td = actor(TensorDict({"observation": torch.as_tensor(obs).unsqueeze(0)}, batch_size=[1]))
            gen.set_state(torch.default_generator.get_state())
            action = int(td["action"].argmax(-1))
            obs, reward, terminated, truncated, _ = env.step(action)
            length, total = length + 1, total + float(reward)
            if terminated or truncated:
                return length, total


def test_random_exploration_equals_its_definition_episode_by_episode():
    actor = cartpole_actor(2.0)
    got = evaluate(env="CartPole-v1", policy=actor, n_episodes=N, batch_size=4, seed=SEED, exploration="random")
    assert [(r["length"], r["sum_reward"]) for r in got.per_episode] == [
        reference_random_rollout(actor, SEED + i) for i in range(N)]


def test_random_exploration_on_a_torchrl_env_with_one_hot_actions():
    """GymEnv's OneHot action spec: the actor's one-hot samples become Discrete indices and back; same numbers as on
    the gymnasium id, at two batch sizes."""
    actor = cartpole_actor(2.0)
    a = evaluate(env=lambda: GymEnv("CartPole-v1"), policy=actor, n_episodes=6, batch_size=2, seed=SEED,
                 exploration="random")
    b = evaluate(env="CartPole-v1", policy=actor, n_episodes=6, batch_size=5, seed=SEED, exploration="random")
    assert records(a) == records(b)


def test_tensordict_sequential_with_a_tanh_normal_head_on_pendulum():
    torch.manual_seed(3)
    net = TensorDictModule(nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor()),
                           in_keys=["observation"], out_keys=["loc", "scale"])
    actor = ProbabilisticActor(TensorDictSequential(net), in_keys=["loc", "scale"], out_keys=["action"],
                               distribution_class=TanhNormal, distribution_kwargs={"low": -2.0, "high": 2.0})
    kwargs = dict(env="Pendulum-v1", policy=actor, n_episodes=4, seed=1, max_steps=30)
    r1 = evaluate(batch_size=1, exploration="random", **kwargs)
    r4 = evaluate(batch_size=4, exploration="random", **kwargs)
    det = evaluate(batch_size=4, **kwargs)
    assert records(r1) == records(r4) != records(det)


def test_update_weights_takes_the_actors_own_keys():
    actor = make_actor()
    with Evaluator("CartPole-v1", policy=f"{__name__}:make_actor", n_episodes=4, batch_size=2) as ev:
        before = records(ev.evaluate())
        zeroed = {k: torch.zeros_like(v) for k, v in actor.state_dict().items()}
        ev.update_weights(zeroed)  # the actor's keys, not the wrapper's
        after = records(ev.evaluate())
    assert before != after


def test_random_exploration_needs_an_actor():
    class Plain(nn.Module):
        def forward(self, obs):
            return torch.zeros(len(obs), dtype=torch.long)

    with pytest.raises(UserInputError, match="exploration 'random'"):
        evaluate(env="CartPole-v1", policy=Plain(), n_episodes=2, exploration="random")
    with pytest.raises(UserInputError, match="exploration"):
        evaluate(env="CartPole-v1", n_episodes=2, exploration="sometimes")


def test_cli_exploration_option(tmp_path):
    args = ["--env", "CartPole-v1", "--policy", f"{__name__}:make_actor", "-n", "4", "-b", "2"]
    r = CliRunner().invoke(main, [*args, "--exploration", "random", "-o", str(tmp_path / "r")], catch_exceptions=False)
    d = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "d")], catch_exceptions=False)
    assert r.exit_code == 0 and d.exit_code == 0, r.output + d.output
    import json

    info = lambda p: json.loads((tmp_path / p / "eval_info.json").read_text())  # noqa: E731
    assert info("r")["meta"]["exploration"] == "random" and info("d")["meta"]["exploration"] == "deterministic"
