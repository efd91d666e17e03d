"""Every host<->device copy and every device sync lives here.

* CPU policy device: the policy reads tensors that are zero-copy views of the host
  observation buffer, and actions are read back as zero-copy NumPy views. No copies.
* CUDA policy device: observations go host -> pinned staging -> device with
  ``non_blocking=True``; actions come back into a pinned host buffer the same way,
  followed by one stream sync (the host must not read actions before they land).

All tensors are allocated once, at construction; the per-step methods allocate nothing
(except a dtype cast when the policy's action dtype differs from the env's).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch


def _as_tensor_tree(host: Any) -> Any:
    if isinstance(host, dict):
        return {key: torch.from_numpy(value) for key, value in host.items()}
    return torch.from_numpy(host)


class HostToDevice:
    """Observation transfer. ``policy_input`` is the object handed to the policy every step:
    a Tensor ``[B, ...]`` for array observations, a TensorDict for Dict observations.
    """

    def __init__(self, host_obs: Any, device: torch.device, pin_memory: bool = True):
        self.device = device
        self.host = _as_tensor_tree(host_obs)
        n_slots = next(iter(self.host.values())).shape[0] if isinstance(self.host, dict) else self.host.shape[0]
        if device.type == "cpu":
            self.device_obs = self.host
            self.copy = _no_copy
        else:
            pin = pin_memory and torch.cuda.is_available()  # pageable staging only to measure what pinning buys
            if isinstance(self.host, dict):
                self.staging = {k: torch.empty_like(v, pin_memory=pin) for k, v in self.host.items()}
                self.device_obs = {k: torch.empty_like(v, device=device) for k, v in self.host.items()}
            else:
                self.staging = torch.empty_like(self.host, pin_memory=pin)
                self.device_obs = torch.empty_like(self.host, device=device)
            self.copy = self._copy_dict if isinstance(self.host, dict) else self._copy_array
        if isinstance(self.device_obs, dict):
            from tensordict import TensorDict  # imported only for Dict observations: it costs ~1 s of start-up

            self.policy_input = TensorDict(self.device_obs, batch_size=[n_slots], device=device)
        else:
            self.policy_input = self.device_obs

    def _copy_array(self) -> None:
        self.staging.copy_(self.host)
        self.device_obs.copy_(self.staging, non_blocking=True)

    def group(self, rows: slice) -> tuple[Any, Callable[[], None]]:
        """``(policy input view, copy)`` for a contiguous group of slots (pipelined mode).

        The view shares memory with :attr:`policy_input`; ``copy`` moves only those rows.
        """
        view = self.policy_input[rows]
        if self.device.type == "cpu":
            return view, _no_copy
        pairs = ([(self.host[k][rows], self.staging[k][rows], self.device_obs[k][rows]) for k in self.host]
                 if isinstance(self.host, dict) else [(self.host[rows], self.staging[rows], self.device_obs[rows])])

        def copy_rows() -> None:
            for host, staging, device in pairs:
                staging.copy_(host)
                device.copy_(staging, non_blocking=True)

        return view, copy_rows

    def _copy_dict(self) -> None:
        for key, host in self.host.items():
            self.staging[key].copy_(host)
            self.device_obs[key].copy_(self.staging[key], non_blocking=True)


def _no_copy() -> None:
    return None


class DeviceToHost:
    """Action transfer into a host array ``[B, *action_shape]`` of the env's action dtype."""

    def __init__(self, n_slots: int, action_shape: tuple, action_dtype: np.dtype, device: torch.device):
        self.host = np.zeros((n_slots, *action_shape), dtype=action_dtype)
        self.host_tensor = torch.from_numpy(self.host)
        self.device = device
        self.copy = self._copy_cpu if device.type == "cpu" else self._copy_cuda
        if device.type != "cpu" and torch.cuda.is_available():
            self.staging = torch.empty_like(self.host_tensor, pin_memory=True)
            self.stream = torch.cuda.current_stream(device)  # looked up once, not per step

    def group(self, rows: slice) -> Callable[[torch.Tensor], np.ndarray]:
        """``copy(actions)`` for a group of slots: writes rows ``rows`` of :attr:`host` and returns
        the whole host array (other rows untouched)."""
        host_rows = self.host_tensor[rows]
        if self.device.type == "cpu":
            def copy_cpu(actions: torch.Tensor) -> np.ndarray:
                host_rows.copy_(actions)
                return self.host
            return copy_cpu
        staging_rows, stream = self.staging[rows], self.stream

        def copy_cuda(actions: torch.Tensor) -> np.ndarray:
            staging_rows.copy_(actions, non_blocking=True)
            # Sync: the env workers are sent these actions next, so the copy must have landed.
            stream.synchronize()
            host_rows.copy_(staging_rows)
            return self.host

        return copy_cuda

    def _copy_cpu(self, actions: torch.Tensor) -> np.ndarray:
        self.host_tensor.copy_(actions)
        return self.host

    def _copy_cuda(self, actions: torch.Tensor) -> np.ndarray:
        self.staging.copy_(actions, non_blocking=True)
        # Sync: the env steps read these actions on the host next, so the copy must have landed.
        self.stream.synchronize()
        self.host_tensor.copy_(self.staging)
        return self.host
