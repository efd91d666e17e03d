"""Task descriptions, read as LeRobot's rollout reads them: every step, ``task_description``, else ``task``, else ``""``.

See :mod:`fasteval.robot.policies.runner` for how the policy receives them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from fasteval.core.capabilities import TakesTasks

TASK_ATTR = "task_description"
TASK_ATTRS = (TASK_ATTR, "task")
"""The env attributes LeRobot's ``rollout`` asks for ``batch["task"]``, in its order (``lerobot_eval.rollout``)."""


def task_attribute(envs: Any) -> str | None:
    """The first of :data:`TASK_ATTRS` the envs have (through their wrappers), else ``None`` (the task is ``""``)."""
    return next((name for name in TASK_ATTRS if envs.has_attr(name)), None)


class TaskDescriptions:
    """Reads the task of every slot that has started an episode, before each policy call, and hands it on.

    As in LeRobot's rollout, the attribute is read on every step (a task may change within an episode);
    async envs answer from the values their workers send back with each step (no extra round trip).
    The policy gets it through ``set_task`` (for the slots that start an episode, and for those whose
    task changed) and, with ``in_observation``, as the observation TensorDict's ``"task"`` entry.

    ``n_slots`` is the number of env slots (the table is indexed by slot), not the policy batch.
    """

    def __init__(self, envs: Any, policy: Any, n_slots: int, in_observation: bool, attribute: str | None = TASK_ATTR):
        """``attribute``: :func:`task_attribute` (``None``: the envs have none; every task is ``""``)."""
        self.envs = envs
        self.attribute = attribute
        self.descriptions: list[str] = [""] * max(int(n_slots), int(envs.n_slots))
        self.set_task: Callable[..., Any] | None = policy.set_task if isinstance(policy, TakesTasks) else None
        self.in_observation = in_observation
        self.observations: list[Any] = []
        """Policy-input TensorDicts that carry the ``"task"`` entry (one per engine buffer)."""
        self.started: list[int] = []
        """Slots that have started an episode (read on every step from then on), in slot order."""
        self._announce: set[int] = set()

    def attach(self, observation: Any) -> None:
        if self.in_observation and not isinstance(observation, torch.Tensor):
            observation.set_non_tensor("task", list(self.descriptions))
            self.observations.append(observation)

    def update(self, slots: Sequence[int]) -> None:
        """``slots`` start an episode: their task is read now, and on every step from now on."""
        if self.attribute is None:
            return
        failing = {f.slot for f in self.envs.failures}  # their reset failed: the engine restarts them (and asks again)
        slots = [int(s) for s in slots if s not in failing]
        if not slots:
            return
        self.started = sorted(set(self.started).union(slots))
        self._announce.update(slots)
        self._read(slots)

    def refresh(self) -> None:
        """Before a policy call: read every started slot's task again (LeRobot reads it every step)."""
        if self.started:
            failing = {f.slot for f in self.envs.failures}
            self._read([s for s in self.started if s not in failing])

    def _read(self, slots: list[int]) -> None:
        values = [str(v) for v in self.envs.call(slots, self.attribute)] if slots else []
        changed = [s for s, v in zip(slots, values) if self.descriptions[s] != v]
        for slot, value in zip(slots, values):
            self.descriptions[slot] = value
        if changed:
            for observation in self.observations:
                observation.set_non_tensor("task", list(self.descriptions))
        told = sorted(self._announce.union(changed))
        self._announce.clear()
        if told and self.set_task is not None:
            self.set_task(torch.as_tensor(told, dtype=torch.long), [self.descriptions[s] for s in told])
