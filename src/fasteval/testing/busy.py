"""CPU-heavy toy envs for throughput benchmarks (pipelining, async workers, Ray workers).

``BusyKnownAnswerEnv(work=N)`` (``fasteval/BusyKnownAnswer-v0``): the known-answer env
(:mod:`fasteval.testing.envs`, the same numbers per seed) that burns ``N`` 64-element dot products per
step: a fixed amount of CPU work, the same in every process (pass ``N``, not milliseconds, so that a busy
machine shows its contention instead of hiding it).

``BusyEnv(step_ms=1.0, image=True)``: each step burns ``step_ms`` milliseconds of CPU in
NumPy (a fixed amount of arithmetic, calibrated once per process), returns a 64x64x3 uint8
image (or an 8-float state) and a reward that follows from the seed and the action, and
ends after ``1 + seed % 50`` steps. Cheap to build, deterministic, picklable.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fasteval.testing.envs import KnownAnswerEnv

_WORK_PER_MS: int | None = None


def _calibrate() -> int:
    """Number of 64-element dot products that take about 1 ms here (median of 5)."""
    a = np.random.default_rng(0).standard_normal(64)
    trials = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            a @ a
        trials.append((time.perf_counter() - t0) / 2000)
    return max(1, int(1e-3 / sorted(trials)[2]))


class BusyEnv(gym.Env):
    def __init__(self, step_ms: float = 1.0, image: bool = True):
        global _WORK_PER_MS
        if _WORK_PER_MS is None:
            _WORK_PER_MS = _calibrate()
        self.iterations = max(1, int(step_ms * _WORK_PER_MS))
        self.image = image
        self.observation_space = (gym.spaces.Box(0, 255, (64, 64, 3), np.uint8) if image
                                  else gym.spaces.Box(-np.inf, np.inf, (8,), np.float32))
        self.action_space = gym.spaces.Discrete(2)
        self._vec = np.random.default_rng(1).standard_normal(64)
        self._t, self._len, self._seed = 0, 1, 0

    def _obs(self):
        if self.image:
            return np.full((64, 64, 3), (self._seed + self._t) % 256, dtype=np.uint8)
        return np.full(8, (self._seed + self._t) % 7, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._seed = int(seed or 0)
        self._t, self._len = 0, 1 + self._seed % 50
        return self._obs(), {}

    def step(self, action):
        v = self._vec
        for _ in range(self.iterations):
            v @ v
        self._t += 1
        reward = float((self._seed + self._t) % 3) + 0.5 * int(action)
        done = self._t >= self._len
        return self._obs(), reward, done, False, {"is_success": done and self._seed % 2 == 0}


def make_busy_env(**kwargs) -> BusyEnv:
    return BusyEnv(**kwargs)


def work_per_ms() -> int:
    """64-element dot products per millisecond here (calibrated once per process)."""
    global _WORK_PER_MS
    if _WORK_PER_MS is None:
        _WORK_PER_MS = _calibrate()
    return _WORK_PER_MS


class BusyKnownAnswerEnv(KnownAnswerEnv):
    """:class:`~fasteval.testing.envs.KnownAnswerEnv` plus ``work`` dot products of CPU per step."""

    def __init__(self, work: int = 1000, **kwargs):
        super().__init__(**kwargs)
        self.work = int(work)
        self._vec = np.random.default_rng(1).standard_normal(64)

    def step(self, action):
        v = self._vec
        for _ in range(self.work):
            v @ v
        return super().step(action)
