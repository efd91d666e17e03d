"""Episode data on disk (``--save-episodes DIR``): a TorchRL replay buffer folder.

The folder holds ``result.episode_data`` (see :mod:`fasteval.robot.recording`): one row per step of every
reported episode, sorted by episode then frame, in TorchRL's key layout (``observation``, ``action``,
``("next", "observation")``, ``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")``,
``("next", "truncated")``, ``episode``, ``seed``, ``step_count``, ...). With TorchRL installed it is written
by TorchRL itself, ``TensorDictReplayBuffer(storage=LazyMemmapStorage(n_steps))`` filled with the steps and
``dumps(DIR)``, so it loads back as TorchRL loads its own buffers:

    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(n_steps)); rb.loads(DIR)   # n_steps: the run's, exactly

``rb.loads`` also reads ``prefetch.pkl``, a pickle TorchRL writes beside the data: load folders you trust
that way. :func:`load_replay_buffer` needs neither the size nor the pickle: it maps ``DIR/storage`` (a
TensorDict memory map: one ``.memmap`` file per key plus ``meta.json``, no code) and fills a fresh
``TensorDictReplayBuffer`` over a ``LazyMemmapStorage`` with it. :func:`load_episodes` maps the steps
themselves, as a TensorDict (also without TorchRL, which writes only the ``storage`` folder then).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fasteval.types.errors import UserInputError

STORAGE = "storage"
"""The folder of a TorchRL replay buffer's dump that holds its data (a TensorDict memory map)."""


def check_episode_folder(folder: str | os.PathLike) -> Path:
    """Raise :class:`UserInputError` unless ``folder`` is absent or an empty folder (checked before a run)."""
    path = Path(folder)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserInputError(f"--save-episodes {path}: expected a new or empty folder, got an existing "
                             f"{'folder with files' if path.is_dir() else 'file'}. Choose another path.")
    return path


def save_episodes(data: Any, folder: str | os.PathLike) -> int:
    """Write ``data`` (a TensorDict ``[steps]``) into ``folder`` as a TorchRL replay buffer (module docstring);
    returns the number of episodes."""
    path = check_episode_folder(folder)
    path.mkdir(parents=True, exist_ok=True)
    data = data.cpu()
    try:
        from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    except ImportError:
        TensorDictReplayBuffer = None  # noqa: N806
    if TensorDictReplayBuffer is None or not len(data):
        data.memmap(prefix=str(path / STORAGE))  # the same storage folder, without the buffer's own files
    else:
        buffer = TensorDictReplayBuffer(storage=LazyMemmapStorage(len(data)))
        buffer.extend(data)
        buffer.dumps(path)
    return len(set(data["episode"].tolist())) if len(data) else 0


def load_episodes(folder: str | os.PathLike) -> Any:
    """The steps saved by :func:`save_episodes`, memory-mapped (a TensorDict; nothing is unpickled)."""
    from tensordict import TensorDict

    path = Path(folder)
    return TensorDict.load_memmap(str(path / STORAGE if (path / STORAGE).is_dir() else path))


def load_replay_buffer(folder: str | os.PathLike, max_size: int | None = None, **buffer_kwargs: Any) -> Any:
    """A TorchRL ``TensorDictReplayBuffer`` over a ``LazyMemmapStorage`` holding the steps of ``folder``
    (``buffer_kwargs`` go to the buffer: ``sampler=``, ``batch_size=``...; the steps are copied into its new storage,
    so the folder is never written). ``max_size``: the storage's size, at least the folder's steps (``None``:
    exactly them); a larger buffer leaves room for more steps. TorchRL's own ``rb.loads(DIR)`` needs a storage of
    exactly the run's steps (another size fails in TorchRL with a bare shape error); this loader takes any size
    that holds them, and says so when one does not."""
    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer

    data = load_episodes(folder)
    if "storage" in buffer_kwargs:
        raise UserInputError(f"load_replay_buffer({str(folder)!r}, storage=...): the loader makes the storage itself (a "
                             f"LazyMemmapStorage); give its size as max_size= (at least the folder's {len(data)} steps).")
    size = len(data) if max_size is None else max_size
    if not isinstance(size, int) or isinstance(size, bool) or size < len(data):
        raise UserInputError(f"load_replay_buffer({str(folder)!r}, max_size={max_size!r}): the folder holds {len(data)} "
                             f"steps; expected a max_size of at least {len(data)} (or None: exactly the steps), so "
                             f"that no step is dropped.")
    buffer = TensorDictReplayBuffer(storage=LazyMemmapStorage(max(1, size)), **buffer_kwargs)
    if len(data):
        buffer.extend(data)
    return buffer

