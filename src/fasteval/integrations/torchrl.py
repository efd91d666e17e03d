"""``fasteval.integrations.torchrl.FastevalHook``: periodic evaluation in TorchRL training, logged through TorchRL's logger.

In TorchRL's ``Trainer`` (a trainer hook, registered like its own ``LogValidationReward``)::

    from fasteval.integrations.torchrl import FastevalHook

    hook = FastevalHook(env=lambda: GymEnv("CartPole-v1"), policy=actor, interval=10, n_episodes=50)
    hook.register(trainer)          # a "post_steps_log" op; logs to trainer.logger
    trainer.train()

In a hand-written loop, the same object, called with the step to log at::

    hook = FastevalHook(env=..., policy=actor, interval=10, n_episodes=50, logger=CSVLogger("exp", "logs"))
    for i, batch in enumerate(collector):
        ...  # loss, backward, optimizer step
        hook.step(collector_frames)  # evaluates on every interval-th call
    hook.close()

The :class:`~fasteval.run.api.Evaluator` is built once, on the first evaluation, and reused by every later one;
``policy`` is the live actor that training updates (its parameters change in place; nothing is copied). Every
evaluation runs episodes ``0..n_episodes-1`` with seeds ``seed + i`` under the spec's ``exploration``
(``deterministic`` by default, TorchRL's own ``set_exploration_type``; :mod:`fasteval.robot.policies.torchrl_actors`),
so evaluations at different steps see the same episodes, and the numbers do not depend on ``batch_size``.
Each one logs ``result.to_dict(prefix)`` (``eval/avg_sum_reward``, ``eval/avg_length``, ``eval/pc_success``
where the env reports success, ..., flat floats) with ``logger.log_scalar(name, value, step=...)``, at the
trainer's ``collected_frames`` (or the step given to :meth:`step`), directly rather than through
``Trainer._log``, whose ``log_interval`` would drop evaluations that come more often than it.
``env`` and every other keyword are :class:`~fasteval.types.spec.EvalSpec` fields: a TorchRL env factory, a live
TorchRL env (copied per slot), a gymnasium id...
"""

from __future__ import annotations

from typing import Any

from fasteval.run.api import Evaluator

DEFAULT_PREFIX = "eval/"


def _hook_base() -> type:
    try:
        from torchrl.trainers import TrainerHookBase
    except ImportError:  # a hand-written loop does not need TorchRL's trainers
        return object
    return TrainerHookBase


class FastevalHook(_hook_base()):  # type: ignore[misc]
    """Evaluate every ``interval``-th call with a built-once Evaluator; log through a TorchRL logger (module docstring)."""

    def __init__(self, env: Any, policy: Any, *, interval: int = 1, logger: Any = None, prefix: str = DEFAULT_PREFIX,
                 **spec_fields: Any):
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            from fasteval.types.errors import UserInputError

            raise UserInputError(f"FastevalHook interval: expected an integer >= 1 (evaluate every interval-th call), "
                                 f"got {interval!r}.")
        self.spec_fields = dict(env=env, policy=policy, **spec_fields)
        self.interval, self.logger, self.prefix = interval, logger, prefix
        self.trainer: Any = None
        self.evaluator: Evaluator | None = None
        self.calls = 0
        self.history: list[tuple[int, dict[str, float]]] = []
        """``(step, logged scalars)`` of every evaluation so far."""
        self.last_result: Any = None
        """The fasteval ``EvalResult`` of the last evaluation."""

    # -- TorchRL's trainer -------------------------------------------------------------------------------
    def register(self, trainer: Any, name: str = "fasteval") -> None:
        """A ``post_steps_log`` op of ``trainer`` (after each batch's optimization steps); logs to ``trainer.logger``
        unless a ``logger`` was given; closes its envs at the trainer's ``shutdown``."""
        self.trainer = trainer
        if self.logger is None:
            self.logger = trainer.logger
        trainer.register_op("post_steps_log", self)
        trainer.register_op("shutdown", self.close)
        trainer.register_module(name, self)

    def __call__(self, batch: Any = None) -> None:
        """The trainer's op: evaluate on every ``interval``-th batch, at ``trainer.collected_frames``."""
        step = int(self.trainer.collected_frames) if self.trainer is not None else self.calls
        self.step(step)

    # -- any loop --------------------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float] | None:
        """Count a call; on every ``interval``-th one, evaluate and log at ``step``. Returns the scalars logged, if any."""
        self.calls += 1
        if self.calls % self.interval:
            return None
        return self.evaluate(step)

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate now and log ``result.to_dict(prefix)`` at ``step``."""
        if self.evaluator is None:
            self.evaluator = Evaluator(**self.spec_fields)
        result = self.last_result = self.evaluator.evaluate()
        scalars = result.to_dict(prefix=self.prefix)
        if self.logger is not None:
            for name, value in scalars.items():
                self.logger.log_scalar(name, value, step=step)
        self.history.append((step, scalars))
        return scalars

    def close(self) -> None:
        """Close the evaluator's envs (a later evaluation builds them again)."""
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.calls = int(state_dict.get("calls", 0))
