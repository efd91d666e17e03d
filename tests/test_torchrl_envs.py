"""TorchRL envs as fasteval envs (fasteval.robot.torchrl.envs): exact per episode where the env allows it,
labelled "seeded per worker, not per episode" where it does not (batched envs)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
torchrl_envs = pytest.importorskip("torchrl.envs")
from click.testing import CliRunner  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.envs import GymEnv, ParallelEnv, SerialEnv, StepCounter, TransformedEnv  # noqa: E402

from fasteval import Evaluator, evaluate  # noqa: E402
from fasteval.core.slots import PER_EPISODE, PER_WORKER  # noqa: E402
from fasteval.doors.cli import main  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402

N = 8
SEED = 3


def linear_actor(weights) -> TensorDictModule:
    """Push right when ``weights . obs > 0``: logits ``[-w.x, w.x]`` (a Discrete action by argmax)."""
    lin = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        w = torch.tensor(weights, dtype=torch.float32)
        lin.weight.copy_(torch.stack([-w, w]))
    return TensorDictModule(lin, in_keys=["observation"], out_keys=["action"])


VARIED = [0.0, 0.0, 1.0, 0.0]  # CartPole episodes of 25-52 steps, all different from seed to seed
LONG = [0.3, 0.0, 1.0, 0.1]  # most episodes reach the 500-step limit (truncated)


def records(result) -> list[tuple[int, int, int, float]]:
    return [(r["episode_ix"], r["seed"], r["length"], r["sum_reward"]) for r in result.per_episode]


@pytest.fixture(scope="module")
def cartpole_reference():
    return records(evaluate(env="CartPole-v1", policy=linear_actor(VARIED), n_episodes=N, batch_size=3, seed=SEED))


def test_reference_episodes_differ_from_seed_to_seed(cartpole_reference):
    """The comparison below can fail: the reference's episodes are not all alike."""
    assert len({length for _e, _s, length, _r in cartpole_reference}) >= 5


@pytest.mark.parametrize("batch_size", range(1, N + 1))
def test_gymenv_equals_the_gymnasium_env_it_wraps_at_every_batch_size(batch_size, cartpole_reference):
    """GymEnv("CartPole-v1") per slot, set_seed(seed + i) then its seeded reset: episode i is CartPole-v1's episode i."""
    got = evaluate(env=lambda: GymEnv("CartPole-v1"), policy=linear_actor(VARIED), n_episodes=N,
                   batch_size=batch_size, seed=SEED)
    assert records(got) == cartpole_reference
    assert got.meta["seeding"] == PER_EPISODE and got.meta["batch_size"] == batch_size


def test_set_seed_then_reset_would_start_from_the_second_draw():
    """Why the gym wrappers get ``reset(seed=s)``: TorchRL's GymEnv.set_seed(s) is itself a seeded reset, so a plain
    reset() after it starts elsewhere. The adapter's reset equals gymnasium's reset(seed=s); the naive one does not."""
    import gymnasium as gym

    from fasteval.robot.torchrl.envs import TorchRLGymEnv

    first = gym.make("CartPole-v1").reset(seed=11)[0]
    naive = GymEnv("CartPole-v1")
    naive.set_seed(11)
    assert not torch.equal(naive.reset()["observation"], torch.as_tensor(first))
    assert (TorchRLGymEnv(GymEnv("CartPole-v1")).reset(seed=11)[0] == first).all()


def test_a_live_instance_is_copied_per_slot_and_left_alone(cartpole_reference):
    env = GymEnv("CartPole-v1")
    env.set_seed(123)
    before = env.reset()["observation"].clone()
    got = evaluate(env=env, policy=linear_actor(VARIED), n_episodes=N, batch_size=4, seed=SEED)
    assert records(got) == cartpole_reference
    assert not env.is_closed
    assert got.meta["env"] == "<GymEnv>"
    env.set_seed(123)
    assert torch.equal(env.reset()["observation"], before)  # the caller's env still works as before


def test_truncation_by_the_wrapped_time_limit_matches():
    """GymEnv keeps gymnasium's TimeLimit (truncated at 500); fasteval applies CartPole's cap itself: same episodes."""
    ref = evaluate(env="CartPole-v1", policy=linear_actor(LONG), n_episodes=3, batch_size=2, seed=0)
    got = evaluate(env=lambda: GymEnv("CartPole-v1"), policy=linear_actor(LONG), n_episodes=3, batch_size=3, seed=0)
    assert records(got) == records(ref)
    assert 500 in [r["length"] for r in got.per_episode]


def test_transformed_env_with_an_extra_key_gives_a_dict_observation():
    """TransformedEnv(GymEnv, StepCounter): observations {observation, step_count} (a Dict space), still exact."""
    ref = evaluate(env="CartPole-v1", policy=linear_actor(VARIED), n_episodes=4, batch_size=2, seed=SEED)
    got = evaluate(env=lambda: TransformedEnv(GymEnv("CartPole-v1"), StepCounter()), policy=linear_actor(VARIED),
                   n_episodes=4, batch_size=3, seed=SEED, return_episode_data=True)
    assert records(got) == records(ref)
    steps = got.episode_data
    first = steps[steps["episode"] == 0]
    assert first["step_count"].reshape(-1).tolist() == list(range(len(first)))


def test_box_actions_pendulum_equal_up_to_torchrl_float32_rewards():
    """Pendulum: Box actions through the Bounded spec; TorchRL stores rewards as float32 (gymnasium's are float64),
    so returns agree to float32 rounding, lengths exactly."""
    class Swing(nn.Module):
        def forward(self, obs):
            return torch.clamp(2.0 * obs[:, 2:3], -2.0, 2.0)

    actor = TensorDictModule(Swing(), in_keys=["observation"], out_keys=["action"])
    ref = evaluate(env="Pendulum-v1", policy=actor, n_episodes=3, batch_size=2, seed=5)
    got = evaluate(env=lambda: GymEnv("Pendulum-v1"), policy=actor, n_episodes=3, batch_size=3, seed=5)
    for a, b in zip(ref.per_episode, got.per_episode):
        assert a["length"] == b["length"] == 200
        assert b["sum_reward"] == pytest.approx(a["sum_reward"], rel=1e-5)
        assert b["sum_reward"] != a["sum_reward"] or a["sum_reward"] == 0  # float32 rewards: not bit-equal


def test_evaluator_builds_once_and_repeats_its_numbers(cartpole_reference):
    made = []

    def factory():
        made.append(1)
        return GymEnv("CartPole-v1")

    with Evaluator(env=factory, policy=linear_actor(VARIED), n_episodes=N, batch_size=4, seed=SEED) as ev:
        first, second = ev.evaluate(), ev.evaluate()
    assert records(first) == records(second) == cartpole_reference
    assert len(made) == 4  # one env per slot, built once


# -- batched envs --------------------------------------------------------------------------------------
def serial3():
    return SerialEnv(3, lambda: GymEnv("CartPole-v1"))


def test_batched_env_is_evaluated_and_labelled_seeded_per_worker():
    kwargs = dict(policy=linear_actor(VARIED), n_episodes=7, batch_size=16, seed=SEED)
    first = evaluate(env=serial3, **kwargs)
    again = evaluate(env=serial3, **kwargs)
    assert len(first.per_episode) == 7 and records(first) == records(again)  # reproducible for the same settings
    assert first.meta["seeding"] == PER_WORKER == "per worker, not per episode"
    assert first.meta["batch_size"] == 3  # its workers are the slots
    assert first.to_eval_info()["meta"]["seeding"] == PER_WORKER
    lengths = {r["length"] for r in first.per_episode}
    assert len(lengths) >= 3  # real episodes, not one repeated


def test_batched_env_with_fewer_episodes_than_workers_steps_only_those():
    got = evaluate(env=serial3, policy=linear_actor(VARIED), n_episodes=2, batch_size=16, seed=SEED)
    assert [r["episode_ix"] for r in got.per_episode] == [0, 1] and got.meta["batch_size"] == 2


def test_parallel_env_runs_too():
    env = ParallelEnv(2, lambda: GymEnv("CartPole-v1"))
    try:
        got = evaluate(env=env, policy=linear_actor(VARIED), n_episodes=4, batch_size=2, seed=SEED)
        again = evaluate(env=env, policy=linear_actor(VARIED), n_episodes=4, batch_size=2, seed=SEED)
        assert records(got) == records(again) and got.meta["seeding"] == PER_WORKER
        assert not env.is_closed  # the caller's batched env is used, not closed
    finally:
        env.close()


def test_batched_env_refuses_async():
    with pytest.raises(UserInputError, match="vectorization 'sync'"):
        evaluate(env=serial3, policy=linear_actor(VARIED), n_episodes=2, vectorization="async")


def batched_cartpole() -> torchrl_envs.EnvBase:
    """A factory the command line can name (annotated to return a TorchRL env)."""
    return SerialEnv(2, lambda: GymEnv("CartPole-v1"))


def test_summary_and_page_say_seeded_per_worker(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", f"{__name__}:batched_cartpole", "-n", "3", "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "per worker, not per episode" in result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert info["meta"]["seeding"] == PER_WORKER
    assert "per worker, not per episode" in (out / "report.html").read_text()


# -- the command line: a TorchRL env by its constructor ------------------------------------------------
def test_cli_takes_a_torchrl_constructor_and_matches_the_gymnasium_id(tmp_path):
    common = ["-n", "5", "-b", "2", "--seed", "4"]
    a = CliRunner().invoke(main, ["--env", "torchrl.envs:GymEnv", "--env-kwarg", "env_name=CartPole-v1", *common,
                                  "-o", str(tmp_path / "a")], catch_exceptions=False)
    b = CliRunner().invoke(main, ["--env", "CartPole-v1", *common, "-o", str(tmp_path / "b")], catch_exceptions=False)
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    per = lambda d: [(r["seed"], r["length"], r["sum_reward"]) for r in  # noqa: E731
                     json.loads((tmp_path / d / "eval_info.json").read_text())["per_episode"]]
    assert per("a") == per("b")


def test_cli_refuses_an_unannotated_factory_without_trust(tmp_path):
    result = CliRunner().invoke(main, ["--env", f"{__name__}:serial3", "-n", "2", "-o", str(tmp_path / "r")])
    assert result.exit_code == 2 and "not an env constructor" in result.output


# -- async workers ---------------------------------------------------------------------------------------
def cartpole_gymenv() -> torchrl_envs.EnvBase:
    """A module-level factory: picklable, so async workers can build their envs from it."""
    return GymEnv("CartPole-v1")


def test_async_workers_build_torchrl_envs_from_a_picklable_factory(cartpole_reference):
    got = evaluate(env=cartpole_gymenv, policy=linear_actor(VARIED), n_episodes=N, batch_size=4, seed=SEED,
                   vectorization="async", workers=2)
    assert records(got) == cartpole_reference


def test_async_refuses_an_unpicklable_factory_before_any_worker_starts():
    with pytest.raises(UserInputError, match="cannot be pickled"):
        evaluate(env=lambda: GymEnv("CartPole-v1"), policy=linear_actor(VARIED), n_episodes=2, vectorization="async")
