"""Env construction and per-slot stepping.

fasteval owns the episode boundaries: gymnasium's autoreset is disabled, and each
slot is reset on its own with its episode's seed. Only the slots that run an
episode are stepped, so nothing is simulated after an episode ends or after the
ledger runs out.

* ``sync``: the sub-envs of a gymnasium ``SyncVectorEnv`` (autoreset disabled),
  stepped in this process. Best for cheap envs (classic control).
* ``async``: a gymnasium ``AsyncVectorEnv`` (autoreset disabled, shared-memory
  observations), one subprocess per slot, driven per slot over its pipes. Pays off
  only when a step costs more than the inter-process round trip (~50-100 us).
"""

from __future__ import annotations

import importlib
import multiprocessing
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from fasteval.errors import EnvNotFoundError, UserInputError
from fasteval.refs import resolve_callable, split_callable_ref


@dataclass(frozen=True)
class EnvFactory:
    """Picklable recipe for one sub-env: ``env`` id or ``module:callable``, and kwargs.

    Calling it imports the env's plugin namespace first (``gym_pusht/PushT-v0``
    imports ``gym_pusht``), so it also works inside async worker processes.
    """

    env: str
    kwargs: dict = field(default_factory=dict)

    @property
    def is_callable_ref(self) -> bool:
        return split_callable_ref(self.env) is not None

    def __call__(self) -> gym.Env:
        if self.is_callable_ref:
            fn = resolve_callable(self.env, what="env", trust_remote_code=True)
            env = fn(**self.kwargs)
            if not isinstance(env, gym.Env):
                raise UserInputError(f"env {self.env!r} returned {type(env).__name__}; expected a gymnasium.Env.")
            return env
        import_env_namespace(self.env)
        return gym.make(lean_spec(self.env), **self.kwargs)


def lean_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id`` without gymnasium's checking layers.

    ``gym.make`` wraps every env in ``PassiveEnvChecker`` (warnings on the first calls),
    ``OrderEnforcing`` (no step before reset) and ``TimeLimit`` (the step cap). fasteval's
    engine already guarantees the order and applies the cap itself, in the bookkeeping kernel,
    with the same result, so these three Python layers (about 1 us per step each) are dropped.
    Every other wrapper the registration asks for is kept.
    """
    import dataclasses

    spec = gym.spec(env_id)
    return dataclasses.replace(spec, order_enforce=False, disable_env_checker=True, max_episode_steps=None)


def import_env_namespace(env_id: str) -> None:
    """Import the plugin package of a namespaced id (``ns/Name-vN`` -> ``import ns``), if any."""
    if "/" not in env_id:
        return
    namespace = env_id.split("/", 1)[0]
    if not namespace.isidentifier() and not all(part.isidentifier() for part in namespace.split(".")):
        return  # not a module name: gymnasium reports the unknown id
    try:
        importlib.import_module(namespace)
    except ImportError:
        pass  # gymnasium raises NamespaceNotFound next; make_factory turns that into a clear error


def make_factory(env: str, kwargs: dict, max_steps: int | None) -> tuple[EnvFactory, gym.Env, int | None]:
    """Validate ``env`` by building one instance. Returns (factory, probe env, step cap).

    The step cap is ``max_steps`` if given, else the env spec's ``max_episode_steps``
    (``None`` if neither exists). Raises :class:`EnvNotFoundError` with gymnasium's
    suggestion and the package to install for unknown ids or missing plugins.
    """
    factory = EnvFactory(env, dict(kwargs))
    try:
        probe = factory()
    except gym.error.NamespaceNotFound as exc:
        namespace = env.split("/", 1)[0]
        raise EnvNotFoundError(
            f"env {env!r}: {exc} The namespace {namespace!r} comes from a plugin package; install it "
            f"(for example `pip install {namespace.replace('_', '-')}`) and try again."
        ) from None
    except gym.error.Error as exc:  # NameNotFound / VersionNotFound carry gymnasium's suggestion
        raise EnvNotFoundError(f"env {env!r}: {exc}") from None
    except TypeError as exc:
        raise UserInputError(f"env {env!r} rejected its keyword arguments {dict(kwargs)}: {exc}") from None
    cap = max_steps
    if cap is None and not factory.is_callable_ref:
        registered = gym.spec(env).max_episode_steps  # applied by the engine, not by a TimeLimit wrapper
        cap = int(registered) if registered else None
    elif cap is None and probe.spec is not None and probe.spec.max_episode_steps:
        cap = int(probe.spec.max_episode_steps)
    return factory, probe, cap


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


def _success(info: dict) -> bool:
    return bool(info.get("is_success", False))


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
        discrete = isinstance(action_space, gym.spaces.Discrete)
        self._env_actions: Callable[[np.ndarray], Sequence[Any]] = (
            (lambda a: a.tolist()) if discrete else (lambda a: a)
        )
        self.failures: list[EnvFailure] = []
        """Slots whose env raised, hung or died in the last ``step``/``reset_slots``; the engine
        handles and clears them. Rows of failed slots in the step buffers are meaningless."""

    def rebuild(self, slot: int) -> list[int]:
        """Replace the env of ``slot`` after a failure. Returns every slot whose env state was
        lost (those episodes must restart from their seeds)."""
        raise NotImplementedError

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        raise NotImplementedError

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _obs_writer(buffer: Any) -> Callable[[int, Any], None]:
    if isinstance(buffer, dict):
        keys = list(buffer)

        def write(slot: int, obs: Any) -> None:
            for key in keys:
                buffer[key][slot] = obs[key]

        return write

    def write_array(slot: int, obs: Any) -> None:
        buffer[slot] = obs

    return write_array


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


def _row_copier(source: Any, target: Any) -> Callable[[int], None]:
    """``copy(slot)`` copies row ``slot`` of ``source`` (array or dict of arrays) into ``target``."""
    if isinstance(source, dict):
        pairs = [(source[key], target[key]) for key in target]

        def copy_dict(slot: int) -> None:
            for src, dst in pairs:
                dst[slot] = src[slot]

        return copy_dict

    def copy_array(slot: int) -> None:
        target[slot] = source[slot]

    return copy_array


class SyncSlotEnvs(SlotEnvs):
    """Sub-envs of a ``SyncVectorEnv`` (autoreset disabled), stepped in-process per active slot."""

    def __init__(self, factory: EnvFactory, n_slots: int, first_env: gym.Env | None = None, obs_allocate=None):
        fns: list[Callable[[], gym.Env]] = [factory] * n_slots
        self.factory = factory
        if first_env is not None:
            fns[0] = lambda: first_env
        self.vector_env = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
        super().__init__(n_slots, self.vector_env.single_observation_space, self.vector_env.single_action_space)
        self.envs = self.vector_env.envs
        self.obs = allocate_obs_buffer(self.observation_space, n_slots, obs_allocate)
        self._write_obs = _obs_writer(self.obs)
        self._array_obs = not isinstance(self.obs, dict)

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        for slot, seed in zip(slots, seeds):
            try:
                obs, _info = self.envs[slot].reset(seed=int(seed))
            except Exception as exc:  # recorded; the engine rebuilds the env and retries the episode
                self.failures.append(_failure(slot, "reset", exc))
                continue
            self._write_obs(slot, obs)

    def rebuild(self, slot: int) -> list[int]:
        try:
            self.envs[slot].close()
        except Exception:
            pass
        self.envs[slot] = self.factory()
        return [slot]

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        """Step ``slots`` with rows of ``actions``; write results into the host buffers.

        The body is duplicated for array observations (one row store, no call) and Dict ones:
        this is the hottest Python loop in fasteval for cheap envs.
        """
        envs, rewards, terminated, truncated, success = (
            self.envs, self.rewards, self.terminated, self.truncated, self.success)
        if self._array_obs:
            obs_buffer = self.obs
            for slot in slots:
                try:  # free when nothing is raised (Python >= 3.11)
                    obs, reward, term, trunc, info = envs[slot].step(actions[slot])
                except Exception as exc:
                    self.failures.append(_failure(slot, "step", exc))
                    continue
                obs_buffer[slot] = obs
                rewards[slot] = reward
                terminated[slot] = term
                truncated[slot] = trunc
                success[slot] = info.get("is_success", False)
            return
        write = self._write_obs
        for slot in slots:
            try:
                obs, reward, term, trunc, info = envs[slot].step(actions[slot])
            except Exception as exc:
                self.failures.append(_failure(slot, "step", exc))
                continue
            write(slot, obs)
            rewards[slot] = reward
            terminated[slot] = term
            truncated[slot] = trunc
            success[slot] = info.get("is_success", False)

    def close(self) -> None:
        self.vector_env.close()


class AsyncSlotEnvs(SlotEnvs):
    """Sub-envs in the worker processes of an ``AsyncVectorEnv``, driven per slot over its pipes.

    Observations arrive through the vector env's shared memory (no pickling);
    rewards, flags and infos come back over the pipes. ``step`` is split into
    ``step_send`` and ``step_recv`` so that the engine can overlap env work with
    policy work.
    """

    def __init__(self, factory: EnvFactory, n_slots: int, context: str | None = None, step_timeout: float | None = None):
        self.factory, self.context, self.step_timeout = factory, context, step_timeout
        self._start(n_slots)
        super().__init__(n_slots, self.vector_env.single_observation_space, self.vector_env.single_action_space)
        # A stable host buffer of our own: rows are copied out of the shared memory the workers
        # write into, so a rebuilt vector env (new shared memory) does not invalidate the views
        # the engine holds on this buffer.
        self.obs = allocate_obs_buffer(self.observation_space, n_slots)
        self._copy_row = _row_copier(self.vector_env.observations, self.obs)

    def _start(self, n_slots: int) -> None:
        self.vector_env = gym.vector.AsyncVectorEnv(
            [self.factory] * n_slots,
            shared_memory=True,
            context=self.context,
            autoreset_mode=gym.vector.AutoresetMode.DISABLED,
        )
        self._pipes = self.vector_env.parent_pipes

    def rebuild(self, slot: int) -> list[int]:
        """Restart every worker (an ``AsyncVectorEnv`` cannot respawn just one), so every
        in-flight episode restarts from its seed (same numbers, some repeated work)."""
        self.close()
        self._start(self.n_slots)
        self._copy_row = _row_copier(self.vector_env.observations, self.obs)
        return list(range(self.n_slots))

    def _recv(self, slot: int, what: str) -> Any:
        pipe = self._pipes[slot]
        try:
            if self.step_timeout is not None and not pipe.poll(self.step_timeout):
                process = self.vector_env.processes[slot]
                process.kill()
                process.join(timeout=5.0)
                self.failures.append(EnvFailure(slot, what, f"timed out after {self.step_timeout:g} s (--step-timeout); worker killed"))
                return None
            result, ok = pipe.recv()
        except (EOFError, ConnectionResetError, BrokenPipeError, OSError) as exc:
            process = self.vector_env.processes[slot]
            process.join(timeout=1.0)
            code = process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            self.failures.append(EnvFailure(slot, what, f"async env worker died ({how}): {exc!r}", exit_code=code))
            return None
        if not ok:
            index, error_type, message, trace = self.vector_env.error_queue.get()
            self.failures.append(EnvFailure(slot, what, f"{error_type.__name__}: {message}", trace))
            return None
        return result

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        sent = []
        for slot, seed in zip(slots, seeds):
            try:
                self._pipes[slot].send(("reset", {"seed": int(seed)}))
            except (BrokenPipeError, OSError) as exc:
                self.failures.append(_failure(slot, "reset", exc))
                continue
            sent.append(slot)
        for slot in sent:
            if self._recv(slot, "reset") is not None:
                self._copy_row(slot)

    def step_send(self, slots: Sequence[int], actions: np.ndarray) -> list[int]:
        """Send step commands; returns the slots that were sent (pass them to ``step_recv``)."""
        env_actions = self._env_actions(actions)  # Python ints pickle smaller than numpy scalars
        pipes = self._pipes
        sent = []
        for slot in slots:
            try:
                pipes[slot].send(("step", env_actions[slot]))
            except (BrokenPipeError, OSError) as exc:
                self.failures.append(_failure(slot, "step", exc))
                continue
            sent.append(slot)
        return sent

    def step_recv(self, sent: Sequence[int]) -> None:
        """Receive the results of ``step_send`` for ``sent`` into the host buffers."""
        rewards, terminated, truncated, success = self.rewards, self.terminated, self.truncated, self.success
        copy_row = self._copy_row
        for slot in sent:
            result = self._recv(slot, "step")
            if result is None:
                continue
            _obs, reward, term, trunc, info = result
            copy_row(slot)
            rewards[slot] = reward
            terminated[slot] = term
            truncated[slot] = trunc
            success[slot] = _success(info)

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        self.step_recv(self.step_send(slots, actions))

    def close(self) -> None:
        try:
            self.vector_env.close(terminate=True)
        except Exception:  # a dead worker must not turn close() into a crash
            pass


def build_slot_envs(vectorization: str, factory: EnvFactory, n_slots: int, probe: gym.Env | None,
                    step_timeout: float | None = None) -> SlotEnvs:
    """Build the slot envs for ``vectorization`` (``sync`` reuses ``probe`` as slot 0).

    ``step_timeout`` (seconds) applies to async workers: a worker that does not answer in
    time is killed and its episode handled like a crash. In-process (sync) envs cannot be
    interrupted safely; use async for envs that may hang.
    """
    if vectorization == "sync":
        return SyncSlotEnvs(factory, n_slots, first_env=probe)
    if probe is not None:
        probe.close()
    context = None if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return AsyncSlotEnvs(factory, n_slots, context=context, step_timeout=step_timeout)
