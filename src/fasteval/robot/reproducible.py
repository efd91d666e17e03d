"""Env kinds whose own physics is not bit-reproducible from run to run: what a run's guarantee must say.

The canonical policy call (:mod:`fasteval.core.policy_blocks`) makes every row of the policy independent of the
batch; an episode is then bitwise the same at any batch size if the env itself is. Some are not, by themselves:

* **PushT** (gym-pusht, fasteval's fast subclass of it, LeRobot's ``pusht`` env type): pymunk orders its contacts by
  memory address, so an episode's rewards can differ in the last bit between two runs in one process, at any batch
  size, with or without skipped renders (measured: 1 ulp in a sum of rewards; lengths and success agree).
* **Meta-World through LeRobot's env** (``--env.type=metaworld`` with LeRobot): an episode's first frame depends on
  the episode its env instance ran before (Meta-World's reset leaves the goal marker's world position computed
  from the previous episode's object height: :mod:`fasteval.robot.env_kinds.unread` says how). A policy that reads
  that frame acts on it, so an episode's numbers depend on which episode its slot ran before: bitwise equal at the
  same batch size, vectorization and reset mode (the ledger hands episodes to slots in a fixed order), to rounding
  (1e-5 in a return between -b 1 and 2) across them, and a video replayed in a fresh env would not be frame for frame the
  episode's (its videos are rendered during the run).

Declared here, by the env's reference, never found by trying. :func:`physics_rounding` gives the reason, which the
run's ``meta["env_rounding"]`` records and its ``guarantee`` names.
"""

from __future__ import annotations

from typing import Any, Mapping

PUSHT_REASON = ("PushT's physics (pymunk) orders contacts by memory address: an episode's rewards can differ in the "
                "last bit from run to run, whatever the batch size")
METAWORLD_REASON = ("LeRobot's Meta-World shows an episode's first frame with the goal marker where the env's previous "
                    "episode left it: an episode depends on the episode its slot ran before (bitwise at the same batch "
                    "size, vectorization and reset mode)")


def physics_rounding(env: Any, env_kwargs: Mapping[str, Any]) -> str | None:
    """Why ``env`` (an env reference and its kwargs) is not bit-reproducible by itself, or ``None``."""
    if not isinstance(env, str):
        return None
    from fasteval.robot.fast_envs import FAST_PUSHT
    from fasteval.robot.lerobot.envs import ENV_REF as LEROBOT_ENV_REF

    if env.startswith("gym_pusht/") or env == FAST_PUSHT:
        return PUSHT_REASON
    if env == LEROBOT_ENV_REF and str(env_kwargs.get("type", "")) == "pusht":
        return PUSHT_REASON
    if env == LEROBOT_ENV_REF and str(env_kwargs.get("type", "")) == "metaworld":
        return METAWORLD_REASON
    return None
