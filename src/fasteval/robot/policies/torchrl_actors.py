"""TorchRL / tensordict actors under the exploration type the spec chose (``--exploration``).

Every ``tensordict.nn.TensorDictModuleBase`` policy (``TensorDictModule``, ``TensorDictSequential``,
TorchRL's ``ProbabilisticActor``, ``QValueActor``...) is wrapped once, when the policy is loaded, in
an :class:`ExplorationActor` that calls it under TorchRL's own ``set_exploration_type`` (tensordict's
``set_interaction_type``, the same context manager):

* ``deterministic`` (the default): ``ExplorationType.DETERMINISTIC``, the distribution's deterministic
  sample (its mode or mean, as the actor's distribution defines it). One call per batch, capturable in a
  CUDA graph like any stateless module.
* ``random``: ``ExplorationType.RANDOM``, a sample. :class:`RandomExplorationActor` draws it per episode
  (:mod:`fasteval.robot.policies.episode_noise`): one generator per slot, seeded with the episode's seed,
  and the actor called one row at a time, so that an episode's actions depend on its seed only, at every
  batch size. Its ``reset(env_ids, seeds)`` makes the engine reset it per slot (and never capture it).

A ``Discrete`` env (TorchRL's ``OneHot`` action spec, as ``GymEnv("CartPole-v1")`` has) gets one-hot
actions from a TorchRL actor: an integer or boolean ``[B, n]`` action is turned into its index here.

The wrapper shares the actor's parameters (``policy_eval_mode``, devices and dtypes see them) and its
``state_dict`` is the actor's own, key for key, so ``Evaluator.update_weights`` takes the actor's state
dict unchanged.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import gymnasium as gym
import torch

from tensordict.nn import TensorDictModuleBase

from fasteval.core.tensordict_policy import action_key_of
from fasteval.robot.policies.episode_noise import EpisodeNoise
from fasteval.types.errors import UserInputError

DETERMINISTIC, RANDOM = "deterministic", "random"


def exploration_context(kind: str) -> Callable[[], Any]:
    """A maker of TorchRL's ``set_exploration_type(ExplorationType.<KIND>)`` context (tensordict's
    ``set_interaction_type`` when TorchRL was never imported: the same class), resolved once."""
    if "torchrl" in sys.modules:
        from torchrl.envs.utils import ExplorationType, set_exploration_type
    else:
        from tensordict.nn import InteractionType as ExplorationType, set_interaction_type as set_exploration_type
    value = ExplorationType.DETERMINISTIC if kind == DETERMINISTIC else ExplorationType.RANDOM
    return lambda: set_exploration_type(value)


def wrap_actor(actor: Any, exploration: str, action_space: gym.Space, n_slots: int) -> "ExplorationActor":
    """``actor`` under ``exploration`` (module docstring): a fresh wrapper, sharing the actor's parameters."""
    cls = RandomExplorationActor if exploration == RANDOM else ExplorationActor
    return cls(actor, action_space, n_slots)


class ExplorationActor(TensorDictModuleBase):
    """An actor called under ``set_exploration_type(DETERMINISTIC)`` (module docstring)."""

    exploration = DETERMINISTIC

    def __init__(self, actor: Any, action_space: gym.Space, n_slots: int):
        super().__init__()
        self.actor = actor
        self.in_keys = list(actor.in_keys or [])  # a TensorDictModuleBase: it has both
        self.out_keys = list(actor.out_keys or [])
        self.action_key = action_key_of(actor)
        self.n_actions = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None
        self.explore = exploration_context(self.exploration)

    def forward(self, tensordict: Any) -> Any:
        with self.explore():
            out = self.actor(tensordict)
        return self._as_index(out)

    def _as_index(self, td: Any) -> Any:
        """A one-hot ``[B, n]`` integer/bool action of a ``Discrete`` env becomes ``[B]`` indices."""
        if self.n_actions is None:
            return td
        action = td.get(self.action_key)
        if action.ndim == 2 and action.shape[-1] == self.n_actions and not action.is_floating_point():
            td.set(self.action_key, action.argmax(-1))
        return td

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # the actor's keys, unprefixed
        return self.actor.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.actor.load_state_dict(*args, **kwargs)

    def run_meta(self) -> dict[str, Any]:
        """``meta["exploration"]`` of the run (copied by the engine)."""
        return {"exploration": self.exploration}


class RandomExplorationActor(ExplorationActor):
    """An actor called under ``set_exploration_type(RANDOM)``, one row at a time, each row drawing from its
    slot's per-episode generator (module docstring)."""

    exploration = RANDOM
    calls_one_row_at_a_time = True
    """Every call of the actor has one row (:class:`fasteval.core.capabilities.CallsOneRowAtATime`)."""

    def __init__(self, actor: Any, action_space: gym.Space, n_slots: int):
        super().__init__(actor, action_space, n_slots)
        self.noise = EpisodeNoise(n_slots)

    def reset(self, env_ids: torch.Tensor, seeds: Sequence[int] | None = None) -> None:
        self.noise.reset(env_ids, seeds)

    def forward(self, tensordict: Any) -> Any:
        n = int(tensordict.batch_size[0])
        actor, key = self.actor, self.action_key
        with self.explore():
            rows = self.noise.per_row(lambda r: actor(tensordict[r:r + 1]).get(key), n, _device_of(tensordict))
        tensordict.set(key, torch.cat(rows))
        return self._as_index(tensordict)

    def run_meta(self) -> dict[str, Any]:
        return {"exploration": RANDOM,
                "exploration_noise": "per-episode torch.Generator seeded with the episode seed (batch-invariant)"}


def _device_of(td: Any) -> torch.device:
    if td.device is not None:
        return td.device
    for value in td.values(True, True):
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def refuse_exploration(policy: Any) -> None:
    """``exploration='random'`` for a policy that has no exploration type to set."""
    raise UserInputError(
        f"exploration 'random' applies to TorchRL / tensordict actors (TensorDictModuleBase) and SB3 policies; the "
        f"policy {type(policy).__name__} is neither (its own sampling, if any, is its business). Drop --exploration "
        f"random, or pass the actor itself."
    )
