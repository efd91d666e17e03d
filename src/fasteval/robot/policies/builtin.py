"""The ``zero`` and ``random`` policies.

Both are built for a given action space and number of slots. ``random`` draws from
a per-episode generator seeded with the episode's seed, so even random actions are
the same whatever the batch size or finishing order.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import torch


def _batched_dtype(space: gym.Space) -> np.dtype:
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64)
    return np.dtype(space.dtype)


class ZeroPolicy:
    """All-zero actions of the action space's shape and dtype. Output ``[B, *action_shape]``.

    For ``Discrete(n, start=k)`` the action is ``k`` (the space's first action).
    """

    def __init__(self, action_space: gym.Space, n_slots: int):
        dtype = _batched_dtype(action_space)
        actions = np.zeros((n_slots, *action_space.shape), dtype=dtype)
        if isinstance(action_space, gym.spaces.Discrete):
            actions[:] = action_space.start
        self._actions = torch.from_numpy(actions)

    def select_action(self, obs) -> torch.Tensor:
        return self._actions[: len(obs)]  # a view; len(obs) < B only for pipelined half batches


class RandomPolicy:
    """Uniform samples from the action space, one generator per slot, seeded per episode.

    ``reset(env_ids, seeds)`` reseeds the given slots with their new episodes' seeds.
    Output ``[B, *action_shape]``.
    """

    def __init__(self, action_space: gym.Space, n_slots: int):
        self._spaces = [copy.deepcopy(action_space) for _ in range(n_slots)]
        self._actions = np.zeros((n_slots, *action_space.shape), dtype=_batched_dtype(action_space))
        self._tensor = torch.from_numpy(self._actions)

    def reset(self, env_ids, seeds) -> None:
        for slot, seed in zip(env_ids.tolist(), seeds):
            self._spaces[slot].seed(int(seed))

    def select_action(self, obs) -> torch.Tensor:
        for slot, space in enumerate(self._spaces):
            self._actions[slot] = space.sample()
        return self._tensor


BUILTIN_POLICIES = {"zero": ZeroPolicy, "random": RandomPolicy}
