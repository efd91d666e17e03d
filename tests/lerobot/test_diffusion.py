"""Diffusion through fasteval: end to end, reproducible, batch-invariant, and action for action LeRobot's.

LeRobot draws Diffusion's noise from the global RNG, so its per-seed numbers depend on every draw
before the rollout (model initialisation included) and on the batch size: no per-seed parity with
``eval_policy_all`` is asked. fasteval gives each episode its own generator, seeded with the episode
seed, for the initial noise and (DDPM) for each denoising step's noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.lerobot.conftest import PUSHT, PUSHT_KWARGS, pusht_spec
from tests.lerobot.test_act import rows, varying_spec

pytest.importorskip("lerobot")
pytest.importorskip("diffusers")

from fasteval import evaluate  # noqa: E402


def test_end_to_end_on_pusht_and_reproducible(diffusion_checkpoint: Path) -> None:
    spec = pusht_spec(diffusion_checkpoint, n_episodes=3, batch_size=2, max_steps=20)
    first, second = evaluate(**spec), evaluate(**spec)
    assert [r["length"] for r in first.per_episode] == [20, 20, 20]
    assert rows(first) == rows(second)
    assert any(r["sum_reward"] > 0 for r in first.per_episode)


@pytest.mark.parametrize("which", ["diffusion_checkpoint", "ddpm_checkpoint"])
def test_batch_invariant(which: str, request: pytest.FixtureRequest) -> None:
    """Batch 1 and 3, continuous and wave, sync and async: each episode's noise comes from its own seed and the
    chunk prediction runs on blocks of 16 rows (policy_block): the numbers are identical, bit for bit."""
    folder = request.getfixturevalue(which)
    one = rows(evaluate(**varying_spec(folder, n_episodes=8, batch_size=1)))
    three = rows(evaluate(**varying_spec(folder, n_episodes=8, batch_size=3)))
    wave = rows(evaluate(**varying_spec(folder, n_episodes=8, batch_size=3, reset_mode="wave")))
    assert three == wave
    assert one == three
    assert rows(evaluate(**varying_spec(folder, n_episodes=8, batch_size=4, vectorization="async", workers=2))) == one
    other_seed = rows(evaluate(**varying_spec(folder, n_episodes=8, batch_size=3, seed=100)))
    assert [r[1] for r in other_seed] != [r[1] for r in three]


def test_same_actions_as_lerobot_for_same_observations_and_noise(diffusion_checkpoint: Path) -> None:
    """12 steps of PushT from seed 1000: LeRobot's own select_action (given the initial noise fasteval draws
    from the episode's generator) and fasteval's wrapper return the same actions, chunk refills and
    two-step observation history included."""
    import gymnasium as gym
    import gym_pusht  # noqa: F401
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.configs import PushtEnv
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.factory import make_policy, make_pre_post_processors
    from tensordict import TensorDict

    from fasteval.robot.lerobot.loader import load_lerobot_policy

    cfg = PreTrainedConfig.from_pretrained(str(diffusion_checkpoint))
    cfg.pretrained_path, cfg.device = str(diffusion_checkpoint), "cpu"
    theirs = make_policy(cfg=cfg, env_cfg=PushtEnv())
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(diffusion_checkpoint))
    theirs.reset()
    ours = load_lerobot_policy(diffusion_checkpoint, n_slots=1, device="cpu")
    ours.reset(torch.tensor([0]), seeds=[1000])
    generator = torch.Generator().manual_seed(1000)
    shape = (1, cfg.horizon, 2)

    env = gym.make(PUSHT, **PUSHT_KWARGS)
    obs, _ = env.reset(seed=1000)
    for step in range(12):
        batched = {k: v[None] for k, v in obs.items()}
        batch = preprocess_observation(batched)
        batch["task"] = [""]
        noise = torch.randn(shape[1:], generator=generator)[None] if step % cfg.n_action_steps == 0 else None
        expected = post(theirs.select_action(pre(batch), noise=noise))
        got = ours.select_action(TensorDict({k: torch.from_numpy(v) for k, v in batched.items()}, batch_size=[1]))
        assert torch.equal(got, expected), f"step {step}: {got} != {expected}"
        obs, *_ = env.step(expected[0].numpy())
    env.close()
    assert np.isfinite(expected.numpy()).all()


def test_run_meta_says_where_the_noise_comes_from(ddpm_checkpoint: Path, act_checkpoint: Path) -> None:
    from fasteval.robot.lerobot.loader import load_lerobot_policy
    from fasteval.robot.lerobot.policy import LeRobotWavePolicy

    ddpm = load_lerobot_policy(ddpm_checkpoint, n_slots=2, device="cpu").run_meta()
    assert ddpm["lerobot_policy_type"] == "diffusion" and ddpm["lerobot_batch_invariant"] is True
    assert "per-episode" in ddpm["lerobot_noise"] and "policy_rng" not in ddpm  # its draws are its own per episode
    act = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu").run_meta()
    assert act["lerobot_noise"].startswith("none") and act["lerobot_queues"] == "per-slot queues"
    assert "policy_rng" not in act  # deterministic: no draws a resume could not continue
    # A type without per-slot queues runs LeRobot's own select_action: Diffusion's noise is then global.
    wave = LeRobotWavePolicy(load_lerobot_policy(ddpm_checkpoint, 2, "cpu").policy, None, 2)  # type: ignore[arg-type]
    assert wave.run_meta()["lerobot_batch_invariant"] is False
    assert wave.run_meta()["policy_rng"] == "global"  # declared: a resumed run's record says its draws restarted
    global_noise = load_lerobot_policy(ddpm_checkpoint, n_slots=2, device="cpu", noise="global").run_meta()
    assert global_noise["policy_rng"] == "global"
