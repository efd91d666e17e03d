"""Known-answer envs and tiny policies, shipped so users can test their own setups.

Every episode of :class:`KnownAnswerEnv` is a pure function of its reset seed (and,
for the reward bonus, of the actions), so an evaluation's per-episode numbers can
be checked exactly against :func:`expected_episode`.
"""

from fasteval.testing.envs import KNOWN_ANSWER_ID, KnownAnswerEnv, expected_episode, make_known_answer_env
from fasteval.testing.policies import ParityPolicy, StepCounterPolicy, WaveOnlyPolicy

__all__ = [
    "KNOWN_ANSWER_ID",
    "KnownAnswerEnv",
    "ParityPolicy",
    "StepCounterPolicy",
    "WaveOnlyPolicy",
    "expected_episode",
    "make_known_answer_env",
]
