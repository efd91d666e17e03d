"""Per-slot buffers on the policy device that the robot steps share: the action-chunk queue
(:mod:`~fasteval.robot.buffers.chunk_queue`, used by fasteval's policy runner and LeRobot's) and
the rollout buffer that episode data is recorded into (:mod:`~fasteval.robot.buffers.rollout_buffer`).

A sub-package of its own, so that ``robot/policies``, ``robot/lerobot`` and ``robot/recording.py``
all import it without importing each other. Core needs neither.
"""
