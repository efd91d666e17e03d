"""One served policy over a static batch of rows: what ``fasteval serve`` runs per slot group.

:class:`ServedRunner` is the server's copy of what an in-process engine builds for its policy side,
from the same parts:

* the policy, loaded by :func:`fasteval.robot.policies.loaders.load_policy` (built-ins, checkpoints,
  ``module:callable`` with the server's ``--trust-remote-code``, LeRobot folders) for the client's
  observation and action spaces and this many rows;
* the runner of :func:`fasteval.robot.policies.runner.build_policy_runner` (observation mapping,
  normalization, dtype cast, task descriptions, action-chunk queues, per-slot resets);
* host buffers (:func:`fasteval.core.slots.allocate_obs_buffer`, pinned on a GPU) and the engine's
  :class:`~fasteval.core.transfer.HostToDevice`;
* the dry run and the accelerators (:func:`fasteval.core.accel.accelerate`: autocast, compile, and a
  CUDA graph of the step captured for this static batch on a GPU; eager on a CPU) chosen as the
  engine's dry run chooses them.

Noise: each runner has its own torch RNG state, seeded like an in-process run (``seed``) and swapped
in around every call (:meth:`ServedRunner.rng`), so two clients never draw from each other's stream.
Everything here runs on the server's one compute thread.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fasteval.core.accel import CudaGraphCall, dry_run_and_accelerate
from fasteval.core.engine import resolve_device
from fasteval.core.slots import SlotEnvs, allocate_obs_buffer
from fasteval.core.transfer import HostToDevice, pinned_zeros, pins_host
from fasteval.robot.policies.loaders import load_policy
from fasteval.robot.policies.runner import build_policy_runner
from fasteval.robot.policies.task_descriptions import TASK_ATTR
from fasteval.types.spec import DEFAULT_POLICY_BLOCK
from fasteval.types.wire import WireError


@dataclass(frozen=True)
class RunnerOptions:
    """The spec fields a served runner needs (the names of :class:`~fasteval.types.spec.EvalSpec`).

    The policy reference, its trust and the device are the server's (its command line); the rest
    comes from the client's spec in fasteval's protocol, and from the server's options for openpi.
    """

    policy: str
    device: str = "auto"
    trust_remote_code: bool = False
    observation_format: str = "raw"
    rename: dict = field(default_factory=dict)
    obs_dtype: str = "auto"
    policy_block: int = DEFAULT_POLICY_BLOCK
    """Rows per policy call (:mod:`fasteval.core.policy_blocks`): the client's, or the server's default (openpi)."""
    reset_mode: str = "auto"
    env: str | None = None
    env_kwargs: dict = field(default_factory=dict)
    amp: str = "none"
    compile: bool = False
    cuda_graph: bool | None = None
    pipeline: bool = False
    """Always False: each served group has a runner of its own, so per-slot state stays apart."""


class ServedSlots(SlotEnvs):
    """The env side a served runner sees: the spaces, the host observation buffers, and the task
    descriptions the client sent with its resets (``call(slots, "task_description")``)."""

    def __init__(self, n_rows: int, observation_space: gym.Space, action_space: gym.Space, has_tasks: bool):
        super().__init__(n_rows, observation_space, action_space)
        self.obs = allocate_obs_buffer(observation_space, n_rows)
        self.has_tasks = has_tasks
        self.tasks = [""] * n_rows

    def pin_host_buffers(self) -> bool:
        """Page-locked buffers for a GPU policy (before anything was written into them)."""
        if not self.pinned:
            self.obs = allocate_obs_buffer(self.observation_space, self.n_slots, pinned_zeros)
            self.pinned = True
        return self.pinned

    def has_attr(self, name: str) -> bool:
        return name == TASK_ATTR and self.has_tasks

    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        if name != TASK_ATTR:
            raise WireError(f"a served policy can only ask for {TASK_ATTR!r}, not {name!r}")
        return [self.tasks[s] for s in slots]

    def close(self) -> None:
        pass


class ServedRunner:
    """Policy + runner + buffers for ``n_rows`` rows (see the module docstring)."""

    def __init__(self, options: RunnerOptions, observation_space: gym.Space, action_space: gym.Space, n_rows: int,
                 seed: int = 0, has_tasks: bool = False):
        self.options, self.n_rows = options, n_rows
        self.slots = ServedSlots(n_rows, observation_space, action_space, has_tasks)
        policy = load_policy(options.policy, observation_space, action_space, n_rows, options.trust_remote_code,
                             device=options.device, env=options.env, env_kwargs=dict(options.env_kwargs),
                             cuda_graph=options.cuda_graph)
        self.device = resolve_device(options.device, policy)
        if isinstance(policy, nn.Module):
            policy = policy.to(self.device).eval()
        self.policy = policy
        if pins_host(self.device, True):  # as the engine does: pinning only for a GPU policy
            self.slots.pin_host_buffers()
        self.h2d = HostToDevice(self.slots.obs, self.device, pin_memory=True, host_pinned=self.slots.pinned)
        self.runner = build_policy_runner(policy, options, self.slots, self.h2d, n_rows)
        self.facts: dict[str, Any] = {}
        self.checked = False
        self._step: Any = None
        self._rng: tuple[torch.Tensor, torch.Tensor | None] = self._fresh_rng(seed)

    # -- noise ----------------------------------------------------------------------------------
    def _fresh_rng(self, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        cpu = torch.Generator().manual_seed(int(seed)).get_state()
        cuda = None
        if self.device.type == "cuda":
            cuda = torch.Generator(device=self.device).manual_seed(int(seed)).get_state()
        return cpu, cuda

    def reseed(self, seed: int) -> None:
        """A new run: the global torch RNG restarts from ``seed``, as the engine seeds it per run."""
        self._rng = self._fresh_rng(seed)

    @contextmanager
    def rng(self) -> Iterator[None]:
        """This runner's torch RNG state in place of the global one, for the duration of a call."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.set_rng_state(self._rng[0])
            if self._rng[1] is not None:
                torch.cuda.set_rng_state(self._rng[1], self.device)
            yield
            self._rng = (torch.get_rng_state(),
                         torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None)

    # -- rows -----------------------------------------------------------------------------------
    def write(self, rows: Sequence[int] | slice, obs: Any) -> None:
        """Copy decoded observation rows into the host buffer (checked against the space)."""
        write_rows(self.slots.obs, rows, obs, self.slots.observation_space)

    def check(self, chunks: bool = False) -> dict[str, Any]:
        """The dry run on the current buffer, then the accelerators, as the engine chooses them.

        ``chunks``: the step returns the whole chunk of every row (:meth:`chunk_step`, openpi's
        reply) instead of one action per row. Raises what the engine's dry run raises.
        """
        options, policy_input = self.options, self.h2d.policy_input
        self.h2d.copy()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.inference_mode():  # the engine's dry run, as the engine runs it
            self._step, self.facts = dry_run_and_accelerate(
                self.runner, self.policy, policy_input, self.device, amp=options.amp, compile=options.compile,
                cuda_graph=options.cuda_graph, chunks=chunks)
        if isinstance(self._step, CudaGraphCall):  # capture now (RNG restored after it), so the facts are final
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                self._step(policy_input)
        self.checked = True
        return self.facts

    def step(self) -> torch.Tensor:
        """One policy call on every row: actions ``[n_rows, ...]`` (or chunks after ``check(chunks=True)``)."""
        self.h2d.copy()
        return self._step(self.h2d.policy_input)

    @property
    def eager(self) -> bool:
        """Whether the step chosen on the dry run is the runner's plain step (no CUDA graph, compile or autocast)."""
        return self._step is self.runner.plain_step

    def describe(self) -> dict[str, Any]:
        """What the client must know about this runner (its ``opened`` reply)."""
        caps = self.runner.capabilities
        return {"reset_kind": caps.reset_kind, "continuous": bool(caps.continuous)}


def _check_rows(key: str, value: Any, space: gym.Space, n: int) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise WireError(f"observation {key!r}: expected an array, got {type(value).__name__}")
    shape = (n, *(() if isinstance(space, gym.spaces.Discrete) else space.shape))
    if value.shape != shape:
        raise WireError(f"observation {key!r}: expected shape {shape}, got {value.shape}")
    return value


def write_rows(buffer: Any, rows: Sequence[int] | slice, obs: Any, space: gym.Space) -> None:
    """``buffer[rows] = obs`` for an array or Dict buffer, checking keys and shapes (dtype: same kind)."""
    n = len(range(buffer_rows(buffer))[rows]) if isinstance(rows, slice) else len(rows)
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise WireError(f"observation: expected the keys {sorted(space.spaces)}, got {got}")
        for key, sub in space.spaces.items():
            _copy(buffer[key], rows, _check_rows(key, obs[key], sub, n), key)
        return
    _copy(buffer, rows, _check_rows("observation", obs, space, n), "observation")


def buffer_rows(buffer: Any) -> int:
    return next(iter(buffer.values())).shape[0] if isinstance(buffer, dict) else buffer.shape[0]


def _copy(target: np.ndarray, rows: Any, value: np.ndarray, key: str) -> None:
    try:
        if isinstance(rows, slice):
            np.copyto(target[rows], value, casting="same_kind")
        else:
            target[np.asarray(rows, dtype=np.int64)] = value.astype(target.dtype, casting="same_kind", copy=False)
    except TypeError as exc:
        raise WireError(f"observation {key!r}: dtype {value.dtype} does not fit the space's {target.dtype} ({exc})") from None
