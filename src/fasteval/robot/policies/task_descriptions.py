"""Task descriptions: read ``task_description`` from the envs of slots that start an episode.

See :mod:`fasteval.robot.policies.runner` for how the policy receives them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


TASK_ATTR = "task_description"


class TaskDescriptions:
    """Reads ``task_description`` for slots that start an episode and hands it to the policy.

    ``n_slots`` is the number of env slots (the table is indexed by slot), not the policy batch.
    """

    def __init__(self, envs: Any, policy: Any, n_slots: int, in_observation: bool):
        self.envs = envs
        self.descriptions: list[str] = [""] * max(int(n_slots), int(getattr(envs, "n_slots", 0)))
        set_task = getattr(policy, "set_task", None)
        self.set_task: Callable[..., Any] | None = set_task if callable(set_task) else None
        self.in_observation = in_observation
        self.observations: list[Any] = []
        """Policy-input TensorDicts that carry the ``"task"`` entry (one per engine buffer)."""

    def attach(self, observation: Any) -> None:
        if self.in_observation and not isinstance(observation, torch.Tensor):
            observation.set_non_tensor("task", list(self.descriptions))
            self.observations.append(observation)

    def update(self, slots: Sequence[int]) -> None:
        failing = {f.slot for f in self.envs.failures}  # their reset failed: the engine restarts them (and asks again)
        slots = [s for s in slots if s not in failing]
        if not slots:
            return
        values = [str(v) for v in self.envs.call(slots, TASK_ATTR)]
        for slot, value in zip(slots, values):
            self.descriptions[slot] = value
        for observation in self.observations:
            observation.set_non_tensor("task", list(self.descriptions))
        if self.set_task is not None:
            self.set_task(torch.as_tensor(slots, dtype=torch.long), values)
