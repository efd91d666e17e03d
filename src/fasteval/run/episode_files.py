"""Episode data on disk (``--save-episodes DIR``): a TensorDict memory map, loaded back with :func:`load_episodes`.

The folder holds ``result.episode_data`` (see :mod:`fasteval.robot.recording`): one row per step of every
reported episode, sorted by episode then frame, with ``episode_index``, ``frame_index``, ``index``,
``action``, ``next.*`` and the observation keys. It is written with ``TensorDict.memmap`` (one
``.memmap`` file per key plus ``meta.json``): ``load_episodes(DIR)`` (or
``tensordict.TensorDict.load_memmap(DIR)``) maps it back without reading it all into memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fasteval.types.errors import UserInputError


def check_episode_folder(folder: str | os.PathLike) -> Path:
    """Raise :class:`UserInputError` unless ``folder`` is absent or an empty folder (checked before a run)."""
    path = Path(folder)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserInputError(f"--save-episodes {path}: expected a new or empty folder, got an existing "
                             f"{'folder with files' if path.is_dir() else 'file'}. Choose another path.")
    return path


def save_episodes(data: Any, folder: str | os.PathLike) -> int:
    """Write ``data`` (a TensorDict ``[steps]``) into ``folder`` as a memory map; returns the number of episodes."""
    path = check_episode_folder(folder)
    path.mkdir(parents=True, exist_ok=True)
    data.cpu().memmap(prefix=str(path))
    return len(set(data["episode_index"].tolist())) if len(data) else 0


def load_episodes(folder: str | os.PathLike) -> Any:
    """The TensorDict saved by :func:`save_episodes` (memory-mapped)."""
    from tensordict import TensorDict

    return TensorDict.load_memmap(str(folder))
