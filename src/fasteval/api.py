"""Library entry points: :func:`evaluate` (one shot) and :class:`Evaluator` (build once, call many times)."""

from __future__ import annotations

from typing import Any

from fasteval.core.engine import Engine
from fasteval.results import EvalResult
from fasteval.spec import EvalSpec


def evaluate(spec: EvalSpec | None = None, **kwargs: Any) -> EvalResult:
    """Run one evaluation. Pass an :class:`EvalSpec`, or its fields as keyword arguments.

    >>> evaluate(env="CartPole-v1", policy="zero", n_episodes=10).aggregated["avg_sum_reward"]  # doctest: +SKIP
    """
    if spec is None:
        spec = EvalSpec(**kwargs)
    elif kwargs:
        spec = spec.replace(**kwargs)
    with Engine(spec) as engine:
        return engine.run()


class Evaluator:
    """Build the envs, buffers and policy adapter once; evaluate many times.

    Args are :class:`EvalSpec` fields (``env``, ``policy``, ``batch_size``, ``device``,
    ``env_kwargs``, ``vectorization``, ``max_steps``, ``reset_mode``, ...). The engine is
    built on the first :meth:`evaluate` call and reused by later ones.
    """

    def __init__(self, env: str, policy: Any = "zero", **spec_fields: Any):
        self.spec = EvalSpec(env=env, policy=policy, **spec_fields)
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.spec, n_slots=self.spec.batch_size)
        return self._engine

    def evaluate(self, n_episodes: int | None = None, seed: int | None = None) -> EvalResult:
        """Run ``n_episodes`` (default: the spec's) with seeds ``seed + i``."""
        return self.engine.run(n_episodes, seed)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
