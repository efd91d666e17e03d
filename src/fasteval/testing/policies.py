"""Tiny policies with known behaviour, for tests of the engine and of users' setups."""

from __future__ import annotations

import torch
from torch import nn


class ParityPolicy(nn.Module):
    """Deterministic, row-independent: action = the observation's last entry (KnownAnswerEnv's parity bit).

    Input ``[B, 3]`` float; output ``[B]`` int64. Earns the +0.5 bonus at every step.
    """

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., -1].round().long()


class StepCounterPolicy:
    """Stateful, resets per env: action = (steps taken in this episode) % 2.

    ``reset(env_ids)`` zeroes only the given slots. If the engine reset the wrong
    slots (or all of them) the actions, and so the rewards, would change.
    """

    def __init__(self) -> None:
        self.counts: torch.Tensor | None = None

    def reset(self, env_ids: torch.Tensor) -> None:
        if self.counts is not None:
            self.counts[env_ids] = 0

    def select_action(self, obs: torch.Tensor) -> torch.Tensor:
        if self.counts is None or self.counts.shape[0] != obs.shape[0]:
            self.counts = torch.zeros(obs.shape[0], dtype=torch.long)
        action = self.counts % 2
        self.counts += 1
        return action

    @staticmethod
    def action_for_step(t: int) -> int:
        """The action at 0-based step ``t`` of an episode."""
        return t % 2


class WaveOnlyPolicy(StepCounterPolicy):
    """Like :class:`StepCounterPolicy`, but can only reset the whole batch (``reset()`` takes no ids).

    fasteval must run it in wave mode: all slots start their episodes together.
    """

    def reset(self) -> None:  # type: ignore[override]
        if self.counts is not None:
            self.counts.zero_()
