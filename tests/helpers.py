"""Policies and observers shared by tests (CLI tests reach some through module:callable refs: tests.helpers:NAME)."""

import torch
from torch import nn

from fasteval.core.protocols import StepObserver


def three_logits():
    return nn.Linear(3, 3)


class _Raising:
    def select_action(self, obs):
        raise RuntimeError("boom")


def raising_policy():
    return _Raising()


def refuses_to_load(**_spaces):
    """A policy factory that resolves (a sweep's up-front check passes) but fails when a job loads it: bad
    input, the same every time (the report's failed cell, whose retry cannot help)."""
    from fasteval.types.errors import UserInputError

    raise UserInputError("this policy refuses to load (a test fixture)")


def never_succeeding_env():
    """A 3-step env whose every info says ``is_success: False``: it has a success signal, always negative."""
    import gymnasium as gym
    import numpy as np

    class NeverSucceeds(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(1, np.float32), 0.0, self.t >= 3, False, {"is_success": False}

    return NeverSucceeds()


class NoisyPolicy(nn.Module):
    """Stochastic: action = 1 if a fresh uniform draw < 0.5."""

    def forward(self, obs):
        return (torch.rand(obs.shape[0], device=obs.device) < 0.5).long()


class ActionLog(StepObserver):
    """The action rows of every step of a run: every row, or (``active_only``) ``(slot, action)`` of the
    slots that stepped (an idle slot's row is never used, and a served policy does not compute it)."""

    def __init__(self, active_only: bool = False):
        self.steps = []
        self.active_only = active_only

    def on_step(self, active, actions, parked):
        if self.active_only:
            self.steps.append(tuple((s, actions[s].tolist()) for s in active))
        else:
            self.steps.append(tuple(actions.tolist()))
