"""The step buffers of a worker pool, in one shared mapping, and the one object that owns it.

The step buffers (observations, every Dict key; actions; rewards; terminated; truncated;
success; each worker's progress) live in one mapping allocated once (an anonymous ``memfd``, or
an unlinked temp file where there is none). :class:`Layout` says where each buffer lives;
:class:`SharedBuffers` owns the descriptor, the mapping and its views, in the parent
(:meth:`SharedBuffers.allocate`) and in each worker (:meth:`SharedBuffers.attach`). A replaced
worker attaches to the same memory, so the views the engine holds stay valid for the whole life
of the pool.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from fasteval.core.slots import allocate_obs_buffer

_ALIGN = 64


@dataclass(frozen=True)
class _Field:
    name: str
    shape: tuple
    dtype: str
    offset: int


@dataclass(frozen=True)
class Layout:
    """Where each step buffer lives in the shared mapping (picklable; rebuilt into views anywhere)."""

    fields: tuple
    size: int
    obs_keys: tuple | None
    """Dict observation keys (``obs.<key>`` fields), or ``None`` for an array observation (``obs``)."""

    @classmethod
    def plan(cls, observation_space: gym.Space, action_shape: tuple, action_dtype: np.dtype, n_slots: int,
             n_workers: int) -> "Layout":
        arrays: list[tuple[str, tuple, np.dtype]] = []
        obs = allocate_obs_buffer(observation_space, 1)  # validates the space; shapes per slot
        if isinstance(obs, dict):
            keys = tuple(obs)
            arrays += [(f"obs.{k}", (n_slots, *v.shape[1:]), v.dtype) for k, v in obs.items()]
        else:
            keys = None
            arrays.append(("obs", (n_slots, *obs.shape[1:]), obs.dtype))
        arrays += [
            ("actions", (n_slots, *action_shape), np.dtype(action_dtype)),
            ("rewards", (n_slots,), np.dtype(np.float64)),
            ("terminated", (n_slots,), np.dtype(bool)),
            ("truncated", (n_slots,), np.dtype(bool)),
            ("success", (n_slots,), np.dtype(bool)),
            ("progress", (n_workers, 3), np.dtype(np.int64)),  # per worker: seq, slot, stage being worked on
        ]
        fields, offset = [], 0
        for name, shape, dtype in arrays:
            fields.append(_Field(name, tuple(int(s) for s in shape), np.dtype(dtype).str, offset))
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return cls(tuple(fields), max(offset, _ALIGN), keys)

    def views(self, buffer: Any) -> dict[str, np.ndarray]:
        out = {}
        for f in self.fields:
            dtype = np.dtype(f.dtype)
            count = int(np.prod(f.shape, dtype=np.int64))
            out[f.name] = np.frombuffer(buffer, dtype=dtype, count=count, offset=f.offset).reshape(f.shape)
        return out

    def obs(self, views: dict[str, np.ndarray]) -> Any:
        if self.obs_keys is None:
            return views["obs"]
        return {k: views[f"obs.{k}"] for k in self.obs_keys}


class SharedFd:
    """A file descriptor of the shared mapping that crosses into spawned/forkserver workers.

    Pickled with :class:`multiprocessing.reduction.DupFd`, as connections are, so the mapping needs
    no name in the file system (nothing to leak if the parent is killed).
    """

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return (_rebuild_fd, (reduction.DupFd(self.fd),))


def _rebuild_fd(dup: Any) -> SharedFd:
    return SharedFd(dup.detach())


def _anonymous_fd(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("fasteval-pool")
    else:  # no memfd: an unlinked temp file (page cache backed)
        fd, path = tempfile.mkstemp(prefix="fasteval-pool-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


class SharedBuffers:
    """The one owner of a pool's shared mapping: its descriptor, the mapping, and the buffer views.

    Attributes: ``layout``; ``obs`` (an array, or a dict of arrays); ``actions``, ``rewards``,
    ``terminated``, ``truncated``, ``success`` (``[B, ...]``); ``progress`` (``[W, 3]``);
    ``pinned`` (whether :meth:`register_pinned` page-locked the mapping for CUDA).
    The views stay valid after :meth:`close` for as long as this object lives.
    """

    def __init__(self, layout: Layout, fd: int):
        self.layout, self.fd = layout, fd
        self.mapping = mmap.mmap(fd, layout.size)
        self.views = layout.views(self.mapping)
        self.obs = layout.obs(self.views)
        self.actions, self.rewards, self.terminated, self.truncated, self.success, self.progress = (
            self.views[k] for k in ("actions", "rewards", "terminated", "truncated", "success", "progress"))
        self.pinned = False
        self._closed = False

    @classmethod
    def allocate(cls, layout: Layout) -> "SharedBuffers":
        """New zeroed shared memory for ``layout`` (the parent's side); every progress row is ``-1``."""
        buffers = cls(layout, _anonymous_fd(layout.size))
        buffers.progress[:] = -1
        return buffers

    @classmethod
    def attach(cls, layout: Layout, shared: SharedFd) -> "SharedBuffers":
        """The same memory, mapped in a worker from the descriptor the parent sent."""
        return cls(layout, shared.fd)

    def shared_fd(self) -> SharedFd:
        """The descriptor to send to a worker (duplicated into it when pickled)."""
        return SharedFd(self.fd)

    def register_pinned(self) -> bool:
        """Page-lock the mapping for CUDA (``cudaHostRegister``) so host -> device copies of ``obs``
        go straight from the workers' memory. Sets and returns :attr:`pinned`: ``False`` without CUDA
        or when the registration fails (pinning is an optimization: the copy is then staged).
        The registration lasts as long as the process (the engine's tensors may outlive the pool)."""
        if self.pinned:
            return True
        try:
            import torch

            if not torch.cuda.is_available():
                return False
            base = np.frombuffer(self.mapping, dtype=np.uint8)
            self.pinned = int(torch.cuda.cudart().cudaHostRegister(base.ctypes.data, base.nbytes, 0)) == 0
        except Exception:
            self.pinned = False
        return self.pinned

    def close(self) -> None:
        """Close the descriptor (no worker can attach any more). The mapping and its views stay
        readable; undoing a CUDA registration (:meth:`register_pinned`) belongs here too."""
        if self._closed:
            return
        self._closed = True
        try:
            os.close(self.fd)
        except OSError:
            pass
