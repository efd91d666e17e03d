"""A known-answer env that succeeds with probability p per seed, exactly known from the seed.

Each episode with reset seed ``s`` draws nothing at random: ``u(s)`` is a fixed uniform number in
[0, 1) computed from ``s`` (a SplitMix64 hash), and the episode succeeds iff ``u(s) < p``. Over
many seeds the success rate is p (the hash is equidistributed), and every single episode is
known in advance (:func:`expected_bernoulli_episode`).

* ``p`` may be one rate or a list of rates (``arms``); the action (``Discrete(len(p))``) picks the
  arm, so two policies on one env have two known rates: the built-in ``zero`` policy takes arm 0,
  ``fasteval.testing.bernoulli:arm_1`` arm 1, and so on.
* ``coupling="shared"`` (default): every arm uses the same ``u(s)``, as a real scene that is hard
  for one policy tends to be hard for the other (the two outcomes are comonotone).
  ``coupling="independent"``: arm ``a`` uses ``u(s, a)``, so arms are independent given the seed.
* length ``L = 1 + h(s) % max_length`` steps (1..max_length; mixed lengths make episodes finish
  out of index order in a batch); reward 0 before the last step and, at step L,
  ``(success + v(s)) / 2`` with another fixed uniform ``v(s)``: returns lie in [0, 1] and their
  mean is ``(p + 1/2) / 2``; ``info["is_success"]`` is set at step L.

Imports nothing of fasteval (gymnasium, NumPy and torch only).
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch

BERNOULLI_ENV = "fasteval.testing.bernoulli:make_bernoulli_env"
_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def seed_uniform(seed: int, stream: int = 0) -> float:
    """A fixed number in [0, 1) for ``(seed, stream)``: the top 53 bits of a SplitMix64 hash."""
    return (_splitmix64((int(seed) & _MASK) ^ _splitmix64(stream)) >> 11) / float(1 << 53)


def _rates(p: Any) -> tuple[float, ...]:
    rates = (float(p),) if np.isscalar(p) else tuple(float(v) for v in p)
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"BernoulliEnv: p must be a rate in [0, 1] or a list of them, got {p!r}.")
    return rates


def expected_bernoulli_episode(seed: int, p: Any = 0.5, arm: int = 0, coupling: str = "shared",
                               max_length: int = 5) -> dict[str, Any]:
    """The exact record of the episode with reset seed ``seed`` when the policy picks ``arm``."""
    rate = _rates(p)[arm]
    u = seed_uniform(seed, 1 if coupling == "shared" else 100 + arm)
    success = u < rate
    length = 1 + _splitmix64(int(seed) & _MASK) % int(max_length)
    reward = (float(success) + seed_uniform(seed, 2)) / 2.0
    return {"seed": int(seed), "length": int(length), "success": bool(success), "sum_reward": reward,
            "max_reward": reward}  # earlier steps pay 0 <= reward


class BernoulliEnv(gym.Env):
    """See the module docstring. Observation: ``[t / max_length]`` (float32, Box(1,))."""

    metadata = {"render_modes": []}

    def __init__(self, p: Any = 0.5, coupling: str = "shared", max_length: int = 5):
        if coupling not in ("shared", "independent"):
            raise ValueError(f"BernoulliEnv: coupling must be 'shared' or 'independent', got {coupling!r}.")
        if int(max_length) < 1:
            raise ValueError(f"BernoulliEnv: max_length must be >= 1, got {max_length!r}.")
        self.p = _rates(p)
        self.coupling = coupling
        self.max_length = int(max_length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(self.p))
        self._seed = 0
        self._t = 0
        self._done = True

    def _obs(self) -> np.ndarray:
        return np.array([self._t / self.max_length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self._t = 0
        self._done = False
        return self._obs(), {}

    def step(self, action: Any):
        if self._done:
            raise RuntimeError(f"BernoulliEnv stepped after its episode ended (seed {self._seed}).")
        arm = int(np.asarray(action).reshape(-1)[0])
        record = expected_bernoulli_episode(self._seed, self.p, arm, self.coupling, self.max_length)
        self._t += 1
        last = self._t >= record["length"]
        self._done = last
        reward = record["sum_reward"] if last else 0.0
        info = {"is_success": record["success"] if last else False}
        return self._obs(), reward, last, False, info


def make_bernoulli_env(**kwargs: Any) -> BernoulliEnv:
    """``module:callable`` entry point: ``--env fasteval.testing.bernoulli:make_bernoulli_env``."""
    return BernoulliEnv(**kwargs)


class ArmPolicy:
    """Always picks one arm. Output ``[B]`` int64."""

    def __init__(self, arm: int):
        self.arm = int(arm)

    def select_action(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((len(obs),), self.arm, dtype=torch.long)


def arm_0() -> ArmPolicy:
    return ArmPolicy(0)


def arm_1() -> ArmPolicy:
    return ArmPolicy(1)


def arm_2() -> ArmPolicy:
    return ArmPolicy(2)


def success_rate(seeds: Sequence[int], p: Any = 0.5, arm: int = 0, coupling: str = "shared") -> float:
    """The exact success rate of the episodes with these reset seeds."""
    return float(np.mean([expected_bernoulli_episode(s, p, arm, coupling)["success"] for s in seeds]))
