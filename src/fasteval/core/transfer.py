"""Every host<->device copy and every device sync lives here.

* CPU policy device: the policy reads tensors that are zero-copy views of the host
  observation buffer, and actions are read back as zero-copy NumPy views. No copies.
* CUDA policy device, ``pin_memory=True`` (the default):

  - observations: the env layer page-locks its host observation buffers once the policy device is
    known to be a GPU (:func:`pins_host`, ``SlotEnvs.pin_host_buffers``), so each observation
    crosses in **one** ``non_blocking`` copy, host buffer -> device buffer. A host buffer that is
    not pinned (an env layer that cannot pin, e.g. shared memory whose ``cudaHostRegister``
    failed) goes through a pinned staging buffer: one host memcpy more. Whether the host buffers
    are pinned is what their owner says (``host_pinned``: the env layer's ``pinned``), never
    ``tensor.is_pinned()``: that reads CUDA's registry of page-locked ranges, which still lists a
    range whose owner unmapped it without unregistering it (a stale registration on reused
    virtual addresses: DMA out of freed pages).
  - actions come back into a pinned host array with one ``non_blocking`` copy, then the host
    waits on a CUDA event recorded right after the copy, on the stream the copy went to (the
    stream current at call time: under ``with torch.cuda.stream(s)`` that is ``s``, not the
    stream current when the engine was built). The host array *is* the pinned buffer: no second
    memcpy. Actions the policy already returned on the host are copied without any wait.

  Copies are enqueued on the policy device's current stream. A host observation buffer is not
  written again before the next action sync (the envs step only after it), which is what makes
  the ``non_blocking`` copy out of a buffer the envs write safe.
* CUDA policy device, ``pin_memory=False``: nothing is pinned, observations and actions use
  plain (synchronous) pageable copies. ``gpu_check``'s pageable rows measure this whole path.

Tensors are allocated once, at construction, and group views once per group (:meth:`HostToDevice.group`
returns the same objects every time, so CUDA graphs and input pipelines keyed on them are built once
per engine). The per-step methods allocate nothing (except a dtype cast when the policy's action dtype
differs from the env's).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch


def _as_tensor_tree(host: Any) -> Any:
    if isinstance(host, dict):
        return {key: torch.from_numpy(value) for key, value in host.items()}
    return torch.from_numpy(host)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def can_pin() -> bool:
    return torch.cuda.is_available()


def pinned_zeros(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A zeroed NumPy array in pinned host memory (the array keeps the pinned tensor alive)."""
    return torch.zeros(shape, dtype=torch_dtype(np.dtype(dtype)), pin_memory=True).numpy()


def pins_host(device: torch.device, pin_memory: bool) -> bool:
    """Whether the env layer should page-lock its host observation buffers
    (:meth:`~fasteval.core.slots.SlotEnvs.pin_host_buffers`) for a policy on ``device``: pinning asked
    for, CUDA present, and the resolved policy device a GPU. Asked once the policy device is known:
    pinning creates a CUDA context, which a CPU policy must not pay for."""
    return pin_memory and device.type == "cuda" and can_pin()


class HostToDevice:
    """Observation transfer. ``policy_input`` is the object handed to the policy every step:
    a Tensor ``[B, ...]`` for array observations, a TensorDict for Dict observations.

    ``host_pinned`` says whether the host buffers are page-locked, as their owner knows it (the env
    layer's ``pinned``); ``staged`` lists the keys (``None`` for an array) copied through a staging
    buffer (asked to pin, host buffers not pinned); it is empty on the one-copy path.
    """

    def __init__(self, host_obs: Any, device: torch.device, pin_memory: bool = True, host_pinned: bool = False):
        self.device = device
        self.host = _as_tensor_tree(host_obs)
        self.n_slots = next(iter(self.host.values())).shape[0] if isinstance(self.host, dict) else self.host.shape[0]
        self.staged: list[Any] = []
        self._groups: dict[tuple[int, int], tuple[Any, Callable[[], None]]] = {}
        if device.type == "cpu":
            self.device_obs = self.host
            self.staging: Any = None
            self.copy = _no_copy
        else:
            hosts = self.host if isinstance(self.host, dict) else {None: self.host}
            stage = pin_memory and can_pin() and not host_pinned  # staging only pays when the copy can then be async
            staging = {}
            for key, host in hosts.items():
                if stage:
                    staging[key] = torch.empty_like(host, pin_memory=True)
                    self.staged.append(key)
                else:
                    staging[key] = None
            device_obs = {k: torch.empty_like(v, device=device) for k, v in hosts.items()}
            self.staging = staging if isinstance(self.host, dict) else staging[None]
            self.device_obs = device_obs if isinstance(self.host, dict) else device_obs[None]
            self._pairs = [(hosts[k], staging[k], device_obs[k]) for k in hosts]
            self.copy = _copier(self._pairs)
        if isinstance(self.device_obs, dict):
            from tensordict import TensorDict  # imported only for Dict observations: it costs ~1 s of start-up

            self.policy_input = TensorDict(self.device_obs, batch_size=[self.n_slots], device=device)
        else:
            self.policy_input = self.device_obs

    def group(self, rows: slice) -> tuple[Any, Callable[[], None]]:
        """``(policy input view, copy)`` for a contiguous group of slots (pipelined mode).

        The view shares memory with :attr:`policy_input`; ``copy`` moves only those rows. Built once
        per ``rows`` and returned again afterwards; all rows give :attr:`policy_input` itself.
        """
        start, stop, _ = rows.indices(self.n_slots)
        key = (start, stop)
        entry = self._groups.get(key)
        if entry is None:
            if key == (0, self.n_slots):
                entry = (self.policy_input, self.copy)
            elif self.device.type == "cpu":
                entry = (self.policy_input[start:stop], _no_copy)
            else:
                pairs = [(h[start:stop], None if s is None else s[start:stop], d[start:stop]) for h, s, d in self._pairs]
                entry = (self.policy_input[start:stop], _copier(pairs))
            self._groups[key] = entry
        return entry


def _copier(pairs: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]) -> Callable[[], None]:
    """One function that does every copy of ``pairs`` = ``[(host, staging or None, device)]``."""
    if len(pairs) == 1 and pairs[0][1] is None:
        host, _, dev = pairs[0]

        def copy_one() -> None:  # the common case: one pinned (or pageable) array, one copy
            dev.copy_(host, non_blocking=True)

        return copy_one

    def copy_all() -> None:
        for host, staging, dev in pairs:
            if staging is None:
                dev.copy_(host, non_blocking=True)
            else:
                staging.copy_(host)
                dev.copy_(staging, non_blocking=True)

    return copy_all


def _no_copy() -> None:
    return None


class DeviceToHost:
    """Action transfer into a host array ``[B, *action_shape]`` of the env's action dtype.

    On CUDA with ``pin_memory`` the host array itself is pinned: one ``non_blocking`` copy, then a
    wait on an event recorded after it on the stream it went to. ``pin_memory=False``: a pageable
    array and a plain synchronous copy.
    """

    def __init__(self, n_slots: int, action_shape: tuple, action_dtype: np.dtype, device: torch.device,
                 pin_memory: bool = True):
        self.device = device
        self.pinned = device.type != "cpu" and pin_memory and can_pin()
        shape = (n_slots, *action_shape)
        self.host = pinned_zeros(shape, action_dtype) if self.pinned else np.zeros(shape, dtype=action_dtype)
        self.host_tensor = torch.from_numpy(self.host)
        self.landed = torch.cuda.Event() if self.pinned else None
        """Recorded after each action copy, on the stream the copy went to; the host waits on it."""
        self._groups: dict[tuple[int, int], Callable[[torch.Tensor], np.ndarray]] = {}
        self.copy = self.group(slice(0, n_slots))

    def group(self, rows: slice) -> Callable[[torch.Tensor], np.ndarray]:
        """``copy(actions)`` for a group of slots: writes rows ``rows`` of :attr:`host` and returns
        the whole host array (other rows untouched). Built once per ``rows``."""
        start, stop, _ = rows.indices(self.host.shape[0])
        copy = self._groups.get((start, stop))
        if copy is not None:
            return copy
        host, host_rows = self.host, self.host_tensor[start:stop]
        if self.pinned:
            landed, current_stream = self.landed, torch.cuda.current_stream

            def copy(actions: torch.Tensor) -> np.ndarray:
                if actions.device.type == "cpu":  # already on the host: a memcpy, nothing to wait for
                    host_rows.copy_(actions)
                    return host
                host_rows.copy_(actions, non_blocking=True)
                # The envs read these actions on the host next: wait until the copy has landed. It went to the
                # stream current now on the actions' device (not the one current when this was built).
                landed.record(current_stream(actions.device))
                landed.synchronize()
                return host
        else:
            def copy(actions: torch.Tensor) -> np.ndarray:  # CPU: a plain copy; CUDA pageable: it syncs itself
                host_rows.copy_(actions)
                return host
        self._groups[(start, stop)] = copy
        return copy
