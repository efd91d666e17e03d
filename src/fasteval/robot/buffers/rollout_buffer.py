"""The rollout buffer: every step of every running episode, in a TensorDict preallocated on the policy device.

Layout: one TensorDict ``[B, T]`` (slot, frame) on the policy device, allocated once per engine run
(``T`` = the step cap; without a cap it starts at 256 frames and doubles when an episode outgrows it:
a copy per doubling, never per step). Keys:

=========================  =====================================================================
``observation``            the observation the policy acted on at frame t: a Tensor, or a TensorDict
                           of the env's keys, with the env's dtypes (images stay uint8 HWC)
``action``                 the action sent to the env (the env's action dtype)
``next.reward``            float64; ``next.terminated``, ``next.truncated``, ``next.success``: bool
=========================  =====================================================================

Writes, per step (:meth:`RolloutBuffer.write`), all in place:

* observations come from the device observation buffer the policy read (``source``). On a GPU
  it still holds frame t's observation when the step is folded in (the next host-to-device copy
  comes later), so row ``(slot, t)`` is written from it, device to device. On a CPU policy device
  ``source`` *is* the env's host buffer, which already holds frame t + 1: it is written one frame
  ahead (``start`` writes frame 0), into ``T + 1`` observation frames;
* rewards, flags, actions and the (slot, frame) index of the stepped slots are gathered into one
  pinned host packet (one buffer, the step fields in one byte record per slot: :class:`_StepRecord`)
  and cross in **one** ``non_blocking`` copy on the current stream; **one** ``index_put_`` writes the
  records into the storage (which holds every step field but the observation in the same byte
  records, ``data[key]`` being views of it), and a gather plus an ``index_put_`` per observation
  key write the observations. The packet is reused only after the copy of the last step has
  completed (a CUDA event recorded on the stream the copy went to), and the loop's action sync
  comes in between anyway.

A finished episode is cut out with :meth:`RolloutBuffer.episode` (a device copy of ``[:length]`` of
its slot's row); memory holds the buffer plus the finished episodes, and nothing grows per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fasteval.core.transfer import torch_dtype

DEFAULT_FRAMES = 256


class _StepRecord:
    """The byte layout of one recorded step (everything but the observation), shared by the host packet
    and the device storage: ``next.reward`` float64 at 0; ``next.terminated``, ``next.truncated``,
    ``next.success`` bool at 8, 9, 10; ``action`` at 16; the record padded to a multiple of 8 (and of
    the action's item size), so every field is an aligned ``view(dtype)`` of a uint8 tensor."""

    FLAGS = ("next.terminated", "next.truncated", "next.success")

    def __init__(self, action_shape: tuple, action_dtype: np.dtype):
        self.action_shape, self.action_dtype = tuple(action_shape), torch_dtype(np.dtype(action_dtype))
        itemsize = np.dtype(action_dtype).itemsize
        self.action_bytes = int(np.prod(self.action_shape, dtype=np.int64)) * itemsize
        align = max(8, itemsize)
        self.nbytes = -(-(16 + self.action_bytes) // align) * align

    def views(self, rec: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{key: view}`` of ``rec`` (uint8 ``[..., nbytes]``): ``[...]`` per field, ``[..., *action_shape]`` for actions."""
        out = {"next.reward": rec[..., 0:8].view(torch.float64)[..., 0]}
        for i, key in enumerate(self.FLAGS):
            out[key] = rec[..., 8 + i].view(torch.bool)
        action = rec[..., 16:16 + self.action_bytes].view(self.action_dtype)
        out["action"] = action.unflatten(-1, self.action_shape) if self.action_shape else action[..., 0]
        return {"action": out.pop("action"), **out}


class RolloutBuffer:
    """``[n_slots, frames]`` step storage on ``device`` (see the module docstring).

    Args:
        source: the device observation buffer the policy reads (``HostToDevice.device_obs``): a
            Tensor ``[B, ...]`` or a dict of them, on ``device``.
        host: ``(rewards, terminated, truncated, success)`` host arrays ``[B]`` of the envs.
        action_shape, action_dtype: one action; ``max_steps``: the step cap (0/None: none).
        ahead: observations in ``source`` are one frame ahead (a CPU policy device reading the env's
            host buffer); None: decided from ``device`` (True on CPU).
        numpy_writes: write through NumPy views instead of torch index ops (a few times cheaper per
            step; CPU only); None: on a CPU device. The torch path is the one a GPU takes.
    """

    def __init__(self, source: Any, host: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                 action_shape: tuple, action_dtype: np.dtype, device: torch.device, max_steps: int | None,
                 ahead: bool | None = None, numpy_writes: bool | None = None):
        from tensordict import TensorDict

        self._TensorDict = TensorDict
        self.source, self.host, self.device = source, host, torch.device(device)
        self.ahead = self.device.type == "cpu" if ahead is None else ahead
        self.n_slots = int(host[0].shape[0])
        self.frames = int(max_steps) if max_steps else DEFAULT_FRAMES
        self.frame = np.zeros(self.n_slots, dtype=np.int64)
        """Host: the next frame to write per slot (= steps recorded so far in its episode)."""
        self.layout = _StepRecord(action_shape, action_dtype)
        cuda = self.device.type == "cuda"
        pin = cuda and torch.cuda.is_available()
        B = self.n_slots
        # The per-step packet: slot, frame, observation frame (int64 [B] each), then B step records. One
        # pinned buffer, one copy per step, one index_put_ of the records.
        self.packet = torch.zeros(24 * B + B * self.layout.nbytes, dtype=torch.uint8, pin_memory=pin)
        self.device_packet = torch.empty_like(self.packet, device=self.device) if cuda else self.packet
        self._packet_np = self._packet_views(self.packet, numpy=True)
        self._device_views = self._packet_views(self.device_packet)
        self._copied = torch.cuda.Event() if pin else None
        self.numpy_writes = self.device.type == "cpu" if numpy_writes is None else numpy_writes
        if self.numpy_writes and self.device.type != "cpu":
            raise ValueError(f"numpy_writes needs a CPU buffer; this one is on {self.device}.")
        self._src_np = ({k: v.numpy() for k, v in source.items()} if isinstance(source, dict) else source.numpy()) \
            if self.numpy_writes else None
        self._set_data(*self._allocate(self.frames))

    def _packet_views(self, packet: torch.Tensor, numpy: bool = False) -> dict[str, Any]:
        B = self.n_slots
        views: dict[str, Any] = {name: packet[i * 8 * B:(i + 1) * 8 * B].view(torch.int64)
                                 for i, name in enumerate(("slot", "frame", "obs_frame"))}
        views["records"] = packet[24 * B:].view(B, self.layout.nbytes)
        views.update(self.layout.views(views["records"]))
        return {k: v.numpy() for k, v in views.items()} if numpy else views

    # -- storage ----------------------------------------------------------------------------------
    def _allocate(self, frames: int) -> tuple[torch.Tensor, Any]:
        TD, B, dev = self._TensorDict, self.n_slots, self.device
        obs_frames = frames + 1 if self.ahead else frames
        if isinstance(self.source, dict):
            obs = TD({k: torch.zeros((B, obs_frames, *v.shape[1:]), dtype=v.dtype, device=dev)
                      for k, v in self.source.items()}, batch_size=[B, obs_frames], device=dev)
        else:
            obs = torch.zeros((B, obs_frames, *self.source.shape[1:]), dtype=self.source.dtype, device=dev)
        return torch.zeros((B, frames, self.layout.nbytes), dtype=torch.uint8, device=dev), obs

    def _grow(self, needed: int) -> None:
        frames = self.frames
        while frames < needed:
            frames *= 2
        records, obs = self._allocate(frames)
        records[:, :self.records.shape[1]] = self.records
        obs[:, :self.data["observation"].shape[1]] = self.data["observation"]
        self._set_data(records, obs)
        self.frames = frames

    def _set_data(self, records: torch.Tensor, obs: Any) -> None:
        self.records = records
        """uint8 ``[B, T, record bytes]``: every step field but the observation (:class:`_StepRecord`)."""
        self.data = {"observation": obs, **self.layout.views(records)}
        """``{key: [B, T, ...]}``: the observation storage and views of :attr:`records`."""
        if self.numpy_writes:  # NumPy views of the same storage
            self._np = {k: (v.numpy() if isinstance(v, torch.Tensor) else {kk: vv.numpy() for kk, vv in v.items()})
                        for k, v in self.data.items()}

    # -- per episode / per step -------------------------------------------------------------------
    def start(self, slots: np.ndarray) -> None:
        """Slots ``slots`` (int64) start an episode: frame 0 (written now when observations run ahead)."""
        self.frame[slots] = 0
        if self.ahead and len(slots):
            if self.numpy_writes:
                self._write_obs_np(slots, np.zeros(len(slots), dtype=np.int64))
                return
            index = torch.from_numpy(np.asarray(slots, dtype=np.int64)).to(self.device)
            self._write_obs(index, torch.zeros_like(index))

    def _write_obs_np(self, slots: np.ndarray, frames: np.ndarray) -> None:
        obs, src = self._np["observation"], self._src_np
        if isinstance(src, dict):
            for key, value in src.items():
                obs[key][slots, frames] = value[slots]
        else:
            obs[slots, frames] = src[slots]

    def _write_obs(self, slot: torch.Tensor, frame: torch.Tensor) -> None:
        obs, src = self.data["observation"], self.source
        if isinstance(src, dict):
            for key, value in src.items():
                obs[key][slot, frame] = value[slot]
        else:
            obs[slot, frame] = src[slot]

    def write(self, slots: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Record the step just taken by ``slots`` (int64, the envs' host buffers hold its results;
        ``actions`` is the host action array ``[B, ...]``). Returns each slot's frame count after it."""
        n = len(slots)
        frames = self.frame[slots]
        top = int(frames.max()) + 1 if n else 0
        if top > self.frames:  # (observations running ahead have one frame more)
            self._grow(top)
        if self.numpy_writes:
            data, (rewards, terminated, truncated, success) = self._np, self.host
            data["next.reward"][slots, frames] = rewards[slots]
            data["next.terminated"][slots, frames] = terminated[slots]
            data["next.truncated"][slots, frames] = truncated[slots]
            data["next.success"][slots, frames] = success[slots]
            data["action"][slots, frames] = actions[slots]
            self._write_obs_np(slots, frames + 1 if self.ahead else frames)
            self.frame[slots] = frames + 1
            return frames + 1
        if self._copied is not None:
            self._copied.synchronize()  # the last step's copy out of the packet is done (normally long since)
        p, (rewards, terminated, truncated, success) = self._packet_np, self.host
        p["slot"][:n] = slots
        p["frame"][:n] = frames
        p["obs_frame"][:n] = frames + 1 if self.ahead else frames
        np.take(rewards, slots, out=p["next.reward"][:n])
        np.take(terminated, slots, out=p["next.terminated"][:n])
        np.take(truncated, slots, out=p["next.truncated"][:n])
        np.take(success, slots, out=p["next.success"][:n])
        p["action"][:n] = actions[slots]
        if self.device_packet is not self.packet:
            self.device_packet.copy_(self.packet, non_blocking=True)
            self._copied.record(torch.cuda.current_stream(self.device))  # the stream the copy went to
        dev = self._device_views
        slot = dev["slot"][:n]
        self.records[slot, dev["frame"][:n]] = dev["records"][:n]
        self._write_obs(slot, dev["obs_frame"][:n])
        self.frame[slots] = frames + 1
        return frames + 1

    def episode(self, slot: int, length: int) -> dict[str, Any]:
        """A copy of slot ``slot``'s first ``length`` frames on the device: ``{key: Tensor [length, ...]}``,
        with ``observation`` a dict of tensors for Dict observations (plain dicts: building a TensorDict
        per episode would cost more than the copies; :func:`concat_episodes` builds one at the end)."""
        out: dict[str, Any] = {}
        if self.numpy_writes:
            for key, value in self._np.items():
                if isinstance(value, dict):
                    out[key] = {k: torch.from_numpy(v[slot, :length].copy()) for k, v in value.items()}
                else:
                    out[key] = torch.from_numpy(value[slot, :length].copy())
            return out
        for key, value in self.data.items():
            if key == "observation" and not isinstance(value, torch.Tensor):
                out[key] = {k: v[slot, :length].clone() for k, v in value.items()}
            else:
                out[key] = value[slot, :length].clone()
        return out


def concat_episodes(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate :meth:`RolloutBuffer.episode` outputs along frames (key by key; ``observation`` may be a dict)."""
    first = episodes[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = {k: torch.cat([e[key][k] for e in episodes]) for k in value}
        else:
            out[key] = torch.cat([e[key] for e in episodes])
    return out
