"""LeRobot policies and envs in fasteval (the ``lerobot`` extra; Python >= 3.12).

* :func:`is_lerobot_checkpoint` (no LeRobot import): a folder whose ``config.json`` has ``"type"``;
* :func:`fasteval.robot.lerobot.loader.load_lerobot_policy`: the checkpoint through LeRobot's API, as a
  fasteval per-env policy (:mod:`fasteval.robot.lerobot.policy`);
* :func:`fasteval.robot.lerobot.envs.make_env`: one task's env built by LeRobot's env config and factory;
* :mod:`fasteval.robot.lerobot.testing`: small random ACT / Diffusion checkpoints for tests.

This package is a robot-steps layer: it imports fasteval's errors and core protocols, never the doors.
"""

from fasteval.robot.lerobot.checkpoint import is_lerobot_checkpoint, lerobot_policy_type
from fasteval.robot.lerobot.extra import require_lerobot

__all__ = ["is_lerobot_checkpoint", "lerobot_policy_type", "require_lerobot"]
