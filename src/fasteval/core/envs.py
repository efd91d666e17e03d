"""Env construction and per-slot stepping.

fasteval owns the episode boundaries: gymnasium's autoreset is disabled, and each
slot is reset on its own with its episode's seed. Only the slots that run an
episode are stepped, so nothing is simulated after an episode ends or after the
ledger runs out.

* ``sync``: the sub-envs of a gymnasium ``SyncVectorEnv`` (autoreset disabled),
  stepped in this process. Best for cheap envs (classic control).
* ``async``: a pool of worker processes (:mod:`fasteval.core.workers`), each stepping a
  contiguous block of slots, with the step buffers in shared memory. Pays off when a block's
  step costs more than one round trip to its worker (~50-100 us).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, Mapping, Protocol, Sequence

import gymnasium as gym
import numpy as np

from fasteval.core.reset_deadline import ResetDeadline
from fasteval.core.slot_block import SlotBlock, raise_call_errors
from fasteval.core.slots import EnvFailure, SlotEnvs, SlotEnvsSource, _failure, _obs_writer, allocate_obs_buffer, call_env, env_metadata  # noqa: F401 (re-exported)
from fasteval.core.watchdog import ENV, Watchdog
from fasteval.types.errors import EnvBuildError, EnvNotFoundError, UserInputError, one_line
from fasteval.types.spec import env_label
from fasteval.types.refs import resolve_callable, split_callable_ref


class EnvKinds(Protocol):
    """What the layer that knows kinds of env does around building one (:mod:`fasteval.robot.env_kinds`).

    Core knows no plugin, simulator or display; the layer above plugs them in here (the engine takes
    its parts' ``env_kinds``). An implementation must pickle: env workers get it with the factory.

    * ``prepare(env, kwargs)``: before ``env`` (an id or ``module:callable``) is built, in every
      process that builds it: import the plugin that registers the id, set up rendering, or raise
      :class:`~fasteval.types.errors.UserInputError` for what cannot work on this machine;
    * ``not_found_hint(env)``: what to do when gymnasium does not know ``env``'s namespace (the package
      to install), or ``""``;
    * ``adapt(obj, built)``: turn an env of another library (a live TorchRL env, a factory of one, or what a
      ``module:callable`` env returned: ``built`` is then True) into a ``gymnasium.Env`` or a
      :class:`~fasteval.core.slots.SlotEnvsSource` (an env with a batch of its own), or ``None`` (not an
      env it knows);
    * ``unread_step(env)``: for a built slot env, ``step(action) -> (obs, reward, terminated, truncated, info)``
      that skips the work of the observation (``obs`` is not read; a render skipped) and changes nothing else
      of the episode, or ``None`` when this kind of env cannot (:mod:`fasteval.core.unread`). Declared per kind
      of env, never found by trying;
    * ``renderer(env, kwargs)``: the GL renderer string this process's envs of ``env`` render with (asked once in
      every process that hosts them: the main process, each env worker), or ``None`` when they do not render
      through GL (``meta["gl_renderers"]``);
    * ``memory(env, kwargs)``: for a heavy env, ``(bytes per env, bytes per process hosting such envs, a name for
      them)``, so that the pool's default size fits the machine's memory (:mod:`fasteval.core.memory_fit`), or
      ``None``.
    """

    def prepare(self, env: str, kwargs: Mapping[str, Any]) -> None: ...

    def not_found_hint(self, env: str) -> str: ...

    def adapt(self, obj: Any, built: bool) -> Any: ...

    def unread_step(self, env: Any) -> Callable[[Any], tuple] | None: ...

    def renderer(self, env: str, kwargs: Mapping[str, Any]) -> str | None: ...

    def memory(self, env: str, kwargs: Mapping[str, Any]) -> tuple[int, int, str] | None: ...


@dataclass(frozen=True)
class PlainEnvs:
    """No env kinds: an id is built as gymnasium has it registered, nothing is imported first."""

    def prepare(self, env: str, kwargs: Mapping[str, Any]) -> None:
        pass

    def not_found_hint(self, env: str) -> str:
        return ""

    def adapt(self, obj: Any, built: bool) -> Any:
        return None

    def unread_step(self, env: Any) -> Callable[[Any], tuple] | None:
        return None

    def renderer(self, env: str, kwargs: Mapping[str, Any]) -> str | None:
        return None

    def memory(self, env: str, kwargs: Mapping[str, Any]) -> tuple[int, int, str] | None:
        return None


PLAIN_ENVS = PlainEnvs()


@dataclass(frozen=True)
class EnvFactory:
    """Picklable recipe for one sub-env: ``env`` id or ``module:callable``, and kwargs.

    Calling it lets ``kinds`` prepare the env first (fasteval's imports the plugin of a namespaced id:
    ``gym_pusht/PushT-v0`` imports ``gym_pusht``), so it also works inside async worker processes. A
    callable from a file path (``path/env.py:make``) runs that file: only with ``trust_remote_code``, as
    for policies (see docs/security.md).

    ``env`` may also be a live object of the library API (an env of another library, or a factory of
    one): ``kinds.adapt`` then makes each slot's env from it (:class:`EnvKinds`).
    """

    env: Any
    kwargs: dict = field(default_factory=dict)
    trust_remote_code: bool = False
    kinds: EnvKinds = PLAIN_ENVS
    """The env kinds of the layer above (:class:`EnvKinds`); plain gymnasium by default."""

    @property
    def is_callable_ref(self) -> bool:
        return not isinstance(self.env, str) or split_callable_ref(self.env) is not None

    def renderer(self) -> str | None:
        """The GL renderer this process's envs render with (``kinds.renderer``), or ``None`` (no GL, a live object)."""
        return self.kinds.renderer(self.env, self.kwargs) if isinstance(self.env, str) else None

    def __call__(self) -> gym.Env | SlotEnvsSource:
        if not isinstance(self.env, str):  # a live env object or factory (library API)
            env = self.kinds.adapt(self.env, False)
            if env is None:
                raise UserInputError(f"env {self.env!r}: expected an env id, a module:callable string, a TorchRL env or a "
                                     f"factory of one.")
            return env
        self.kinds.prepare(self.env, self.kwargs)
        if self.is_callable_ref:
            fn = resolve_callable(self.env, what="env", trust_remote_code=self.trust_remote_code)
            env = fn(**self.kwargs)
            if isinstance(env, gym.Env):
                return env
            adapted = self.kinds.adapt(env, True)
            if adapted is None:
                raise UserInputError(f"env {self.env!r} returned {type(env).__name__}; expected a gymnasium.Env "
                                     f"or a TorchRL EnvBase.")
            return adapted
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


def make_factory(env: Any, kwargs: dict, max_steps: int | None, trust_remote_code: bool = False,
                 kinds: EnvKinds = PLAIN_ENVS) -> tuple[EnvFactory, Any, int | None]:
    """Validate ``env`` by building one instance. Returns (factory, probe env, step cap).

    ``trust_remote_code`` (the spec's) allows a ``path/file.py:callable`` env (it runs that file);
    ``kinds`` prepares the env, adapts envs of other libraries into slot envs (:class:`EnvKinds`) and
    explains an unknown namespace.

    The step cap is ``max_steps`` if given, else the env spec's ``max_episode_steps``
    (``None`` if neither exists). Raises :class:`EnvNotFoundError` with gymnasium's
    suggestion and the package to install for unknown ids or missing plugins.
    """
    factory = EnvFactory(env, dict(kwargs), bool(trust_remote_code), kinds)
    try:
        probe = factory()
    except gym.error.NamespaceNotFound as exc:
        raise EnvNotFoundError(f"env {env!r}: {exc} {kinds.not_found_hint(env)}".rstrip()) from None
    except gym.error.Error as exc:  # NameNotFound / VersionNotFound carry gymnasium's suggestion
        raise EnvNotFoundError(f"env {env!r}: {exc}") from None
    except TypeError as exc:
        raise UserInputError(f"env {env!r} rejected its keyword arguments {dict(kwargs)}: {exc}") from None
    except UserInputError:
        raise
    except Exception as exc:  # the env's own constructor: one line, exit 2, nothing ran
        raise EnvBuildError(f"env {env_label(env)!r} raised while it was built (keyword arguments {dict(kwargs)}): "
                            f"{one_line(exc)}. Nothing ran; check the env's arguments (--env-kwarg) and its "
                            f"installation.") from exc
    cap = max_steps
    if cap is None and not factory.is_callable_ref:
        registered = gym.spec(env).max_episode_steps  # applied by the engine, not by a TimeLimit wrapper
        cap = int(registered) if registered else None
    elif cap is None and isinstance(probe, gym.Env) and probe.spec is not None and probe.spec.max_episode_steps:
        cap = int(probe.spec.max_episode_steps)
    return factory, probe, cap


class SyncSlotEnvs(SlotEnvs):
    """Sub-envs of a ``SyncVectorEnv`` (autoreset disabled), stepped in-process per active slot."""

    def __init__(self, factory: EnvFactory, n_slots: int, first_env: gym.Env | None = None,
                 step_timeout: float | None = None, watchdog: Watchdog | None = None):
        self.watchdog = watchdog or Watchdog()
        """Deadlines for this process's env calls (``step_timeout``): a hung one cannot be interrupted."""
        self._guards = {what: self.watchdog.guard(step_timeout, ENV, f"an env {what}") for what in ("step", "rebuild")}
        self._step_guard = self._guards["step"]
        self.step_timeout = step_timeout
        self.resets = ResetDeadline(step_timeout)
        """The reset limit: a first reset's, then scaled from the first wave's measured resets
        (:mod:`fasteval.core.reset_deadline`)."""
        self._reset_guards: dict[tuple[int, float | None], Any] = {}
        fns: list[Callable[[], gym.Env]] = [factory] * n_slots
        self.factory = factory
        if first_env is not None:
            fns[0] = lambda: first_env
        self.vector_env = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
        super().__init__(n_slots, self.vector_env.single_observation_space, self.vector_env.single_action_space)
        self.obs = allocate_obs_buffer(self.observation_space, n_slots)
        self.block = SlotBlock(factory, self.vector_env.envs, 0, self.obs, self.rewards, self.terminated,
                               self.truncated, self.success)
        """The per-slot env code (:mod:`fasteval.core.slot_block`), over every slot."""
        self.envs = self.block.envs
        self.local_envs = self.envs
        self.metadata = dict(self.vector_env.metadata or {})
        renderer = factory.renderer() if isinstance(factory, EnvFactory) else None
        self.renderers = {"main": renderer} if renderer else {}

    @property
    def has_success_signal(self) -> bool:  # type: ignore[override]
        return self.block.has_success_signal

    def pin_host_buffers(self) -> bool:
        """Move the observation buffers into pinned memory (their contents too); the envs write there from now on."""
        if not self.pinned:
            from fasteval.core.transfer import pinned_zeros

            old, new = self.obs, allocate_obs_buffer(self.observation_space, self.n_slots, pinned_zeros)
            if isinstance(old, dict):
                for key, value in old.items():
                    new[key][...] = value
            else:
                new[...] = old
            self.obs = new
            self.block.use_obs_buffer(new)
            self.pinned = True
        return True

    def reset_guard(self, n: int) -> Any:
        """The deadline of ``n`` env resets in turn (:class:`~fasteval.core.reset_deadline.ResetDeadline`: a first
        wave of slow resets, a LIBERO model built per env, is not a hang)."""
        key = (n, self.resets.measured_s)
        guard = self._reset_guards.get(key)
        if guard is None and self.step_timeout is not None:
            guard = self._reset_guards[key] = self.watchdog.guard(self.resets.limit(n), ENV, self.resets.what(n))
        return guard

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        n = max(1, len(slots))
        self.watchdog.arm(self.reset_guard(n))
        started = perf_counter()
        self.block.reset(slots, seeds, self.failures)  # the engine rebuilds failed envs and retries the episode
        self.watchdog.disarm()
        if self.resets.measured_s is None and len(slots):
            self.resets.note([(perf_counter() - started, n)])

    def rebuild(self, slot: int) -> list[int]:
        self.watchdog.arm(self._guards["rebuild"])
        self.block.rebuild(slot)
        self.watchdog.disarm()
        return [slot]

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        """Step ``slots`` with rows of ``actions``; write results into the host buffers."""
        self.step_send(slots, actions)

    def skip_unread(self, on: bool) -> bool:
        kinds = self.factory.kinds if isinstance(self.factory, EnvFactory) else PLAIN_ENVS  # a bare callable: none
        return self.block.skip_unread(kinds.unread_step if on else None)

    def step_send_reading(self, slots: Sequence[int], actions: np.ndarray, reads: np.ndarray) -> list[int]:
        watchdog = self.watchdog
        watchdog.arm(self._step_guard)
        self.block.step_reading(slots, actions, reads, self.failures)
        watchdog.disarm()
        return slots

    def step_send(self, slots: Sequence[int], actions: np.ndarray) -> list[int]:
        """In-process envs step right here, with the step guard armed (one frame less than ``step``)."""
        watchdog = self.watchdog
        watchdog.arm(self._step_guard)
        self.block.step(slots, actions, self.failures)
        watchdog.disarm()
        return slots

    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        values = self.block.call(slots, name)
        raise_call_errors(name, slots, values)
        return values

    def has_attr(self, name: str) -> bool:
        return self.block.has_attr(name)

    def close(self) -> None:
        self.vector_env.close()


def build_slot_envs(vectorization: str, factory: EnvFactory, n_slots: int, probe: gym.Env | None,
                    step_timeout: float | None = None, workers: int | None = None,
                    watchdog: Watchdog | None = None) -> SlotEnvs:
    """Build the slot envs for ``vectorization`` (``sync`` reuses ``probe`` as slot 0).

    ``async`` builds a :class:`~fasteval.core.workers.WorkerPoolEnvs` of ``workers`` processes
    (``None``: ``min(n_slots, usable cores)``); its spaces and metadata come from ``probe`` (then
    closed). ``step_timeout`` (seconds) applies to the workers: one that does not answer in time
    is killed and replaced, and handled like a crash. In-process (sync) envs cannot be interrupted
    safely: for them ``step_timeout`` arms ``watchdog`` (:mod:`fasteval.core.watchdog`), which ends the
    run; use async for envs that may hang and should be retried.

    Host buffers start pageable; for a GPU policy the engine then asks for them to be page-locked
    (:meth:`~fasteval.core.slots.SlotEnvs.pin_host_buffers`: pinned arrays for sync envs, the shared
    mapping registered with CUDA for the pool), so observations cross in one copy.
    """
    if isinstance(probe, SlotEnvsSource):  # an env with a batch of its own: its workers are the slots
        if vectorization != "sync":
            probe.close()
            raise UserInputError(f"a batched env steps its own workers, so it runs with vectorization 'sync'; got "
                                 f"{vectorization!r}. Drop --vectorization async (or give a single env, one per slot).")
        return probe.build(n_slots)
    workers = fit_memory(factory, vectorization, n_slots, workers)
    if vectorization == "sync":
        return SyncSlotEnvs(factory, n_slots, first_env=probe, step_timeout=step_timeout, watchdog=watchdog)
    from fasteval.core.workers import WorkerPoolEnvs

    if not isinstance(factory.env, str):
        _check_picklable(factory)

    probe = probe if probe is not None else factory()
    spaces = (probe.observation_space, probe.action_space, env_metadata(probe))
    probe.close()
    return WorkerPoolEnvs(factory, n_slots, spaces[0], spaces[1], n_workers=workers, step_timeout=step_timeout,
                          metadata=spaces[2], unread_step=factory.kinds.unread_step)


def fit_memory(factory: EnvFactory, vectorization: str, n_slots: int, workers: int | None,
               available: Callable[[], int | None] | None = None) -> int | None:
    """The pool's workers, fitted to the memory available where the env kind declares what an env costs
    (:func:`fasteval.core.memory_fit.memory_plan`); what was decided, or that the batch does not fit, is said
    before the envs are built (a ``RuntimeWarning``)."""
    if not isinstance(factory, EnvFactory) or not isinstance(factory.env, str):
        return workers
    declared = factory.kinds.memory(factory.env, factory.kwargs)
    if declared is None:
        return workers
    import warnings

    from fasteval.core.memory_fit import available_memory, memory_plan
    from fasteval.core.workers import default_workers

    per_env, per_process, what = declared
    plan = memory_plan(n_slots, vectorization, workers, default_workers(n_slots), per_env, per_process,
                       (available or available_memory)(), what)
    if plan.message is not None:
        warnings.warn(plan.message, RuntimeWarning, stacklevel=2)
    return plan.workers


def _check_picklable(factory: EnvFactory) -> None:
    """A live env (or factory) goes to the async workers by pickle: refuse one that cannot, before any starts."""
    import pickle

    try:
        pickle.dumps(factory)
    except Exception as exc:
        raise UserInputError(
            f"vectorization 'async' sends the env to worker processes, but {type(factory.env).__name__} cannot be "
            f"pickled ({type(exc).__name__}: {exc}). Give the env as a module:callable string, a factory defined at "
            f"module level, or use vectorization 'sync'.") from None
