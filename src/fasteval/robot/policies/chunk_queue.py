"""Per-slot action queues for policies that return action chunks (ACT / Diffusion style).

See :mod:`fasteval.robot.policies.runner` for when a chunk queue is used and how results stay
independent of the batch size.
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


class ChunkQueue:
    """Per-slot action queues over a chunking policy call. ``queue(obs) -> actions [B, ...]``.

    Queue positions live on the host (``pos``), so deciding whether the policy must be called
    needs no device sync. On a CUDA device a mirror of the positions is kept on the device and
    updated with device ops (no index tensor, no host->device copy of the positions per step);
    the refill mask crosses in one pinned ``non_blocking`` copy, only on steps with a refill.
    """

    def __init__(self, call: Callable[[Any], torch.Tensor], sample: torch.Tensor, n_exec: int,
                 mirror: bool | None = None):
        """``mirror``: keep device-side positions (default: on a non-CPU device; tests force it on CPU)."""
        self.call = call
        self.n_slots, self.chunk = int(sample.shape[0]), int(sample.shape[1])
        self.n_exec = n_exec
        self.item_shape = tuple(sample.shape[2:])
        self.device = sample.device
        self.queue = torch.zeros((self.n_slots, n_exec, *self.item_shape), dtype=sample.dtype, device=sample.device)
        self.pos = np.full(self.n_slots, n_exec, dtype=np.int64)  # n_exec = empty
        self._rows = torch.arange(self.n_slots, device=self.device)
        self._mirror = self.device.type != "cpu" if mirror is None else mirror
        pin = self._mirror and torch.cuda.is_available()
        self._refill = torch.zeros(self.n_slots, dtype=torch.bool, pin_memory=pin)  # host: slots that take a new chunk
        if self._mirror:
            self._device_pos = torch.full((self.n_slots,), n_exec, dtype=torch.int64, device=self.device)
            self._device_refill = torch.zeros(self.n_slots, dtype=torch.bool, device=self.device)
        else:
            self._device_pos = torch.from_numpy(self.pos)  # shares memory with pos
            self._device_refill = self._refill
        self._mask_shape = (-1, *([1] * (self.queue.ndim - 1)))

    def drop(self, slots: Sequence[int]) -> None:
        """Empty the queues of ``slots`` (they start new episodes; the next call refills them)."""
        self.pos[np.asarray(slots, dtype=np.int64)] = self.n_exec

    def __call__(self, obs: Any) -> torch.Tensor:
        need = self.pos >= self.n_exec
        if need.any():
            chunk = self.call(obs)
            if tuple(chunk.shape) != (self.n_slots, self.chunk, *self.item_shape):
                raise ActionSpaceMismatchError(
                    f"the chunking policy returned shape {tuple(chunk.shape)}; on its first call it returned "
                    f"{(self.n_slots, self.chunk, *self.item_shape)}. The chunk shape must not change."
                )
            fresh = chunk[:, : self.n_exec].to(self.queue.dtype)
            if need.all():
                self.queue.copy_(fresh)
                if self._mirror:
                    self._device_pos.zero_()
            else:
                # The previous refill's copy has landed: every step ends with the actions' device->host sync.
                self._refill.numpy()[:] = need
                mask = self._device_refill
                if self._mirror:
                    mask.copy_(self._refill, non_blocking=True)
                    self._device_pos.masked_fill_(mask, 0)
                torch.where(mask.view(self._mask_shape), fresh, self.queue, out=self.queue)
            self.pos[need] = 0
        actions = self.queue[self._rows, self._device_pos]
        self.pos += 1  # on CPU this moves _device_pos too (shared memory)
        if self._mirror:
            self._device_pos.add_(1)
        return actions
