"""A LIBERO env whose render hangs once, for the step-timeout test (``tests.lerobot.libero_faults:make_env``).

``make_env(hang_seed=S, once_dir=DIR, **libero_kwargs)`` is fasteval's LeRobot LIBERO env
(:func:`fasteval.robot.lerobot.envs.make_env`) whose first step of the episode reset with seed ``S`` sleeps for an
hour, as a hung EGL render does, once (a marker file in ``DIR``, seen by every worker process); the retried
episode runs normally. It is a ``module:callable`` env, so the worker processes import it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym


class HangOnce(gym.Wrapper):
    def __init__(self, env: gym.Env, hang_seed: int, once_dir: str):
        super().__init__(env)
        self.hang_seed, self.once_dir = int(hang_seed), Path(once_dir)
        self.seed: int | None = None
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.seed, self.t = seed, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        self.t += 1
        if self.seed == self.hang_seed and self.t == 1:
            try:
                fd = os.open(self.once_dir / f"hung-{self.seed}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                fd = None
            if fd is not None:
                os.close(fd)
                time.sleep(3600)  # the render that never returns
        return self.env.step(action)


def make_env(hang_seed: int, once_dir: str, **kwargs: Any) -> gym.Env:
    from fasteval.robot.lerobot.envs import make_env as make_lerobot_env

    return HangOnce(make_lerobot_env(**kwargs), hang_seed, once_dir)
