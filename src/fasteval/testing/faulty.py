"""A known-answer env that misbehaves on purpose, for fault-handling tests.

``FaultyEnv(fault=..., fault_seeds=[...], fault_step=k, once_dir=None)`` behaves like
:class:`~fasteval.testing.envs.KnownAnswerEnv`, except in episodes whose seed is in
``fault_seeds``, where at step ``fault_step`` (or at reset for ``fault="raise_reset"``) it:

* ``raise`` / ``raise_reset``: raises RuntimeError;
* ``hang``: sleeps for an hour (use with async envs and a step timeout);
* ``die``: kills its own process with SIGKILL (async workers only!);
* ``nan_obs``: returns a NaN observation.

With ``once_dir``, each seed's fault fires only once (a marker file is left in that folder,
which works across worker processes), so a retry of the episode succeeds.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Iterable

import numpy as np

from fasteval.testing.envs import KnownAnswerEnv

FAULTS = ("raise", "raise_reset", "hang", "die", "nan_obs")


class FaultyEnv(KnownAnswerEnv):
    def __init__(self, fault: str = "raise", fault_seeds: Iterable[int] = (), fault_step: int = 1,
                 once_dir: str | None = None, **kwargs):
        super().__init__(**kwargs)
        if fault not in FAULTS:
            raise ValueError(f"fault: expected one of {FAULTS}, got {fault!r}")
        self.fault, self.fault_seeds, self.fault_step = fault, frozenset(int(s) for s in fault_seeds), int(fault_step)
        self.once_dir = Path(once_dir) if once_dir else None

    def _fires(self, seed: int) -> bool:
        if seed not in self.fault_seeds:
            return False
        if self.once_dir is None:
            return True
        marker = self.once_dir / f"fired-{seed}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def reset(self, *, seed=None, options=None):
        if self.fault == "raise_reset" and seed is not None and self._fires(int(seed)):
            raise RuntimeError(f"planted reset fault (seed {seed})")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self._seed is not None and self._t + 1 == self.fault_step and self.fault != "raise_reset" and self._fires(self._seed):
            if self.fault == "raise":
                raise RuntimeError(f"planted step fault (seed {self._seed}, step {self.fault_step})")
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "nan_obs":
                obs, reward, terminated, truncated, info = super().step(action)
                return np.full_like(obs, math.nan), reward, terminated, truncated, info
        return super().step(action)


def make_faulty_env(**kwargs) -> FaultyEnv:
    """``module:callable`` entry point: ``fasteval.testing.faulty:make_faulty_env``."""
    return FaultyEnv(**kwargs)
