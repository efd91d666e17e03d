"""A known-answer env: every number of an episode follows from its reset seed.

Rules for an episode reset with seed ``s`` (steps are numbered ``t = 1..L``):

* length ``L = 1 + (7 * s) % 13`` (1 to 13 steps);
* observation after ``t`` steps: ``[(s % 97) / 97, t / 16, (s + t) % 2]`` (float32);
* reward at step ``t`` with action ``a`` chosen from the previous observation:
  ``((s + 3 t) % 9) - 6`` (so mostly negative), plus ``0.5`` if ``a`` equals that
  observation's last entry (the "parity bit"); NaN at step 1 if ``s`` is in
  ``nan_reward_seeds``;
* at step ``L``: ``terminated = s % 4 != 0``, ``truncated = s % 4 == 0 or s % 5 == 0``
  (so some episodes end with both flags set);
* ``info["is_success"]`` is true at step ``L`` when ``s % 3 == 0``, and at step 1
  (mid-episode, not at the end) when ``s % 6 == 1`` and ``L > 1``.

Stepping after the end raises, so an engine that simulates past an episode's end
(the classic done-mask bug) fails loudly.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import gymnasium as gym
import numpy as np

KNOWN_ANSWER_ID = "fasteval/KnownAnswer-v0"
BUSY_KNOWN_ANSWER_ID = "fasteval/BusyKnownAnswer-v0"
"""The known-answer env with a fixed CPU cost per step (:class:`fasteval.testing.busy.BusyKnownAnswerEnv`)."""
"""The gymnasium id of :class:`KnownAnswerEnv`, registered by :func:`register_envs` (which importing
:mod:`fasteval.testing` calls; ``import fasteval`` registers nothing)."""


def register_envs() -> None:
    """Register :data:`KNOWN_ANSWER_ID` with gymnasium (at most once; 64 steps at most per episode).

    Called when :mod:`fasteval.testing` is first imported. fasteval's env layer maps the ``fasteval``
    namespace to this package, so ``--env fasteval/KnownAnswer-v0`` (and every env worker that builds
    it) imports it before gymnasium looks the id up."""
    if KNOWN_ANSWER_ID not in gym.registry:
        gym.register(id=KNOWN_ANSWER_ID, entry_point="fasteval.testing.envs:KnownAnswerEnv", max_episode_steps=64)
    if BUSY_KNOWN_ANSWER_ID not in gym.registry:
        gym.register(id=BUSY_KNOWN_ANSWER_ID, entry_point="fasteval.testing.busy:BusyKnownAnswerEnv",
                     max_episode_steps=64)


def episode_length(seed: int) -> int:
    return 1 + (7 * seed) % 13


def _observation(seed: int, t: int) -> np.ndarray:
    return np.array([(seed % 97) / 97.0, t / 16.0, float((seed + t) % 2)], dtype=np.float32)


def _base_reward(seed: int, t: int) -> float:
    return float(((seed + 3 * t) % 9) - 6)


def _success_at(seed: int, t: int, length: int) -> bool:
    return (t == length and seed % 3 == 0) or (t == 1 and length > 1 and seed % 6 == 1)


class KnownAnswerEnv(gym.Env):
    """See the module docstring for the rules. Discrete(2) actions, Box(3,) observations."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    constructed = 0
    """Class-wide count of constructions (lets tests prove that envs are not rebuilt)."""

    def __init__(self, nan_reward_seeds: Iterable[int] = (), render_mode: str | None = None):
        KnownAnswerEnv.constructed += 1
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.nan_reward_seeds = frozenset(int(s) for s in nan_reward_seeds)
        self.render_mode = render_mode
        self._seed: int | None = None
        self._t = 0
        self._length = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        self._seed = int(seed)
        self._t = 0
        self._length = episode_length(self._seed)
        self._done = False
        return _observation(self._seed, 0), {}

    def step(self, action: Any):
        if self._done:
            raise RuntimeError(
                f"KnownAnswerEnv stepped after its episode ended (seed {self._seed}, length {self._length}): "
                "the evaluator simulated past the end of an episode."
            )
        s, t_prev = self._seed, self._t
        parity_bit = (s + t_prev) % 2
        self._t += 1
        t = self._t
        reward = _base_reward(s, t) + (0.5 if int(action) == parity_bit else 0.0)
        if t == 1 and s in self.nan_reward_seeds:
            reward = math.nan
        last = t == self._length
        terminated = last and s % 4 != 0
        truncated = last and (s % 4 == 0 or s % 5 == 0)
        self._done = last
        info = {"is_success": _success_at(s, t, self._length)}
        return _observation(s, t), reward, terminated, truncated, info

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = (self._t * 16) % 256
        frame[..., 1] = (self._seed or 0) % 256
        return frame


def make_known_answer_env(**kwargs: Any) -> KnownAnswerEnv:
    """``module:callable`` entry point: ``--env fasteval.testing.envs:make_known_answer_env``."""
    return KnownAnswerEnv(**kwargs)


class KnownAnswerFloat64Env(KnownAnswerEnv):
    """:class:`KnownAnswerEnv` with **float64** observations (as MuJoCo and MetaWorld return them).

    The values are the float32 observations of :class:`KnownAnswerEnv` widened to float64, so a
    policy that reads them back as float32 sees exactly the same numbers, and
    :func:`expected_episode` gives the known answers.
    """

    def __init__(self, nan_reward_seeds: Iterable[int] = (), render_mode: str | None = None):
        super().__init__(nan_reward_seeds, render_mode)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs.astype(np.float64), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs.astype(np.float64), reward, terminated, truncated, info


def make_known_answer_float64_env(**kwargs: Any) -> KnownAnswerFloat64Env:
    """``module:callable`` entry point: ``--env fasteval.testing.envs:make_known_answer_float64_env``."""
    return KnownAnswerFloat64Env(**kwargs)


def expected_episode(
    seed: int,
    action_fn: Callable[[np.ndarray], int] = lambda obs: 0,
    nan_reward_seeds: Iterable[int] = (),
    max_steps: int | None = None,
) -> dict[str, Any]:
    """The exact metrics of the episode with reset seed ``seed``, from the rules alone.

    ``action_fn`` maps one observation to an action, as the policy under test would.
    ``max_steps`` applies an engine step cap. Returns the per-episode record's numbers.
    """
    nan_seeds = set(nan_reward_seeds)
    length = episode_length(seed)
    if max_steps is not None:
        length = min(length, max_steps)
    total, best, success, nan_steps = 0.0, -math.inf, False, 0
    obs = _observation(seed, 0)
    for t in range(1, length + 1):
        action = int(action_fn(obs))
        reward = _base_reward(seed, t) + (0.5 if action == (seed + t - 1) % 2 else 0.0)
        if t == 1 and seed in nan_seeds:
            reward = math.nan
        total += reward
        if math.isnan(reward):
            nan_steps += 1
            best = math.nan
        elif reward > best:
            best = reward
        success = success or _success_at(seed, t, episode_length(seed))
        obs = _observation(seed, t)
    return {"seed": seed, "sum_reward": total, "max_reward": best, "length": length, "success": success, "nan_rewards": nan_steps}


def make_pixel_cartpole(**kwargs: Any) -> gym.Env:
    """CartPole with its frame in the observation (``{"state": [4], "pixels": [400, 600, 3]}``): gymnasium's
    ``AddRenderObservation`` over ``CartPole-v1`` with ``render_mode="rgb_array"``. Deterministic per seed, with
    episode lengths that vary: a pixel env whose unread frames fasteval can skip (``fasteval.core.unread``)."""
    kwargs.setdefault("render_mode", "rgb_array")
    return gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", **kwargs), render_only=False)
