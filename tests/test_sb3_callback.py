"""fasteval.integrations.sb3.EvalCallback inside a real (short) ``PPO.learn`` on CartPole, checked episode by
episode against SB3's ``evaluate_policy`` on the same seeds; SB3 .zip checkpoints from the command line."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
from click.testing import CliRunner  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from fasteval import evaluate  # noqa: E402
from fasteval.doors.cli import main  # noqa: E402
from fasteval.integrations.sb3 import EvalCallback  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402

SEED, N = 100, 6


def sb3_reference(model, env_id: str, seed: int, n: int, deterministic: bool = True) -> list[tuple[float, int]]:
    """``evaluate_policy`` with the same seeds: one single-env DummyVecEnv per episode, env i seeded ``seed + i``
    (``DummyVecEnv.seed`` applies at its first reset; one episode each, so no unseeded auto-reset counts)."""
    out = []
    for i in range(n):
        venv = DummyVecEnv([lambda: gym.make(env_id)])
        venv.seed(seed + i)
        rewards, lengths = evaluate_policy(model, venv, n_eval_episodes=1, deterministic=deterministic,
                                           return_episode_rewards=True, warn=False)
        out.append((float(rewards[0]), int(lengths[0])))
        venv.close()
    return out


class CompareWithSB3(BaseCallback):
    """``callback_after_eval``: right after each fasteval evaluation, SB3's own on the same weights and seeds."""

    def __init__(self):
        super().__init__()
        self.checked: list[tuple[int, list]] = []

    def _on_step(self) -> bool:
        result = self.parent.last_result
        ours = [(float(r["sum_reward"]), int(r["length"])) for r in result.per_episode]
        assert [r["seed"] for r in result.per_episode] == [SEED + i for i in range(N)]
        assert ours == sb3_reference(self.model, "CartPole-v1", SEED, N)
        self.checked.append((self.num_timesteps, ours))
        return True


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("sb3")
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, n_epochs=2, seed=0, device="cpu", verbose=0)
    model.set_logger(configure(str(root / "logs"), ["csv"]))
    checker = CompareWithSB3()
    callback = EvalCallback("CartPole-v1", callback_after_eval=checker, n_eval_episodes=N, eval_freq=512, seed=SEED,
                            batch_size=4, log_path=str(root / "evals"), best_model_save_path=str(root / "best"),
                            verbose=0)
    model.learn(total_timesteps=3072, callback=callback)
    return model, callback, checker, root


def test_callback_matches_evaluate_policy_per_seed_inside_learn(trained):
    _model, callback, checker, _root = trained
    assert [t for t, _ in checker.checked] == [512, 1024, 1536, 2048, 2560, 3072]
    assert len({tuple(ours) for _t, ours in checker.checked}) > 1  # the weights changed between evaluations
    assert callback.evaluator is None  # closed at the end of training


def test_callback_keeps_sb3s_files_and_logs(trained):
    model, callback, checker, root = trained
    data = np.load(root / "evals" / "evaluations.npz")
    assert data["timesteps"].tolist() == [t for t, _ in checker.checked]
    assert data["results"].tolist() == [[r for r, _l in ours] for _t, ours in checker.checked]
    assert data["ep_lengths"].tolist() == [[length for _r, length in ours] for _t, ours in checker.checked]
    means = [float(np.mean([r for r, _l in ours])) for _t, ours in checker.checked]
    assert callback.last_mean_reward == means[-1] and callback.best_mean_reward == max(means)
    assert (root / "best" / "best_model.zip").is_file()
    with open(root / "logs" / "progress.csv") as f:
        logged = [float(row["eval/mean_reward"]) for row in csv.DictReader(f) if row.get("eval/mean_reward")]
    assert logged == means
    best = PPO.load(root / "best" / "best_model.zip", device="cpu")
    assert [r for r, _l in sb3_reference(best, "CartPole-v1", SEED, N)] == \
        [r for r, _l in checker.checked[means.index(max(means))][1]]


def test_stochastic_evaluation_is_batch_invariant(trained):
    model = trained[0]
    runs = [evaluate(env="CartPole-v1", policy=model, n_episodes=8, batch_size=b, seed=3, exploration="random",
                     device="cpu") for b in (1, 3, 8)]
    rows = [[(r["length"], r["sum_reward"]) for r in run.per_episode] for run in runs]
    assert rows[0] == rows[1] == rows[2]
    assert runs[0].meta["exploration"] == "random"


def test_eval_env_objects_are_read_as_their_registered_id():
    callback = EvalCallback(DummyVecEnv([lambda: gym.make("CartPole-v1", sutton_barto_reward=True)]), verbose=0)
    assert callback.spec_fields["env"] == "CartPole-v1"
    assert callback.spec_fields["env_kwargs"] == {"sutton_barto_reward": True}
    with pytest.raises(UserInputError, match="render"):
        EvalCallback("CartPole-v1", render=True)


# -- .zip checkpoints from the command line ---------------------------------------------------------------
def test_cli_loads_an_sb3_zip_only_with_trust_and_says_why(trained, tmp_path):
    model = trained[0]
    path = tmp_path / "ppo.zip"
    model.save(path)
    args = ["--env", "CartPole-v1", "--policy", str(path), "-n", str(N), "-b", "3", "--seed", str(SEED)]
    refused = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "no")])
    assert refused.exit_code == 2, refused.output
    assert "pickle" in refused.output and "--trust-remote-code" in refused.output
    ok = CliRunner().invoke(main, [*args, "--trust-remote-code", "-o", str(tmp_path / "yes")], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    per = json.loads((tmp_path / "yes" / "eval_info.json").read_text())["per_episode"]
    assert [(r["sum_reward"], r["length"]) for r in per] == sb3_reference(model, "CartPole-v1", SEED, N)


def test_a_zip_that_is_not_sb3s_is_a_clear_error(tmp_path):
    import zipfile

    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "hi")
    result = CliRunner().invoke(main, ["--env", "CartPole-v1", "--policy", str(path), "-n", "1", "--trust-remote-code",
                                       "-o", str(tmp_path / "r")])
    assert result.exit_code == 2 and "not a Stable-Baselines3 checkpoint" in result.output


# -- the eval env's outer spec: step cap and wrappers added after make (issue 42) --------------------------
def wrapped_cartpole(cap: int | None = None):
    """CartPole with a x10 reward wrapper added after make (and a step cap when given)."""
    env = gym.make("CartPole-v1", max_episode_steps=cap) if cap else gym.make("CartPole-v1")
    return gym.wrappers.TransformReward(env, lambda r: 10.0 * r)


def sb3_reference_env(model, make, seed: int, n: int) -> list[tuple[float, int]]:
    out = []
    for i in range(n):
        venv = DummyVecEnv([make])
        venv.seed(seed + i)
        rewards, lengths = evaluate_policy(model, venv, n_eval_episodes=1, return_episode_rewards=True, warn=False)
        out.append((float(rewards[0]), int(lengths[0])))
        venv.close()
    return out


@pytest.mark.parametrize("cap", [None, 20])
def test_callback_honours_the_eval_envs_step_cap_and_wrappers(trained, cap):
    model = trained[0]
    make = lambda: wrapped_cartpole(cap)  # noqa: E731
    callback = EvalCallback(make(), n_eval_episodes=N, seed=SEED, batch_size=3, verbose=0)
    assert callback.spec_fields["max_steps"] == (cap or 500)
    callback.init_callback(model)
    ours = [(float(r["sum_reward"]), int(r["length"])) for r in callback.evaluate().per_episode]
    callback.evaluator.close()
    assert ours == sb3_reference_env(model, make, SEED, N)
    assert all(reward == 10.0 * length for reward, length in ours)  # the wrapper was applied
    if cap:
        assert max(length for _, length in ours) == cap
    plain = EvalCallback(gym.make("CartPole-v1", max_episode_steps=7), verbose=0)
    assert plain.spec_fields["env"] == "CartPole-v1" and plain.spec_fields["max_steps"] == 7


def test_a_wrapper_that_cannot_be_rebuilt_is_refused_with_the_reason():
    class Opaque(gym.Wrapper):  # no RecordConstructorArgs: its arguments are unknown
        pass

    with pytest.raises(UserInputError, match="Opaque.*RecordConstructorArgs"):
        EvalCallback(Opaque(gym.make("CartPole-v1")), verbose=0)
    from stable_baselines3.common.monitor import Monitor

    monitored = EvalCallback(Monitor(gym.make("CartPole-v1")), verbose=0)  # Monitor changes nothing: dropped
    assert monitored.spec_fields["env"] == "CartPole-v1"
