"""``fasteval.integrations.sb3.EvalCallback``: a drop-in for Stable-Baselines3's ``EvalCallback``.

::

    from stable_baselines3 import PPO
    from fasteval.integrations.sb3 import EvalCallback

    model = PPO("MlpPolicy", "CartPole-v1")
    model.learn(100_000, callback=EvalCallback("CartPole-v1", eval_freq=10_000, n_eval_episodes=50,
                                                best_model_save_path="best", log_path="logs"))

It takes SB3's arguments and does what SB3's does at every ``eval_freq``-th call (``n_calls``, one call per
step of the training ``VecEnv``, so ``n_envs`` env steps per call, as in SB3): evaluate ``n_eval_episodes``
episodes, append them to ``log_path/evaluations.npz`` (``timesteps``, ``results``, ``ep_lengths``, and
``successes`` when the env reports ``is_success``), record ``eval/mean_reward``, ``eval/mean_ep_length`` (and
``eval/success_rate``) and ``time/total_timesteps`` in the model's logger and dump it, save
``best_model_save_path/best_model.zip`` on a new best mean reward and trigger ``callback_on_new_best``, then
``callback_after_eval``. ``last_mean_reward``, ``best_mean_reward`` and the ``evaluations_*`` lists are kept
as SB3 keeps them; ``last_result`` is the evaluation's fasteval :class:`~fasteval.types.results.EvalResult`.

What differs, on purpose:

* **The episodes are seeded.** Episode ``i`` of every evaluation is reset with ``seed + i`` (``seed``, default
  0), so evaluations at different training steps see the same episodes, and the numbers do not depend on
  ``batch_size``. SB3's callback seeds nothing: its eval env continues from wherever the last evaluation left it.
  The numbers are those of ``evaluate_policy`` run with the same seeds (``n_eval_episodes`` single-env
  ``DummyVecEnv`` s, env ``i`` seeded ``seed + i``), episode by episode (``tests/test_sb3_callback.py``, inside
  ``PPO.learn``).
* **The engine is built once**, at the start of training (envs, buffers, the policy adapter), and runs
  ``batch_size`` envs (default ``min(n_eval_episodes, 16)``) with continuous batching; the model's live
  policy is called through SB3's own ``policy.predict`` (:mod:`fasteval.robot.policies.sb3`), so weights need no copy.
  ``deterministic=False`` samples per episode (batch-invariant), which is not SB3's global-RNG draw.
* **The env is an id**, not an env object: ``eval_env`` may be a gymnasium id, a ``module:callable`` string, a
  zero-argument factory, or an env (or a ``DummyVecEnv`` of one) made with ``gymnasium.make``, read from its outer
  spec (``env.spec``): its id and kwargs, its step cap (``gym.make(id, max_episode_steps=K)``) and the wrappers
  added after ``make`` (``additional_wrappers``, rebuilt with their recorded arguments in each of fasteval's envs;
  ``tests/test_sb3_callback.py`` checks a step cap and a reward wrapper against ``evaluate_policy``). A wrapper that
  does not record its arguments cannot be rebuilt and is refused, with the reason; SB3's ``Monitor`` is dropped
  (fasteval sums the env's own rewards and needs no ``Monitor``; ``warn`` is accepted and ignored). A wrapper whose
  arguments cannot be pickled (a ``lambda``) works with ``vectorization="sync"`` (the default) only. A model trained behind ``VecNormalize``
  has its observations normalized with the training env's current statistics (SB3's ``sync_envs_normalization``).
  Episode rewards are summed in float64 (SB3's ``DummyVecEnv`` keeps each step's reward as float32).
* ``eval/success_rate``: an episode counts as a success if ``info["is_success"]`` was true at any of its steps
  (SB3 reads it at the last step only).
* ``render=True`` is refused: pass ``max_episodes_rendered=K`` (videos of K episodes) among ``spec_fields``.

Any other :class:`~fasteval.types.spec.EvalSpec` field may be given as a keyword (``spec_fields``), e.g.
``max_steps``, ``vectorization="async"``, ``env_kwargs``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, EventCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from fasteval.run.api import Evaluator
from fasteval.types.errors import UserInputError

DEFAULT_MAX_BATCH = 16


# Wrappers that do not change an episode's observations, actions, rewards or end: dropped, not rebuilt.
PASSIVE_WRAPPERS = frozenset({"stable_baselines3.common.monitor:Monitor"})


class RebuiltEnv:
    """A picklable zero-argument factory of an env made with ``gymnasium.make`` plus wrappers: ``gymnasium.make``
    of its outer spec (the registered id and kwargs, then every wrapper of ``additional_wrappers`` with its
    recorded arguments), without gymnasium's checking layers and ``TimeLimit`` (fasteval's engine enforces the
    order and the step cap itself). Its label is the id and the wrappers' names (``CartPole-v1+TransformReward``)."""

    def __init__(self, spec: Any, kwargs: dict[str, Any] | None = None):
        import dataclasses

        self.spec = dataclasses.replace(spec, order_enforce=False, disable_env_checker=True, max_episode_steps=None,
                                        kwargs={**(spec.kwargs or {}), **(kwargs or {})})
        self.__qualname__ = "+".join([spec.id, *(w.name for w in spec.additional_wrappers)])

    def __call__(self) -> Any:
        import gymnasium as gym

        return gym.make(self.spec)


def fasteval_env(eval_env: Any) -> tuple[Any, dict[str, Any], int | None]:
    """``(env, env_kwargs, max_steps)`` for fasteval from SB3's ``eval_env`` argument (see the module docstring).

    An env made with ``gymnasium.make`` is read from its outer spec (``env.spec``): the step cap
    (``max_episode_steps``, ``max_steps`` when it differs from the registered one) and the wrappers added after
    ``make`` (``additional_wrappers``), rebuilt per slot by :class:`RebuiltEnv`. A wrapper that does not record its
    constructor arguments cannot be rebuilt and is refused (SB3's ``Monitor`` is dropped: it changes nothing).
    """
    import gymnasium as gym

    if isinstance(eval_env, str) or (callable(eval_env) and not isinstance(eval_env, (gym.Env, VecEnv))):
        return eval_env, {}, None
    env = eval_env
    while isinstance(env, VecEnvWrapper):  # VecNormalize, VecMonitor...: the model's own statistics are used
        env = env.venv
    if isinstance(env, DummyVecEnv):
        env = env.envs[0]
    spec = env.spec if isinstance(env, gym.Env) else None
    if spec is None or spec.id is None:
        raise UserInputError(
            f"eval_env {type(eval_env).__name__}: fasteval builds its own envs (one per slot, seeded per episode) and needs "
            f"to know how: give a gymnasium id ('CartPole-v1'), a module:callable string, a zero-argument factory, or an "
            f"env made with gymnasium.make (its registered id and kwargs are used).")
    registered = gym.spec(spec.id)
    cap = spec.max_episode_steps if spec.max_episode_steps != registered.max_episode_steps else None
    added = spec.additional_wrappers[len(registered.additional_wrappers):]
    kept = tuple(w for w in added if w.entry_point not in PASSIVE_WRAPPERS)
    opaque = [w.name for w in kept if w.kwargs is None]
    if opaque:
        raise UserInputError(
            f"eval_env {spec.id!r} is wrapped in {', '.join(opaque)}, which does not record its constructor arguments "
            f"(gymnasium.utils.RecordConstructorArgs), so fasteval cannot rebuild it for each of its envs; expected an env "
            f"whose wrappers all appear in env.spec.additional_wrappers. Make the wrapper call "
            f"RecordConstructorArgs.__init__(self, ...), or pass eval_env as a zero-argument factory that builds the "
            f"wrapped env.")
    if kept:
        import dataclasses

        rebuilt = RebuiltEnv(dataclasses.replace(spec, additional_wrappers=registered.additional_wrappers + kept))
        return rebuilt, {}, spec.max_episode_steps  # a factory's cap is not looked up by id: always given
    return spec.id, dict(spec.kwargs or {}), cap


class EvalCallback(EventCallback):
    """SB3's ``EvalCallback``, evaluated by fasteval (see the module docstring for what differs)."""

    def __init__(
        self,
        eval_env: Any,
        callback_on_new_best: BaseCallback | None = None,
        callback_after_eval: BaseCallback | None = None,
        n_eval_episodes: int = 5,
        eval_freq: int = 10000,
        log_path: str | None = None,
        best_model_save_path: str | None = None,
        deterministic: bool = True,
        render: bool = False,
        verbose: int = 1,
        warn: bool = True,
        *,
        seed: int = 0,
        batch_size: int | None = None,
        **spec_fields: Any,
    ):
        super().__init__(callback_after_eval, verbose=verbose)
        if render:
            raise UserInputError("EvalCallback(render=True): fasteval does not draw a window; pass max_episodes_rendered=K "
                                 "to write videos of K episodes instead.")
        self.callback_on_new_best = callback_on_new_best
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.parent = self
        self.n_eval_episodes = n_eval_episodes
        self.eval_freq = eval_freq
        self.best_mean_reward = -np.inf
        self.last_mean_reward = -np.inf
        self.deterministic = deterministic
        self.render = False
        self.warn = warn
        env, env_kwargs, cap = fasteval_env(eval_env)
        if isinstance(env, RebuiltEnv):  # a zero-argument factory: extra env_kwargs go into its spec
            env = RebuiltEnv(env.spec, spec_fields.pop("env_kwargs", None))
        env_kwargs.update(spec_fields.pop("env_kwargs", None) or {})
        if cap is not None:
            spec_fields.setdefault("max_steps", cap)
        self.spec_fields = dict(env=env, env_kwargs=env_kwargs, n_episodes=n_eval_episodes, seed=seed,
                                batch_size=batch_size or min(n_eval_episodes, DEFAULT_MAX_BATCH),
                                exploration="deterministic" if deterministic else "random",
                                device=spec_fields.pop("device", "cpu"), **spec_fields)
        self.best_model_save_path = best_model_save_path
        self.log_path = os.path.join(log_path, "evaluations") if log_path is not None else None
        self.evaluations_results: list[list[float]] = []
        self.evaluations_timesteps: list[int] = []
        self.evaluations_length: list[list[int]] = []
        self.evaluations_successes: list[list[bool]] = []
        self.evaluator: Evaluator | None = None
        self.last_result: Any = None
        """The fasteval ``EvalResult`` of the last evaluation."""

    def _init_callback(self) -> None:
        if self.best_model_save_path is not None:
            os.makedirs(self.best_model_save_path, exist_ok=True)
        if self.log_path is not None:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.init_callback(self.model)
        if self.evaluator is None:  # built once: the envs, buffers and the adapter of the model's live policy
            self.evaluator = Evaluator(policy=self.model, **self.spec_fields)

    def evaluate(self) -> Any:
        """One evaluation of the model's current weights (what ``_on_step`` runs every ``eval_freq`` calls)."""
        if self.evaluator is None:
            self.evaluator = Evaluator(policy=self.model, **self.spec_fields)
        self.last_result = self.evaluator.evaluate()
        return self.last_result

    def _on_step(self) -> bool:
        continue_training = True
        if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
            result = self.evaluate()
            episode_rewards = [float(x) for x in result.column("sum_reward")]
            episode_lengths = [int(x) for x in result.column("length")]
            successes = [bool(x) for x in result.column("success")] if result.meta.get("has_success_signal") else []
            if self.log_path is not None:
                self.evaluations_timesteps.append(self.num_timesteps)
                self.evaluations_results.append(episode_rewards)
                self.evaluations_length.append(episode_lengths)
                kwargs = {}
                if successes:
                    self.evaluations_successes.append(successes)
                    kwargs = dict(successes=self.evaluations_successes)
                np.savez(self.log_path, timesteps=self.evaluations_timesteps, results=self.evaluations_results,
                         ep_lengths=self.evaluations_length, **kwargs)
            mean_reward, std_reward = np.mean(episode_rewards), np.std(episode_rewards)
            mean_ep_length, std_ep_length = np.mean(episode_lengths), np.std(episode_lengths)
            self.last_mean_reward = float(mean_reward)
            if self.verbose >= 1:
                print(f"Eval num_timesteps={self.num_timesteps}, episode_reward={mean_reward:.2f} +/- {std_reward:.2f}")
                print(f"Episode length: {mean_ep_length:.2f} +/- {std_ep_length:.2f}")
            self.logger.record("eval/mean_reward", float(mean_reward))
            self.logger.record("eval/mean_ep_length", mean_ep_length)
            if successes:
                success_rate = np.mean(successes)
                if self.verbose >= 1:
                    print(f"Success rate: {100 * success_rate:.2f}%")
                self.logger.record("eval/success_rate", success_rate)
            self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
            self.logger.dump(self.num_timesteps)
            if mean_reward > self.best_mean_reward:
                if self.verbose >= 1:
                    print("New best mean reward!")
                if self.best_model_save_path is not None:
                    self.model.save(os.path.join(self.best_model_save_path, "best_model"))
                self.best_mean_reward = float(mean_reward)
                if self.callback_on_new_best is not None:
                    continue_training = self.callback_on_new_best.on_step()
            if self.callback is not None:
                continue_training = continue_training and self._on_event()
        return continue_training

    def _on_training_end(self) -> None:
        """Close the envs (a later ``learn`` with this callback builds them again)."""
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        if self.callback:
            self.callback.update_locals(locals_)
