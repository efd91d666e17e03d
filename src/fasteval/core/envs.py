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

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from fasteval.core.headless import ensure_headless_gl
from fasteval.core.slot_block import SlotBlock, raise_call_errors
from fasteval.core.slots import EnvFailure, SlotEnvs, _failure, _obs_writer, allocate_obs_buffer, call_env, env_metadata  # noqa: F401 (re-exported)
from fasteval.core.watchdog import ENV, Watchdog
from fasteval.types.errors import EnvNotFoundError, UserInputError
from fasteval.types.refs import resolve_callable, split_callable_ref


@dataclass(frozen=True)
class EnvFactory:
    """Picklable recipe for one sub-env: ``env`` id or ``module:callable``, and kwargs.

    Calling it imports the env's plugin namespace first (``gym_pusht/PushT-v0``
    imports ``gym_pusht``), so it also works inside async worker processes. A callable from a
    file path (``path/env.py:make``) runs that file: only with ``trust_remote_code``, as for
    policies (see docs/security.md).
    """

    env: str
    kwargs: dict = field(default_factory=dict)
    trust_remote_code: bool = False

    @property
    def is_callable_ref(self) -> bool:
        return split_callable_ref(self.env) is not None

    def __call__(self) -> gym.Env:
        if self.is_callable_ref:
            fn = resolve_callable(self.env, what="env", trust_remote_code=self.trust_remote_code)
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


KNOWN_NAMESPACES: dict[str, tuple[str, str]] = {
    "Meta-World": ("metaworld", "metaworld"),
    "gym_pusht": ("gym_pusht", "gym-pusht"),
    "gym_aloha": ("gym_aloha", "gym-aloha"),
    "gym_xarm": ("gym_xarm", "gym-xarm"),
    "gym_hil": ("gym_hil", "gym-hil"),
    "ALE": ("ale_py", "ale-py"),
    "fasteval": ("fasteval.testing", "fasteval"),  # the known-answer envs register on importing fasteval.testing
}
"""Env id namespaces whose module or pip package is not the namespace itself: ``ns -> (module, package)``."""
MUJOCO_MODULES = ("mujoco", "metaworld", "gym_aloha")
"""Entry-point modules of envs that render through MuJoCo (see :func:`uses_mujoco`)."""


def namespace_module(namespace: str) -> str | None:
    """The module that registers the envs of ``namespace`` (``Meta-World`` -> ``metaworld``), or
    ``None`` when the namespace is not a module name and not a known plugin."""
    if namespace in KNOWN_NAMESPACES:
        return KNOWN_NAMESPACES[namespace][0]
    if all(part.isidentifier() for part in namespace.split(".")):
        return namespace
    return None


def uses_mujoco(env_id: str) -> bool:
    """Whether the registered entry point of ``env_id`` is a MuJoCo env (gymnasium's, MetaWorld, ALOHA)."""
    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return False
    text = entry if isinstance(entry, str) else f"{getattr(entry, '__module__', '')}"
    return any(name in text.lower() for name in MUJOCO_MODULES)


def import_env_namespace(env_id: str) -> None:
    """Import the plugin package of a namespaced id (``ns/Name-vN`` -> ``import ns``; known plugins
    whose module has another name through :data:`KNOWN_NAMESPACES`), if any. For a MuJoCo env on a
    machine without a display, set ``MUJOCO_GL=egl`` first (:mod:`fasteval.core.headless`)."""
    if "/" not in env_id:
        if uses_mujoco(env_id):
            ensure_headless_gl()
        return
    module = namespace_module(env_id.split("/", 1)[0])
    if module is None:
        return  # not a module name: gymnasium reports the unknown id
    try:
        importlib.import_module(module)
    except ImportError:
        pass  # gymnasium raises NamespaceNotFound next; make_factory turns that into a clear error
    else:
        if uses_mujoco(env_id):
            ensure_headless_gl()


def namespace_hint(namespace: str) -> str:
    """What to do about an unknown env namespace: the package to install, or why its import failed."""
    module = namespace_module(namespace)
    if module is None:
        return (f"The namespace {namespace!r} is not a Python module name and not a plugin fasteval knows "
                f"({', '.join(sorted(KNOWN_NAMESPACES))}); import the package that registers it first, or give "
                f"the env as module:callable.")
    package = KNOWN_NAMESPACES.get(namespace, (module, None))[1]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] == exc.name.split(".")[0]:
            install = f"`pip install {package}`" if package else "install the package that provides it"
            return f"The namespace {namespace!r} comes from the plugin module {module!r}, which is not installed: {install}."
        return f"Importing {module!r} (which registers {namespace!r}) failed: {type(exc).__name__}: {exc}."
    except Exception as exc:  # a plugin that is installed but broken
        return f"Importing {module!r} (which registers {namespace!r}) failed: {type(exc).__name__}: {exc}."
    return f"The module {module!r} is installed but registers no {namespace!r} envs; check the env id."


def make_factory(env: str, kwargs: dict, max_steps: int | None,
                 trust_remote_code: bool = False) -> tuple[EnvFactory, gym.Env, int | None]:
    """Validate ``env`` by building one instance. Returns (factory, probe env, step cap).

    ``trust_remote_code`` (the spec's) allows a ``path/file.py:callable`` env (it runs that file).

    The step cap is ``max_steps`` if given, else the env spec's ``max_episode_steps``
    (``None`` if neither exists). Raises :class:`EnvNotFoundError` with gymnasium's
    suggestion and the package to install for unknown ids or missing plugins.
    """
    factory = EnvFactory(env, dict(kwargs), bool(trust_remote_code))
    try:
        probe = factory()
    except gym.error.NamespaceNotFound as exc:
        raise EnvNotFoundError(f"env {env!r}: {exc} {namespace_hint(env.split('/', 1)[0])}") from None
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


class SyncSlotEnvs(SlotEnvs):
    """Sub-envs of a ``SyncVectorEnv`` (autoreset disabled), stepped in-process per active slot."""

    def __init__(self, factory: EnvFactory, n_slots: int, first_env: gym.Env | None = None,
                 step_timeout: float | None = None, watchdog: Watchdog | None = None):
        self.watchdog = watchdog or Watchdog()
        """Deadlines for this process's env calls (``step_timeout``): a hung one cannot be interrupted."""
        self._guards = {what: self.watchdog.guard(step_timeout, ENV, f"an env {what}") for what in ("step", "reset", "rebuild")}
        self._step_guard = self._guards["step"]
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

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self.watchdog.arm(self._guards["reset"])
        self.block.reset(slots, seeds, self.failures)  # the engine rebuilds failed envs and retries the episode
        self.watchdog.disarm()

    def rebuild(self, slot: int) -> list[int]:
        self.watchdog.arm(self._guards["rebuild"])
        self.block.rebuild(slot)
        self.watchdog.disarm()
        return [slot]

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        """Step ``slots`` with rows of ``actions``; write results into the host buffers."""
        self.step_send(slots, actions)

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
    if vectorization == "sync":
        return SyncSlotEnvs(factory, n_slots, first_env=probe, step_timeout=step_timeout, watchdog=watchdog)
    from fasteval.core.workers import WorkerPoolEnvs

    probe = probe if probe is not None else factory()
    spaces = (probe.observation_space, probe.action_space, env_metadata(probe))
    probe.close()
    return WorkerPoolEnvs(factory, n_slots, spaces[0], spaces[1], n_workers=workers, step_timeout=step_timeout,
                          metadata=spaces[2])
