"""Hooks for training loops: each builds one fasteval spec and one engine (built once, called at every evaluation).

* :mod:`fasteval.integrations.sb3`: ``EvalCallback``, a drop-in for Stable-Baselines3's;
* :mod:`fasteval.integrations.torchrl`: ``FastevalHook``, a TorchRL trainer hook (or a plain call in a hand-written
  loop) that logs through TorchRL's logger;
* :mod:`fasteval.integrations.lerobot_train`: ``fasteval-lerobot-train``, ``lerobot-train`` with its periodic
  evaluation run by fasteval.

None of them imports its library until it is used. They are doors: no rollout logic of their own.
"""
