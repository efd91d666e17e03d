"""Known-answer envs and tiny policies, shipped so users can test their own setups.

Every episode of :class:`KnownAnswerEnv` is a pure function of its reset seed (and,
for the reward bonus, of the actions), so an evaluation's per-episode numbers can
be checked exactly against :func:`expected_episode`. :class:`FaultPlanEnv` and
:class:`PlannedPolicy` (:mod:`fasteval.testing.fault_plan`) add faults on a plan: raises,
crashes and hangs per seed and attempt, NaN or hung actions. :class:`CheckpointFamily`
(:mod:`fasteval.testing.checkpoints`) is a family of known-answer checkpoints: policy k succeeds on
seed s with probability p_k, exactly, with an optional shared per-seed difficulty; it runs as real
policies on the Bernoulli env and as a vectorised simulator with the same outcomes.

Importing this package registers ``fasteval/KnownAnswer-v0`` with gymnasium
(:func:`~fasteval.testing.envs.register_envs`); ``import fasteval`` alone registers nothing.
The other names are imported on first use: an env worker that builds ``fasteval/KnownAnswer-v0``
imports :mod:`fasteval.testing.envs` alone, not torch (which the policies need), so a worker
pool starts in a fraction of the time.
"""

from __future__ import annotations

import importlib
from typing import Any

from fasteval.testing.envs import register_envs

_WHERE = {
    "CheckpointFamily": "checkpoints",
    "KNOWN_ANSWER_ID": "envs",
    "KnownAnswerEnv": "envs",
    "expected_episode": "envs",
    "make_known_answer_env": "envs",
    "FaultPlanEnv": "fault_plan",
    "PlannedPolicy": "fault_plan",
    "make_fault_plan_env": "fault_plan",
    "make_planned_policy": "fault_plan",
    "ParityPolicy": "policies",
    "StepCounterPolicy": "policies",
    "WaveOnlyPolicy": "policies",
}

__all__ = sorted([*_WHERE, "register_envs"])

register_envs()


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fasteval.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fasteval.testing.{module}"), name)
