"""The slot-env interface the step sequence drives, and the host buffers it reads.

:class:`SlotEnvs` is implemented by :class:`fasteval.core.envs.SyncSlotEnvs` (in-process) and
:class:`fasteval.core.workers.WorkerPoolEnvs` (worker processes); both build their buffers with
:func:`allocate_obs_buffer`. This module imports no implementation, so both can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import gymnasium as gym
import numpy as np

from fasteval.types.errors import UserInputError

PER_EPISODE = "per episode"
"""``SlotEnvs.seeding`` of envs reset with their episode's seed: episode ``i`` depends on ``seed + i`` only."""
PER_WORKER = "per worker, not per episode"
"""``SlotEnvs.seeding`` of a batched env (TorchRL's ``ParallelEnv``...) seeded once per run: its workers draw their
episodes from their own streams, so an episode's numbers depend on the batch size and the finishing order."""


def even_ranges(n: int, parts: int) -> list[range]:
    """``parts`` contiguous ranges covering ``0..n``, ``numpy.array_split`` sizes (the first
    ``n % parts`` have one more). The one slot split: pipeline groups and worker blocks."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(range(start, stop))
        start = stop
    return out


def call_env(env: gym.Env, name: str) -> Any:
    """``env.<name>()`` if that attribute (through the wrappers) is callable, else its value."""
    attr = env.get_wrapper_attr(name)
    return attr() if callable(attr) else attr


@runtime_checkable
class ReportsRenderer(Protocol):
    """An env factory that tells the GL renderer its envs render with in this process
    (:meth:`fasteval.core.envs.EnvFactory.renderer`; ``None``: no GL)."""

    def renderer(self) -> str | None: ...


@dataclass
class EnvFailure:
    """One env failure: which slot, during what (``step``/``reset``), and why."""

    slot: int
    stage: str
    error: str
    traceback: str = ""
    exit_code: int | None = None


def _failure(slot: int, stage: str, exc: BaseException) -> EnvFailure:
    import traceback

    return EnvFailure(slot, stage, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)))


class SlotEnvs:
    """``n_slots`` envs stepped and reset per slot. Host buffers are allocated once.

    Attributes (all ``[B, ...]``, rows of idle slots hold stale values):
        obs: ndarray, or dict of ndarrays for Dict observation spaces.
        rewards: float64[B]; terminated, truncated, success: bool[B].
    """

    def __init__(self, n_slots: int, observation_space: gym.Space, action_space: gym.Space):
        self.n_slots = n_slots
        self.observation_space = observation_space
        self.action_space = action_space
        self.rewards = np.zeros(n_slots, dtype=np.float64)
        self.terminated = np.zeros(n_slots, dtype=bool)
        self.truncated = np.zeros(n_slots, dtype=bool)
        self.success = np.zeros(n_slots, dtype=bool)
        self.failures: list[EnvFailure] = []
        """Slots whose env raised, hung or died in the last ``step``/``reset_slots``; the engine
        handles and clears them. Rows of failed slots in the step buffers are meaningless."""

    overlaps = False
    """Whether ``step_send`` returns before the envs have stepped (envs in other processes), so
    that the loop can run the policy for another group meanwhile."""

    metadata: dict = {}
    """The env's ``metadata`` (``render_fps``, ``render_modes``...), from slot 0's env."""

    local_envs: Sequence[Any] | None = None
    """Every slot's env, indexed by slot, when they live in this process (sync envs); None for envs in
    worker processes (the pool), or none at all."""

    renderers: dict = {}
    """The GL renderer of each process that hosts these envs and renders through GL (``{"main": ...}`` in process,
    ``{"worker 0": ..., ...}`` for a pool), as the env kinds report it (``EnvKinds.renderer``); empty when none
    renders (``meta["gl_renderers"]``)."""

    pinned: bool = False
    """Whether the host observation buffers are page-locked for CUDA, as their owner knows it (the
    copy path to a GPU follows this, never ``tensor.is_pinned()``)."""

    def pin_host_buffers(self) -> bool:
        """Page-lock the host observation buffers for CUDA, once the policy device is known to be a GPU
        (pinning creates a CUDA context: never for a CPU policy). Returns :attr:`pinned`; envs that
        cannot pin return False (observations are then staged)."""
        return self.pinned

    seeding: str = PER_EPISODE
    """How episodes are seeded (``meta["seeding"]``): :data:`PER_EPISODE`, or :data:`PER_WORKER` for a batched env
    whose workers cannot be reset with a seed each."""

    def start_run(self, seed: int) -> None:
        """Called once at the start of every engine run with its seed (before its first reset); envs seeded
        per episode ignore it, a batched env seeds itself here."""

    has_success_signal: bool = False
    """True once any env step's ``info`` carried ``is_success``. Envs that never report it (classic
    control) leave it False, so reports can say "no success signal" instead of 0% success."""

    def skip_unread(self, on: bool) -> bool:
        """Turn on (or off) stepping slots whose observation is not read without that observation's work
        (:mod:`fasteval.core.unread`). Returns whether it is on: only where the env kind declares an unread step
        for every env. Envs without one keep stepping every observation."""
        return False

    def step_send_reading(self, slots: Sequence[int], actions: np.ndarray, reads: np.ndarray) -> list[int]:
        """:meth:`step_send`, told per slot whether the observation the step returns is read (``reads``, host
        ``bool[B]``); used only while :meth:`skip_unread` is on."""
        return self.step_send(slots, actions)

    def rebuild(self, slot: int) -> list[int]:
        """Replace the env of ``slot`` after a failure. Returns every slot whose env state was
        lost (those episodes must restart from their seeds)."""
        raise NotImplementedError

    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        """``[env.<name>() (a method) or env.<name> (an attribute) for each slot]``, looked up
        through the wrappers. Raises :class:`~fasteval.types.errors.EnvStepError` if an env raises."""
        raise NotImplementedError

    def has_attr(self, name: str) -> bool:
        """Whether slot 0's env (through its wrappers) has attribute ``name``."""
        raise NotImplementedError

    def groups(self, n: int) -> list[slice]:
        """``n`` contiguous slot groups (the pipelined loop's), as even as possible."""
        return [slice(r.start, r.stop) for r in even_ranges(self.n_slots, n)]

    def step_send(self, slots: Sequence[int], actions: np.ndarray) -> list[int]:
        """Start the step of ``slots``; returns the slots to pass to :meth:`step_recv`. In-process
        envs step right here."""
        self.step(slots, actions)
        return slots

    def step_recv(self, sent: Sequence[int]) -> None:
        """Finish the step started by :meth:`step_send` (nothing to do for in-process envs)."""

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        raise NotImplementedError

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SlotEnvsSource:
    """An env that steps a batch of its own (a batched TorchRL env): returned by an env factory in place of a
    ``gymnasium.Env``, it becomes the whole :class:`SlotEnvs` with :meth:`build` (in-process only)."""

    def build(self, n_slots: int) -> SlotEnvs:
        """The slot envs for up to ``n_slots`` slots (a batched env may have fewer: ``n_slots`` of the result)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the env when it is never built."""


class ObservationMismatch(ValueError):
    """An env returned an observation that does not fit its observation space's buffer (shape or keys)."""


def _mismatch(obs: Any, row: np.ndarray, key: str | None, exc: Exception) -> ObservationMismatch:
    where = f" key {key!r}:" if key is not None else ""
    return ObservationMismatch(
        f"the env returned an observation that does not fit its observation space:{where} got shape "
        f"{np.shape(obs)}, the space says {row.shape} ({type(exc).__name__}: {exc}). Its observation changed shape "
        f"mid-episode, or its observation_space is wrong.")


def _row_views(array: np.ndarray) -> list[np.ndarray]:
    """Every slot's row of ``array`` as a view (0-d for a 1-D array), made once: writing ``view[...] = obs``
    skips the row indexing that ``array[slot] = obs`` does on every call (a third of a write's cost)."""
    return [array[slot, ...] for slot in range(array.shape[0])]


def _obs_writer(buffer: Any) -> Callable[[int, Any], None]:
    """``write(slot, obs)`` into the buffers (as ``buffer[slot] = obs``: the same broadcasting, values and
    errors); an observation that does not fit raises :class:`ObservationMismatch` (the env layer records it
    as that episode's failure, with the cause)."""
    if isinstance(buffer, dict):
        views = {key: _row_views(array) for key, array in buffer.items()}

        def write(slot: int, obs: Any) -> None:
            for key, rows in views.items():
                try:
                    rows[slot][...] = obs[key]
                except (ValueError, TypeError, KeyError, IndexError) as exc:
                    value = obs.get(key) if isinstance(obs, dict) else obs
                    raise _mismatch(value, buffer[key][slot], key, exc) from None

        return write

    rows = _row_views(buffer)

    def write_array(slot: int, obs: Any) -> None:
        try:
            rows[slot][...] = obs
        except (ValueError, TypeError) as exc:
            raise _mismatch(obs, buffer[slot], None, exc) from None

    return write_array


def env_metadata(env: Any) -> dict[str, Any]:
    """A gymnasium env's ``metadata`` (``render_fps``...) as a dict; ``{}`` for an env object that is not a
    ``gym.Env`` (a factory may return any object with the env methods)."""
    return dict(env.metadata or {}) if isinstance(env, gym.Env) else {}


def allocate_obs_buffer(space: gym.Space, n_slots: int, allocate: Callable[[tuple, np.dtype], np.ndarray] | None = None) -> Any:
    """``[n_slots, *shape]`` host array(s) for ``space``; ``allocate`` may supply pinned memory."""
    allocate = allocate or (lambda shape, dtype: np.zeros(shape, dtype=dtype))
    if isinstance(space, gym.spaces.Dict):
        out = {}
        for key, sub in space.spaces.items():
            if isinstance(sub, gym.spaces.Dict):
                raise UserInputError(f"nested Dict observation spaces are not supported (key {key!r}); flatten them with a wrapper.")
            out[key] = allocate((n_slots, *sub.shape), np.dtype(sub.dtype))
        return out
    if isinstance(space, gym.spaces.Discrete):
        return allocate((n_slots,), np.dtype(np.int64))
    if space.shape is None or space.dtype is None:
        raise UserInputError(f"observation space {space} has no fixed shape and dtype; fasteval needs Box, Discrete, MultiDiscrete, MultiBinary or Dict of those.")
    return allocate((n_slots, *space.shape), np.dtype(space.dtype))
