"""The classic static-batch evaluation loop, the baseline fasteval is measured against.

Written from the algorithm of LeRobot's ``eval_policy`` / ``rollout`` (not from its code):

* episodes are run in static batches of ``batch_size``; batch ``k`` covers episodes
  ``k * batch_size .. (k + 1) * batch_size - 1`` and its env ``j`` is reset with seed
  ``start_seed + k * batch_size + j``;
* one ``gymnasium.vector.SyncVectorEnv`` (default autoreset, ``NEXT_STEP``) steps *all*
  its envs every step until every env of the batch has been done once; envs that finished
  early keep being stepped (autoreset into unseeded episodes nobody counts);
* observations are converted to torch every step; per-step reward/done/success become
  tensors every step and are ``torch.stack``-ed into ``[B, T]`` at the end of the batch;
* afterwards the done mask is rebuilt with the well-known off-by-one: with
  ``done_index = argmax(done)`` the mask is ``arange(T) <= done_index + 1``, so one step
  past the end (the autoreset step) is kept; rewards are zero-filled outside the mask
  and reduced with sum / max, success with any;
* ``ceil(n / batch_size)`` batches are run and the extra episodes of the last batch are
  discarded (they were simulated anyway).

* per step, as LeRobot's ``rollout`` does: the observation goes into a dict of torch
  tensors (``observation.state``) with a ``task`` list (``add_envs_task``), a tqdm bar is
  updated with a running success rate, and that rate is recomputed by stacking the whole
  success history (``torch.stack(all_successes, dim=1)``) every step. ``lean=True`` drops
  these three per-step costs, to separate them from the algorithmic ones.

What this costs compared with fasteval: padding steps (finished envs wait, still
stepped, for the longest episode of their batch), discarded episodes, and per-step
tensor traffic. What it does to the numbers: ``max_reward`` is taken over a zero-filled
row, so it is never below 0 for episodes shorter than their batch (wrong for
negative-reward envs); the step after the end is counted (harmless here because
gymnasium's autoreset step has reward 0, but not with autoreset off or rewards on reset).
Sums are unaffected on CartPole, so its average return matches fasteval's exactly.

The policy is the same ``policy(obs_tensor) -> actions`` object fasteval runs: an
``nn.Module`` or an object with ``select_action`` (for example fasteval's ``ZeroPolicy``).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch


@dataclass
class ClassicResult:
    sum_reward: np.ndarray
    """float64[n] per-episode sum of rewards (masked as described above)."""
    max_reward: np.ndarray
    """float64[n] per-episode max reward (masked, zero-filled)."""
    success: np.ndarray
    """bool[n]."""
    env_steps: int
    """Env steps simulated: batch_size x steps of every batch, padding and discarded episodes included."""
    n_batches: int
    n_simulated_episodes: int
    """n_batches x batch_size (>= n): includes the discarded ones of the last batch."""

    def aggregated(self) -> dict[str, float]:
        return {
            "avg_sum_reward": float(self.sum_reward.mean()),
            "avg_max_reward": float(self.max_reward.mean()),
            "pc_success": 100.0 * float(self.success.mean()),
            "n_episodes": int(self.sum_reward.shape[0]),
            "env_steps": self.env_steps,
        }


def make_vector_env(env_id: str, batch_size: int, **env_kwargs: Any) -> gym.vector.SyncVectorEnv:
    """A default ``SyncVectorEnv`` (autoreset on, ``NEXT_STEP``) of ``batch_size`` copies of ``env_id``."""
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **env_kwargs) for _ in range(batch_size)])


def _policy_call(policy: Any) -> Callable[[Any], torch.Tensor]:
    return policy.select_action if hasattr(policy, "select_action") else policy


def _step_successes(info: dict, n: int) -> torch.Tensor:
    """Per-env success flags of one vector step, as a bool tensor [n]."""
    if "final_info" in info:  # SAME_STEP autoreset layout
        final = info["final_info"]
        flags = np.asarray(final.get("is_success", np.zeros(n, bool)), dtype=bool) & np.asarray(
            final.get("_is_success", np.ones(n, bool)), dtype=bool)
        return torch.tensor(flags.tolist())
    if "is_success" in info:  # NEXT_STEP layout: this step's infos, masked by `_is_success`
        flags = np.asarray(info["is_success"], dtype=bool) & np.asarray(info.get("_is_success", np.ones(n, bool)), dtype=bool)
        return torch.tensor(flags.tolist())
    return torch.tensor([False] * n)


def _reset_policy(policy: Any, seeds: list[int]) -> None:
    """``policy.reset()`` at the start of a batch; per-env resets (``reset(env_ids[, seeds])``) get every slot."""
    # probe: the classic loop as a user writes it, asking the policy object whether it has a reset
    reset = getattr(policy, "reset", None)
    if not callable(reset):
        return
    try:
        params = inspect.signature(reset).parameters
    except (TypeError, ValueError):
        params = {}
    if not params:
        reset()
    elif "seeds" in params:
        reset(torch.arange(len(seeds)), seeds=list(seeds))
    else:
        reset(torch.arange(len(seeds)))


def rollout(env: gym.vector.VectorEnv, policy: Any, seeds: list[int], device: torch.device,
            lean: bool = False) -> dict[str, torch.Tensor]:
    """Run one static batch until every env has been done once; return ``[B, T]`` tensors."""
    import io

    from tqdm import tqdm

    call = _policy_call(policy)
    _reset_policy(policy, seeds)
    observation, _info = env.reset(seed=seeds)
    n = env.num_envs
    max_steps = env.call("spec")[0].max_episode_steps or 0
    progbar = None if lean else tqdm(total=max_steps, desc="Running rollout", leave=False, file=io.StringIO())
    all_rewards: list[torch.Tensor] = []
    all_dones: list[torch.Tensor] = []
    all_successes: list[torch.Tensor] = []
    done = np.zeros(n, dtype=bool)
    while not np.all(done):
        if lean:
            obs_in: Any = torch.from_numpy(observation).float().to(device)  # numpy -> torch, every step
        else:
            batch = {"observation.state": torch.from_numpy(observation).float().to(device),
                     "task": ["" for _ in range(n)]}  # add_envs_task for envs without a task
            obs_in = batch["observation.state"]
        with torch.inference_mode():
            action = call(obs_in)
        action_np = action.to("cpu").numpy()
        observation, reward, terminated, truncated, info = env.step(action_np)
        successes = _step_successes(info, n)
        done = terminated | truncated | done
        all_rewards.append(torch.from_numpy(reward))
        all_dones.append(torch.from_numpy(done))
        all_successes.append(successes)
        if progbar is not None:
            running_success_rate = torch.stack(all_successes, dim=1).any(dim=1).float().mean().item()
            progbar.set_postfix({"running_success_rate": f"{running_success_rate * 100:.1f}%"})
            progbar.update()
    if progbar is not None:
        progbar.close()
    return {
        "reward": torch.stack(all_rewards, dim=1),
        "done": torch.stack(all_dones, dim=1),
        "success": torch.stack(all_successes, dim=1),
    }


def classic_eval(
    env: gym.vector.VectorEnv,
    policy: Any,
    n_episodes: int,
    start_seed: int = 0,
    device: str | torch.device = "cpu",
    lean: bool = False,
) -> ClassicResult:
    """Evaluate ``n_episodes`` in static batches of ``env.num_envs`` (see the module docstring)."""
    device = torch.device(device)
    batch_size = env.num_envs
    n_batches = math.ceil(n_episodes / batch_size)
    sums: list[torch.Tensor] = []
    maxes: list[torch.Tensor] = []
    succ: list[torch.Tensor] = []
    env_steps = 0
    for k in range(n_batches):
        batch_start = k * batch_size
        seeds = [start_seed + batch_start + j for j in range(batch_size)]
        data = rollout(env, policy, seeds, device, lean)
        n_steps = data["done"].shape[1]
        env_steps += n_steps * batch_size
        done_indices = torch.argmax(data["done"].to(torch.int64), dim=1)
        mask = (torch.arange(n_steps) <= (done_indices + 1).unsqueeze(1)).to(torch.int64)  # the off-by-one
        masked_reward = data["reward"] * mask
        sums.append(masked_reward.sum(dim=1))
        maxes.append(masked_reward.max(dim=1).values)
        succ.append((data["success"] * mask).any(dim=1))
    # Discard the extra episodes of the last batch (they were simulated anyway).
    return ClassicResult(
        sum_reward=torch.cat(sums)[:n_episodes].numpy().astype(np.float64),
        max_reward=torch.cat(maxes)[:n_episodes].numpy().astype(np.float64),
        success=torch.cat(succ)[:n_episodes].numpy().astype(bool),
        env_steps=env_steps,
        n_batches=n_batches,
        n_simulated_episodes=n_batches * batch_size,
    )
