"""Per-slot action queues for policies that return action chunks (ACT / Diffusion style).

One queue for every chunking policy: fasteval's own (:mod:`fasteval.robot.policies.runner` says when a
chunk queue is used and how results stay independent of the batch size) and LeRobot's
(:mod:`fasteval.robot.lerobot.policy`). It sits in ``robot/buffers/``, beside both robot packages,
so that both import it; core never needs it (a runner's chunk queue is the runner's business).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

from fasteval.types.errors import ActionSpaceMismatchError


def chunk_length(raw: torch.Tensor, action_space: gym.Space, batch: int) -> int | None:
    """The chunk length if ``raw`` (a dry-run output) is an action chunk, else ``None``."""
    if not isinstance(raw, torch.Tensor) or raw.ndim < 2 or raw.shape[0] != batch:
        return None
    if isinstance(action_space, gym.spaces.Discrete):
        if raw.ndim == 2 and not raw.is_floating_point() and raw.shape[1] >= 2:
            return int(raw.shape[1])
        if raw.ndim == 3 and raw.is_floating_point() and raw.shape[2] == int(action_space.n):
            return int(raw.shape[1])
        return None
    shape = tuple(action_space.shape or ())
    if raw.ndim == 2 + len(shape) and tuple(raw.shape[2:]) == shape:
        return int(raw.shape[1])
    return None


class StagedUpload:
    """A small host array sent to the device in one pinned ``non_blocking`` copy (no sync, no pageable
    upload); on a CPU device, the host tensor itself. The staging buffer is reused: safe, since every
    fasteval step ends with the actions' device->host sync, so the previous copy has landed."""

    def __init__(self, n: int, dtype: torch.dtype, device: torch.device):
        on_device = torch.device(device).type != "cpu"
        self.host = torch.zeros(n, dtype=dtype, pin_memory=on_device and torch.cuda.is_available())
        self.device_side = torch.zeros(n, dtype=dtype, device=device) if on_device else self.host

    def __call__(self, values: np.ndarray) -> torch.Tensor:
        """``values`` (at most ``n``) on the device, as a view of the device buffer."""
        k = len(values)
        self.host.numpy()[:k] = values
        if self.device_side is self.host:
            return self.host[:k]
        out = self.device_side[:k]
        out.copy_(self.host[:k], non_blocking=True)
        return out


class ChunkQueue:
    """Per-slot action queues over a chunking policy call. ``queue(obs) -> actions [B, ...]``.

    Queue positions live on the host (``pos``), so deciding whether the policy must be called
    needs no device sync. On a CUDA device a mirror of the positions is kept on the device and
    updated with device ops (no index tensor, no host->device copy of the positions per step);
    the refill mask crosses in one pinned ``non_blocking`` copy, only on steps with a refill.

    Two ways to drive it:

    * ``queue(obs)``: calls ``call(obs)`` (the whole batch) on steps where some slot's queue is
      empty, and pops one action per slot (:class:`fasteval.robot.policies.runner.RobotPolicyRunner`);
    * :meth:`needed`, :meth:`fill`, :meth:`pop`: the caller computes the chunks itself (only on the
      rows that need one, if it likes; the LeRobot adapter, :mod:`fasteval.robot.lerobot.policy`).
      Built with ``sample=None`` and ``n_slots``, the storage is allocated by the first :meth:`fill`.
    """

    def __init__(self, call: Callable[[Any], torch.Tensor] | None, sample: torch.Tensor | None, n_exec: int,
                 mirror: bool | None = None, *, n_slots: int | None = None):
        """``mirror``: keep device-side positions (default: on a non-CPU device; tests force it on CPU)."""
        if sample is None and n_slots is None:
            raise TypeError("ChunkQueue needs a sample chunk or n_slots")
        self.call = call
        self.n_slots = int(sample.shape[0]) if sample is not None else int(n_slots)  # type: ignore[arg-type]
        self.n_exec = int(n_exec)
        self.pos = np.full(self.n_slots, self.n_exec, dtype=np.int64)  # n_exec = empty
        self._mirror_asked = mirror
        self.queue: torch.Tensor | None = None
        if sample is not None:
            self.chunk = int(sample.shape[1])
            self._allocate(sample.shape[2:], sample.dtype, sample.device)

    def _allocate(self, item_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        """(Re)allocate the storage; queued actions move over, the positions stay."""
        old = self.queue
        self.item_shape, self.device = tuple(item_shape), torch.device(device)
        self.queue = torch.zeros((self.n_slots, self.n_exec, *self.item_shape), dtype=dtype, device=self.device)
        if old is not None and old.shape == self.queue.shape:
            self.queue.copy_(old)
        self._rows = torch.arange(self.n_slots, device=self.device)
        self._mirror = self.device.type != "cpu" if self._mirror_asked is None else self._mirror_asked
        self._refill = StagedUpload(self.n_slots, torch.bool, self.device if self._mirror else torch.device("cpu"))
        """Slots that take a new chunk: host booleans, and their device copy (the mirror's)."""
        if self._mirror:
            self._device_pos = torch.from_numpy(self.pos).to(self.device, copy=True)  # once per allocation
        else:
            self._device_pos = torch.from_numpy(self.pos)  # shares memory with pos
        self._mask_shape = (-1, *([1] * (self.queue.ndim - 1)))

    def drop(self, slots: Sequence[int]) -> None:
        """Empty the queues of ``slots`` (they start new episodes; the next call refills them)."""
        self.pos[np.asarray(slots, dtype=np.int64)] = self.n_exec

    def needed(self) -> np.ndarray:
        """Which slots' queues are empty (host booleans; no device sync)."""
        return self.pos >= self.n_exec

    def __call__(self, obs: Any) -> torch.Tensor:
        need = self.needed()
        if need.any():
            assert self.call is not None and self.queue is not None
            chunk = self.call(obs)
            if tuple(chunk.shape) != (self.n_slots, self.chunk, *self.item_shape):
                raise ActionSpaceMismatchError(
                    f"the chunking policy returned shape {tuple(chunk.shape)}; on its first call it returned "
                    f"{(self.n_slots, self.chunk, *self.item_shape)}. The chunk shape must not change."
                )
            self.fill(chunk, need)
        return self.pop()

    def fill(self, chunk: torch.Tensor, need: np.ndarray) -> None:
        """The slots in ``need`` (host booleans) take the first ``n_exec`` actions of their row of ``chunk``.

        ``chunk`` has a row per slot (``[n_slots, >= n_exec, ...]``: rows of other slots are ignored) or a row
        per needing slot, in slot order (``[need.sum(), >= n_exec, ...]``)."""
        fresh = chunk[:, : self.n_exec]
        if self.queue is None or self.queue.shape[2:] != fresh.shape[2:] or self.queue.device != fresh.device:
            self._allocate(fresh.shape[2:], fresh.dtype if self.queue is None else self.queue.dtype, fresh.device)
        assert self.queue is not None
        fresh = fresh.to(self.queue.dtype)
        if need.all():
            self.queue.copy_(fresh)
            if self._mirror:
                self._device_pos.zero_()
        else:
            mask = self._refill(need)
            if self._mirror:
                self._device_pos.masked_fill_(mask, 0)
            rows = mask.view(self._mask_shape)
            if fresh.shape[0] == self.n_slots:
                torch.where(rows, fresh, self.queue, out=self.queue)
            else:  # one row per needing slot: scattered in slot order, with no index tensor
                self.queue.masked_scatter_(rows.expand_as(self.queue), fresh.contiguous())
        self.pos[need] = 0

    def pop(self) -> torch.Tensor:
        """Each slot's next action ``[n_slots, ...]``; its queue moves on by one."""
        assert self.queue is not None, "ChunkQueue.pop before the first fill"
        actions = self.queue[self._rows, self._device_pos]
        self.pos += 1  # on CPU this moves _device_pos too (shared memory)
        if self._mirror:
            self._device_pos.add_(1)
        return actions
