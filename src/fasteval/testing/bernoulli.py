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
* ``share=r`` (a number in [0, 1], instead of ``coupling``): a *shared per-seed difficulty* for a
  share r of the seeds. A fixed uniform ``w(s)`` picks them: where ``w(s) < r`` every arm uses the
  shared ``u(s)`` (the seed is easy or hard for all of them alike), elsewhere arm ``a`` uses its own
  ``u(s, a)``. Either way the number compared with ``p_a`` is uniform, so arm a's success rate over
  seeds is exactly ``p_a`` for every r; ``share=1`` is ``coupling="shared"`` and ``share=0`` is
  ``coupling="independent"``, seed for seed. Two arms' outcomes are correlated by
  ``r (min(p_a, p_b) - p_a p_b) / (sd_a sd_b)``.
* :func:`bernoulli_outcomes` computes the same outcomes for arrays of seeds at once (NumPy, exact
  integer hashing: equal to the env's, seed for seed); :mod:`fasteval.testing.checkpoints` builds
  a family of "checkpoints" (arms) on it, for races and their simulations.
* ``step_delay_s``: seconds each step sleeps (for tests that kill a run mid-way); it changes no outcome.
* length ``L = 1 + h(s) % max_length`` steps (1..max_length; mixed lengths make episodes finish
  out of index order in a batch); reward 0 before the last step and, at step L,
  ``(success + v(s)) / 2`` with another fixed uniform ``v(s)``: returns lie in [0, 1] and their
  mean is ``(p + 1/2) / 2``; ``info["is_success"]`` is set at step L.

Imports nothing of fasteval (gymnasium, NumPy and torch only).
"""

from __future__ import annotations

import re
import time
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


def _splitmix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`_splitmix64` on a uint64 array (NumPy's uint64 arithmetic wraps modulo 2**64, as the mask does)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _seed_array(seeds: Any) -> np.ndarray:
    """Seeds as uint64, two's complement for negative ones (what ``int(seed) & _MASK`` gives)."""
    return np.atleast_1d(np.asarray(seeds, dtype=np.int64)).astype(np.uint64)


def seed_uniforms(seeds: Any, stream: int = 0) -> np.ndarray:
    """:func:`seed_uniform` for an array of seeds: float64, the same numbers bit for bit (integer
    hashing, then an exact division of a 53-bit integer by 2**53)."""
    mixed = _seed_array(seeds) ^ np.uint64(_splitmix64(stream))
    return (_splitmix64_array(mixed) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _share_of(coupling: str, share: Any) -> float:
    """The share of seeds with a shared difficulty: ``share`` if given, else 1 (shared) or 0 (independent)."""
    if share is None:
        if coupling not in ("shared", "independent"):
            raise ValueError(f"BernoulliEnv: coupling must be 'shared' or 'independent', got {coupling!r}.")
        return 1.0 if coupling == "shared" else 0.0
    try:
        value = float(share)
    except (TypeError, ValueError):
        raise ValueError(f"BernoulliEnv: share must be a number in [0, 1], got {share!r}.") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"BernoulliEnv: share must be a number in [0, 1], got {share!r}.")
    return value


def _rates(p: Any) -> tuple[float, ...]:
    rates = (float(p),) if np.isscalar(p) else tuple(float(v) for v in p)
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"BernoulliEnv: p must be a rate in [0, 1] or a list of them, got {p!r}.")
    return rates


_SHARED, _WHICH, _BONUS = 1, 3, 2
"""Hash streams: the shared difficulty u(s), the uniform w(s) that says whether seed s shares it,
the return bonus v(s). Arm a's own difficulty is stream ``100 + a``."""


def expected_bernoulli_episode(seed: int, p: Any = 0.5, arm: int = 0, coupling: str = "shared",
                               max_length: int = 5, share: float | None = None) -> dict[str, Any]:
    """The exact record of the episode with reset seed ``seed`` when the policy picks ``arm``."""
    rate = _rates(p)[arm]
    r = _share_of(coupling, share)
    shared = r >= 1.0 or (r > 0.0 and seed_uniform(seed, _WHICH) < r)
    u = seed_uniform(seed, _SHARED if shared else 100 + arm)
    success = u < rate
    length = 1 + _splitmix64(int(seed) & _MASK) % int(max_length)
    reward = (float(success) + seed_uniform(seed, _BONUS)) / 2.0
    return {"seed": int(seed), "length": int(length), "success": bool(success), "sum_reward": reward,
            "max_reward": reward}  # earlier steps pay 0 <= reward


class BernoulliEnv(gym.Env):
    """See the module docstring. Observation: ``[t / max_length]`` (float32, Box(1,))."""

    metadata = {"render_modes": []}

    def __init__(self, p: Any = 0.5, coupling: str = "shared", max_length: int = 5, share: float | None = None,
                 step_delay_s: float = 0.0):
        self.share = _share_of(coupling, share)
        self.step_delay_s = float(step_delay_s)
        """Seconds each step sleeps (a run slow enough to be killed mid-way in a test); no outcome changes."""
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
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)
        arm = int(np.asarray(action).reshape(-1)[0])
        record = expected_bernoulli_episode(self._seed, self.p, arm, max_length=self.max_length, share=self.share)
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


_ARM = re.compile(r"^arm_(0|[1-9][0-9]{0,3})$")


def __getattr__(name: str) -> Any:
    """``arm_N`` for any N (up to 9999): the factory of :class:`ArmPolicy` ``(N)``, so that
    ``--policy fasteval.testing.bernoulli:arm_7`` names the eighth arm (PEP 562)."""
    match = _ARM.match(name)
    if match is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    arm = int(match[1])

    def factory() -> ArmPolicy:
        return ArmPolicy(arm)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"Always picks arm {arm}."
    return factory


def success_rate(seeds: Sequence[int], p: Any = 0.5, arm: int = 0, coupling: str = "shared",
                 share: float | None = None) -> float:
    """The exact success rate of the episodes with these reset seeds."""
    return float(np.mean([expected_bernoulli_episode(s, p, arm, coupling, share=share)["success"] for s in seeds]))


def bernoulli_outcomes(seeds: Any, p: Any = 0.5, share: float = 1.0, max_length: int = 5) -> dict[str, np.ndarray]:
    """Every arm's episode on every seed at once: the vectorised form of :func:`expected_bernoulli_episode`.

    ``seeds``: int array of shape ``S`` (any shape); ``p``: ``K`` rates. Returns ``success`` (bool,
    ``(K,) + S``: arm k's success on each seed), ``sum_reward`` (float64, same shape: the episode's
    return, ``(success + v(s)) / 2``) and ``length`` (int64, shape ``S``: the same for every arm).
    The numbers are those of the env, seed for seed and bit for bit (same integer hashes).
    """
    rates = np.asarray(_rates(p), dtype=np.float64)
    r = _share_of("shared", share)
    flat = _seed_array(seeds).reshape(-1)
    shape = np.shape(seeds)
    shared = np.ones(flat.shape, dtype=bool) if r >= 1.0 else (seed_uniforms(flat, _WHICH) < r if r > 0.0
                                                                 else np.zeros(flat.shape, dtype=bool))
    common = seed_uniforms(flat, _SHARED)
    success = np.empty((rates.size, flat.size), dtype=bool)
    for arm, rate in enumerate(rates):
        own = seed_uniforms(flat, 100 + arm) if not shared.all() else common
        success[arm] = np.where(shared, common, own) < rate
    bonus = seed_uniforms(flat, _BONUS)
    length = (1 + _splitmix64_array(flat) % np.uint64(int(max_length))).astype(np.int64)
    return {"success": success.reshape((rates.size,) + shape),
            "sum_reward": ((success + bonus[None]) / 2.0).reshape((rates.size,) + shape),
            "length": length.reshape(shape)}
