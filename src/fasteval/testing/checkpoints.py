"""A family of known-answer "checkpoints": policy k succeeds on seed s with probability p_k, exactly.

:class:`CheckpointFamily` ties two views of the same outcomes together:

* **real policies on a real env**, for the engine: the env is :class:`~fasteval.testing.bernoulli.BernoulliEnv`
  with the rates ``p = (p_0, ..., p_{K-1})`` as its arms (``env_ref`` and ``env_kwargs``), and
  checkpoint k is the policy ``fasteval.testing.bernoulli:arm_k`` (``policy(k)``), which always
  picks arm k. ``fasteval --env fasteval.testing.bernoulli:make_bernoulli_env --env-kwarg
  p=[0.3,0.5,0.8] --env-kwarg share=0.5 --policy fasteval.testing.bernoulli:arm_2`` runs checkpoint 2;
* **a vectorised simulator**, for benchmarks and simulation tests: ``outcomes(seeds)`` gives every
  checkpoint's success (or return) on every seed at once, with NumPy, and it is the env's episode
  seed for seed and bit for bit (the same integer hashes; ``tests/test_race.py`` checks it through
  the engine).

Nothing is random at run time: episode outcomes are fixed functions of the reset seed. Over seeds,
checkpoint k's success rate is exactly ``p_k``, for every ``share`` (see the bernoulli module):

* ``share = 0``: given the seed, the checkpoints succeed independently of each other;
* ``share = r``: a share r of the seeds (picked by their hash) have a *shared difficulty* ``u(s)``
  and checkpoint k succeeds there iff ``u(s) < p_k``: those seeds are easy or hard for every
  checkpoint alike, and a better checkpoint succeeds on every such seed a worse one does;
* ``share = 1``: every seed is like that (the outcomes are comonotone).

The episode return is ``(success + v(s)) / 2`` with a per-seed ``v(s)`` shared by all checkpoints, so
returns lie in [0, 1] (``--return-bounds 0,1``) and checkpoint k's mean return is ``(p_k + 1/2) / 2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fasteval.testing.bernoulli import BERNOULLI_ENV, bernoulli_outcomes, expected_bernoulli_episode

ARM_POLICY = "fasteval.testing.bernoulli:arm_{}"
RETURN_BOUNDS = (0.0, 1.0)


@dataclass(frozen=True)
class CheckpointFamily:
    """K known-answer checkpoints. ``rates``: ``p_k`` in [0, 1]; ``share``: the share of seeds whose
    difficulty all checkpoints share, in [0, 1]; ``max_length``: episodes last 1..max_length steps."""

    rates: tuple[float, ...]
    share: float = 0.0
    max_length: int = 5

    def __post_init__(self) -> None:
        rates = tuple(float(r) for r in np.atleast_1d(np.asarray(self.rates, dtype=np.float64)))
        if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"CheckpointFamily: rates must be success rates in [0, 1], got {self.rates!r}.")
        if not 0.0 <= float(self.share) <= 1.0:
            raise ValueError(f"CheckpointFamily: share must be in [0, 1], got {self.share!r}.")
        if int(self.max_length) < 1:
            raise ValueError(f"CheckpointFamily: max_length must be >= 1, got {self.max_length!r}.")
        object.__setattr__(self, "rates", rates)
        object.__setattr__(self, "share", float(self.share))
        object.__setattr__(self, "max_length", int(self.max_length))

    @classmethod
    def spread(cls, low: float, high: float, n: int, share: float = 0.0, max_length: int = 5) -> "CheckpointFamily":
        """``n`` checkpoints with rates evenly spaced from ``low`` to ``high`` (the best is the last)."""
        return cls(tuple(np.linspace(float(low), float(high), int(n)).tolist()), share, max_length)

    @property
    def n_policies(self) -> int:
        return len(self.rates)

    @property
    def best(self) -> int:
        """The index of the highest rate (the first of them on a tie)."""
        return int(np.argmax(self.rates))

    @property
    def env_ref(self) -> str:
        return BERNOULLI_ENV

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return {"p": list(self.rates), "share": self.share, "max_length": self.max_length}

    def policy(self, k: int) -> str:
        """The ``module:callable`` reference of checkpoint ``k`` (the policy that picks arm k)."""
        if not 0 <= int(k) < self.n_policies:
            raise ValueError(f"CheckpointFamily: checkpoint {k!r} does not exist; expected 0..{self.n_policies - 1}.")
        return ARM_POLICY.format(int(k))

    def policies(self) -> list[str]:
        return [self.policy(k) for k in range(self.n_policies)]

    def mean_returns(self) -> np.ndarray:
        """Each checkpoint's exact mean return over seeds: ``(p_k + 1/2) / 2``."""
        return (np.asarray(self.rates) + 0.5) / 2.0

    def outcomes(self, seeds: Any, metric: str = "success") -> np.ndarray:
        """Checkpoint k's outcome on each seed: shape ``(K,) + seeds.shape``; bool for
        ``metric="success"``, float64 returns in [0, 1] for ``"return"``."""
        if metric not in ("success", "return"):
            raise ValueError(f"CheckpointFamily.outcomes: metric must be 'success' or 'return', got {metric!r}.")
        out = bernoulli_outcomes(seeds, self.rates, self.share, self.max_length)
        return out["success"] if metric == "success" else out["sum_reward"]

    def episode(self, k: int, seed: int) -> dict[str, Any]:
        """The exact record of checkpoint ``k``'s episode with reset seed ``seed`` (as the env plays it)."""
        return expected_bernoulli_episode(seed, self.rates, int(k), max_length=self.max_length, share=self.share)
