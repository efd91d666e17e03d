"""A known-answer env and policy that fail on a plan: the fixtures of the model-based fault test.

:class:`FaultPlanEnv` is :class:`~fasteval.testing.envs.KnownAnswerEnv` (same observations, rewards,
flags and lengths, so :func:`expected_episode` gives every number), with a **fault plan**: per
seed, the list of faults its attempts meet, in order::

    plan = {391: [("raise", 0), ("raise", 0)],   # attempts 1 and 2 of seed 391 raise at step 0
            390: [("crash", 1)],                 # attempt 1 of seed 390 crashes at step 1
            7:   [("hang", -1)]}                 # attempt 1 of seed 7 hangs in reset

Steps are 0-based step calls (step ``t`` is the call that takes the episode from ``t`` to
``t + 1`` steps); step ``-1`` is the reset. The kinds:

* ``raise``: raises :class:`PlannedFault`;
* ``crash``: the process dies (``os._exit(CRASH_EXIT_CODE)``) when the env runs in a worker
  process; in the main process, where that would end the test, it raises :class:`PlannedCrash`
  (a different error, so a test can tell which fault it met);
* ``hang``: sleeps ``hang_s`` seconds (for ``--step-timeout`` and the watchdog).

``rebuild_s``: an env built after any planned fault fired (a replacement worker's, a rebuilt env) sleeps that
long in its constructor, as a heavy env (LIBERO) takes minutes to import and build under load.

A fault that lies past the end of its episode never fires, and neither do the faults after it.

**Attempts.** The env counts the faults of a seed that *fired*, with one marker file per fault
in ``state_dir`` (created before the fault acts, so a crash or a kill still leaves it): the k-th
reset of an episode after k faults fired meets fault k. Restarting an episode without a fault
(its worker was replaced for another slot's crash) does not move it on. Markers work across
worker processes and their replacements; a fresh ``state_dir`` starts every seed at fault 0.

**The policy.** ``policy_faults = {seed: [kind, step]}`` with kind ``nan`` (the action for step
``t`` is NaN: the engine must never send it) or ``hang``. The env publishes them on its action
space (``action_space.policy_faults``), so that one set of env kwargs (which the CLI, the manifest
and the workers all carry) describes the whole plan, and :func:`make_planned_policy`, built from
the action space like every ``module:callable`` policy, finds it. The policy knows an episode only
by its observation, which holds ``seed % 97`` and the step: keep the planned seeds apart mod 97.
Its action is the parity bit (:class:`~fasteval.testing.policies.ParityPolicy`'s choice) as a
float in ``Box(0, 1, (1,))``, so the known answers are ``expected_episode(seed, parity)``.

Plans are JSON-friendly (seed keys may be strings, faults lists), so ``--env-kwarg plan=...``
works: ``--env fasteval.testing.fault_plan:make_fault_plan_env``.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np

from fasteval.testing.envs import KnownAnswerEnv, episode_length

ENV_FAULTS = ("raise", "crash", "hang")
POLICY_FAULTS = ("nan", "hang")
RESET = -1
"""The step number of a fault in ``reset``."""
CRASH_EXIT_CODE = 3
"""Exit code of a worker process that met a planned ``crash``."""


class PlannedFault(RuntimeError):
    """A planned ``raise``."""


class PlannedCrash(RuntimeError):
    """A planned ``crash`` met in the main process (a worker process exits instead)."""


Plan = Mapping[Any, Sequence[Sequence[Any]]]


def normalize_plan(plan: Plan | None, kinds: Sequence[str]) -> dict[int, list[tuple[str, int]]]:
    """``{seed: [(kind, step), ...]}`` with int seeds and steps; raises ValueError on a bad entry."""
    out: dict[int, list[tuple[str, int]]] = {}
    for seed, faults in (plan or {}).items():
        entries = []
        for fault in faults:
            kind, step = fault
            if kind not in kinds:
                raise ValueError(f"fault plan: seed {seed}: kind {kind!r}; expected one of {', '.join(kinds)}")
            if int(step) < RESET:
                raise ValueError(f"fault plan: seed {seed}: step {step}; expected -1 (reset) or a step >= 0")
            entries.append((str(kind), int(step)))
        out[int(seed)] = entries
    return out


def fault_message(kind: str, seed: int, index: int, step: int) -> str:
    """The error text of planned fault ``index`` of ``seed`` (tests match it in errors.jsonl)."""
    where = "reset" if step == RESET else f"step {step}"
    return f"planned {kind}: seed {seed}, fault {index}, {where}"


def in_worker_process() -> bool:
    """Whether this process was started by ``multiprocessing`` (an env worker)."""
    return multiprocessing.parent_process() is not None


class PlannedActionSpace(gym.spaces.Box):
    """``Box(0, 1, (1,), float32)`` that carries the policy's faults (``policy_faults``)."""

    def __init__(self, policy_faults: dict[int, tuple[str, int]]):
        super().__init__(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.policy_faults = dict(policy_faults)


class FaultPlanEnv(KnownAnswerEnv):
    """See the module docstring. Observations as :class:`KnownAnswerEnv`; ``Box(0, 1, (1,))`` actions."""

    def __init__(self, plan: Plan | None = None, state_dir: str | None = None, policy_faults: Plan | None = None,
                 hang_s: float = 3600.0, rebuild_s: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.plan = normalize_plan(plan, ENV_FAULTS)
        if self.plan and not state_dir:
            raise ValueError("FaultPlanEnv: a fault plan needs a state_dir (where fired faults are counted)")
        self.state_dir = Path(state_dir) if state_dir else None
        if rebuild_s > 0 and self.state_dir is not None and any(self.state_dir.glob("fired-*")):
            time.sleep(rebuild_s)  # built after a fault fired (a replacement worker's env): slow, as a LIBERO build
        faults = {seed: entries[0] for seed, entries in normalize_plan(
            {s: [f] for s, f in (policy_faults or {}).items()}, POLICY_FAULTS).items()}
        self.action_space = PlannedActionSpace(faults)
        self.hang_s = float(hang_s)
        self._pending: tuple[int, str, int] | None = None  # (index, kind, step) of the next fault of this attempt

    # -- attempts -------------------------------------------------------------------------
    def _marker(self, seed: int, index: int) -> Path:
        assert self.state_dir is not None
        return self.state_dir / f"fired-s{seed}-f{index}"

    def fired(self, seed: int) -> int:
        """How many planned faults of ``seed`` fired so far (in any process)."""
        count = 0
        while count < len(self.plan.get(seed, ())) and self._marker(seed, count).exists():
            count += 1
        return count

    def _fire(self, seed: int, index: int, kind: str, step: int) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        self._marker(seed, index).touch()  # before acting: a crash or a kill keeps the count
        self._pending = None
        message = fault_message(kind, seed, index, step)
        if kind == "raise":
            raise PlannedFault(message)
        if kind == "crash":
            if in_worker_process():
                os._exit(CRASH_EXIT_CODE)
            raise PlannedCrash(message)
        time.sleep(self.hang_s)  # hang
        raise PlannedFault(message + " (the hang ended)")

    # -- gymnasium ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._pending = None
        if seed is not None and int(seed) in self.plan:
            index = self.fired(int(seed))
            faults = self.plan[int(seed)]
            if index < len(faults):
                kind, step = faults[index]
                if step == RESET:
                    self._done = True  # a reset that failed leaves no episode to step
                    self._fire(int(seed), index, kind, step)
                self._pending = (index, kind, step)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any):
        if self._pending is not None and self._pending[2] == self._t and not self._done:
            index, kind, step = self._pending
            self._fire(int(self._seed), index, kind, step)  # type: ignore[arg-type]
        value = float(np.asarray(action, dtype=np.float64).reshape(-1)[0])
        return super().step(int(round(value)) if math.isfinite(value) else -1)


def make_fault_plan_env(**kwargs: Any) -> FaultPlanEnv:
    """``module:callable`` entry point: ``--env fasteval.testing.fault_plan:make_fault_plan_env``."""
    return FaultPlanEnv(**kwargs)


class PlannedPolicy:
    """Parity actions as floats ``[B, 1]``; NaN (or a hang) where ``policy_faults`` says.

    Row-independent and stateless, so every mode (pipeline included) may run it. A planned hang
    sleeps ``hang_s`` seconds in ``select_action``.
    """

    def __init__(self, policy_faults: Mapping[int, tuple[str, int]] | None = None, hang_s: float = 3600.0):
        self.by_key = {(seed % 97, step): kind for seed, (kind, step) in (policy_faults or {}).items()}
        self.hang_s = hang_s

    def select_action(self, obs: Any) -> Any:
        import torch  # here, not at the top: env workers import this module and need no torch

        actions = obs[:, -1:].round().to(torch.float32)
        if self.by_key:
            keys = zip(torch.round(obs[:, 0] * 97).long().tolist(), torch.round(obs[:, 1] * 16).long().tolist())
            for row, key in enumerate(keys):
                kind = self.by_key.get(key)
                if kind == "nan":
                    actions[row] = math.nan
                elif kind == "hang":
                    time.sleep(self.hang_s)
        return actions


def make_planned_policy(action_space: gym.Space) -> PlannedPolicy:
    """``module:callable`` policy: ``--policy fasteval.testing.fault_plan:make_planned_policy``."""
    return PlannedPolicy(action_space.policy_faults if isinstance(action_space, PlannedActionSpace) else None)


def parity_action(obs: np.ndarray) -> int:
    """The planned policy's action as ``expected_episode`` wants it (the parity bit)."""
    return int(round(float(obs[-1])))


def env_outcome(seed: int, faults: Sequence[tuple[str, int]], retries: int, max_steps: int | None = None,
                policy_fault: tuple[str, int] | None = None) -> list[tuple[str, int, bool]]:
    """What a run must record for ``seed`` when every fault that fires is seen by the engine:
    ``[(cause, attempt, final), ...]`` in order, ``cause`` being ``"env:<index>"`` for planned env
    fault ``index`` or ``"policy"`` for a NaN action. The episode was given up iff the last entry
    is final.

    An attempt meets the next planned env fault if it lies within the episode (``step < length``)
    and before the policy's NaN step: the action for step ``t`` is chosen before step ``t`` is
    sent, so a NaN at step ``t`` comes first, and an env fault at step ``t`` only beats a NaN at a
    later step (a reset fault beats every NaN).
    """
    length = episode_length(seed) if max_steps is None else min(episode_length(seed), max_steps)
    nan_at = policy_fault[1] if policy_fault is not None and policy_fault[0] == "nan" and policy_fault[1] < length else None
    out: list[tuple[str, int, bool]] = []
    index = 0
    while True:
        fault_at = faults[index][1] if index < len(faults) and faults[index][1] < length else None
        if nan_at is not None and (fault_at is None or nan_at <= fault_at):
            out.append(("policy", index, True))
            return out
        if fault_at is None:
            return out
        index += 1
        out.append((f"env:{index - 1}", index, index > retries))
        if index > retries:
            return out
