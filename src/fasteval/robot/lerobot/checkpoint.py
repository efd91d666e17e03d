"""Recognise a LeRobot checkpoint folder without importing LeRobot.

A folder written by LeRobot's ``save_pretrained`` holds ``config.json`` whose ``"type"`` names
the policy class (``act``, ``diffusion``, ``pi0``, ...), next to ``model.safetensors`` and the
``policy_preprocessor*`` / ``policy_postprocessor*`` files. fasteval's own checkpoints have
``"architecture"`` instead, so the two never clash.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_NAME = "config.json"


def lerobot_policy_type(path: str | Path) -> str | None:
    """The ``"type"`` in ``path/config.json`` if it is a LeRobot policy config, else ``None`` (never raises)."""
    try:
        config = json.loads((Path(path) / CONFIG_NAME).read_text())
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(config, dict) or "architecture" in config:
        return None
    kind = config.get("type")
    return kind if isinstance(kind, str) and kind else None


def is_lerobot_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder whose ``config.json`` has LeRobot's ``"type"`` field."""
    return lerobot_policy_type(path) is not None
