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

import ctypes
import logging
import mmap
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from fasteval.core.slots import allocate_obs_buffer

_ALIGN = 64
logger = logging.getLogger(__name__)


def _cudart() -> Any:
    """CUDA's runtime (``torch.cuda.cudart()``), or None without CUDA. A seam for the fake registry
    of :mod:`fasteval.testing.fake_cuda`."""
    import torch

    return torch.cuda.cudart() if torch.cuda.is_available() else None


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
            ("reads", (n_slots,), np.dtype(bool)),  # per slot: the coming step's observation is read (core/unread.py)
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
    """The one owner of a pool's shared mapping: its descriptor, the mapping, the buffer views and
    the mapping's CUDA registration.

    Attributes: ``layout``; ``obs`` (an array, or a dict of arrays); ``actions``, ``rewards``,
    ``terminated``, ``truncated``, ``success`` (``[B, ...]``); ``progress`` (``[W, 3]``);
    ``pinned`` (whether the mapping is page-locked for CUDA now: :meth:`register_pinned`
    succeeded and :meth:`close` has not undone it). Copy paths follow ``pinned``, never
    ``tensor.is_pinned()``, which reads CUDA's own registry (see :meth:`close`).
    """

    def __init__(self, layout: Layout, fd: int):
        self.layout, self.fd = layout, fd
        self.mapping = mmap.mmap(fd, layout.size)
        self.views = layout.views(self.mapping)
        self.obs = layout.obs(self.views)
        self.actions, self.rewards, self.terminated, self.truncated, self.success, self.progress = (
            self.views[k] for k in ("actions", "rewards", "terminated", "truncated", "success", "progress"))
        self.reads = self.views["reads"]
        self.pinned = False
        self._registered: tuple[Any, int] | None = None  # (cudart, address) while registered
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

    def address(self) -> int:
        """The mapping's first byte in this process's address space."""
        view = (ctypes.c_char * self.layout.size).from_buffer(self.mapping)
        try:
            return ctypes.addressof(view)
        finally:
            del view  # the export must not outlive the call (close unmaps only without exports)

    def register_pinned(self) -> bool:
        """Page-lock the mapping for CUDA (``cudaHostRegister``) so host -> device copies of ``obs``
        go straight from the workers' memory. Sets and returns :attr:`pinned`: ``False`` without CUDA,
        after :meth:`close`, or when the registration fails (its return code is logged; pinning is an
        optimization: the copy is then staged). Called once the policy device is known to be a GPU
        (registering creates a CUDA context)."""
        if self.pinned or self._closed:
            return self.pinned
        try:
            cudart = _cudart()
            if cudart is None:
                return False
            address = self.address()
            code = int(cudart.cudaHostRegister(address, self.layout.size, 0))
        except Exception as exc:  # pinning is an optimization
            logger.warning("cudaHostRegister of the worker pool's shared buffers raised %s: %s; observations are "
                           "staged through a pinned buffer", type(exc).__name__, exc)
            return False
        if code != 0:
            logger.warning("cudaHostRegister of the worker pool's shared buffers (%d bytes at %#x) returned %d; "
                           "observations are staged through a pinned buffer", self.layout.size, address, code)
            return False
        logger.debug("cudaHostRegister(%#x, %d) returned 0", address, self.layout.size)
        self._registered, self.pinned = (cudart, address), True
        return True

    def close(self) -> None:
        """Undo the CUDA registration (``cudaHostUnregister``, its return code logged) and close the
        descriptor (no worker can attach any more). The mapping is unmapped after that, when the last
        view of it goes (this object's, the pool's, the engine's tensors): until then the buffers stay
        readable, no longer pinned.

        Order matters: a mapping unmapped while registered leaves its range in CUDA's registry, so the
        next mapping at the same virtual address (three engines built one after another get it) fails
        to register, while ``is_pinned()`` still says True for it, and DMA reads the freed pages.
        Collected without :meth:`close`, this object unregisters too.
        """
        if self._closed:
            return
        self._closed = True
        self.unregister()
        try:
            os.close(self.fd)
        except OSError:
            pass

    def unregister(self) -> None:
        """``cudaHostUnregister`` the mapping if it is registered (the return code is logged)."""
        if self._registered is None:
            return
        (cudart, address), self._registered, self.pinned = self._registered, None, False
        try:
            code = int(cudart.cudaHostUnregister(address))
        except Exception as exc:
            logger.warning("cudaHostUnregister of the worker pool's shared buffers raised %s: %s", type(exc).__name__, exc)
            return
        (logger.debug if code == 0 else logger.warning)("cudaHostUnregister(%#x) returned %d", address, code)

    def __del__(self) -> None:
        try:
            self.unregister()
        except Exception:
            pass
