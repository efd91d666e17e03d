"""One task's env, built by LeRobot's own env config and factory: ``fasteval.robot.lerobot.envs:make_env``.

fasteval's env factory calls ``make_env(type=..., task=..., **options)`` once per slot (in the
worker process for async envs). It builds ``lerobot.envs.factory.make_env_config(type, task=task,
**options)``, asks the config for a one-env vector env (``create_envs(n_envs=1)``: LeRobot's
wrappers, features and task lists), and returns that single env. Multi-task suites take one task
per call: LIBERO's ``task_id`` (passed to LeRobot as ``task_ids=[task_id]``), Meta-World's task name.

Nested Dict observations (several cameras: ``pixels``; LIBERO's ``robot_state``) are flattened to
``pixels/<camera>`` (``robot_state/<...>``) keys, which :class:`fasteval.robot.lerobot.observations.LeRobotBatch`
maps as LeRobot's ``preprocess_observation`` maps the nested dicts. The env's ``close`` closes the one-env
vector env LeRobot built around it (:class:`ClosesVector`).

MuJoCo: every function here that reaches LeRobot's env modules (which import MuJoCo: Meta-World, LIBERO,
ALOHA) first sets ``MUJOCO_GL=egl`` on a machine without a display
(:func:`fasteval.robot.env_kinds.headless.ensure_headless_gl`), before MuJoCo is imported, since MuJoCo reads
it at import.

The policy loader rebuilds the same env config from the spec's env kwargs (:func:`config_for`), so
that it pairs the env-side processors LeRobot pairs with that env type.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import gymnasium as gym

from fasteval.robot.env_kinds.headless import ensure_headless_gl
from fasteval.types.errors import UserInputError
from fasteval.robot.lerobot.extra import require_lerobot
from fasteval.robot.lerobot.libero import (ASSETS_ENV as LIBERO_ASSETS_ENV, FASTEVAL_KWARGS as LIBERO_FASTEVAL_KWARGS,  # noqa: F401
                                           INIT_STATE_OFFSET, LIBERO_TYPES, VIDEO_CAMERAS, InitStateBySeed,
                                           config_path as libero_config_path, is_libero_type, prepare_assets,
                                           prepare_libero)

ENV_REF = "fasteval.robot.lerobot.envs:make_env"
"""The env reference fasteval's ``--env.type`` table gives LeRobot env types (``module:callable``)."""


def config_for(env: str, env_kwargs: dict[str, Any]) -> Any:
    """LeRobot's ``EnvConfig`` for an fasteval env reference, or ``None`` when the env is not one of
    LeRobot's (then no env-side processors are paired with the policy)."""
    if env != ENV_REF:
        return None
    return env_config(**dict(env_kwargs))


def env_config(type: str, task: str | None = None, task_id: int | None = None, **options: Any) -> Any:
    """LeRobot's ``EnvConfig`` for one task. Raises :class:`UserInputError` for an unknown type or option."""
    require_lerobot(f"--env.type={type}")
    ensure_headless_gl()  # before LeRobot's env modules import MuJoCo
    from lerobot.envs.configs import EnvConfig, HubEnvConfig
    from lerobot.envs.factory import make_env_config

    cls = EnvConfig.get_known_choices().get(type)
    if cls is not None and issubclass(cls, HubEnvConfig):  # a file may name this env (fasteval.types.trust): no hub code
        raise UserInputError(f"--env.type={type} is not supported: LeRobot downloads this env's code from the hub "
                             f"({cls.hub_path}) and runs it; fasteval runs no hub code.")
    kwargs = {k: v for k, v in options.items() if k not in LIBERO_FASTEVAL_KWARGS}  # fasteval's, not LeRobot's
    if task is not None:
        kwargs["task"] = task
    if task_id is not None:
        kwargs["task_ids"] = [int(task_id)]
    if is_libero_type(type):
        prepare_libero()
    try:
        return make_env_config(type, **kwargs)
    except (ValueError, TypeError) as exc:
        raise UserInputError(f"--env.type={type}: LeRobot's env config rejected {kwargs}: {exc}") from None


def make_env(type: str, task: str | None = None, task_id: int | None = None, **options: Any) -> gym.Env:
    """One env of ``type`` / ``task``, as LeRobot's factory builds it (see the module docstring).

    The env is the single env of LeRobot's one-env vector env; closing it closes that vector env. LIBERO:
    the scene assets are found offline (:func:`fasteval.robot.lerobot.libero.prepare_assets`) and each
    episode's init state follows its reset seed (:class:`fasteval.robot.lerobot.libero.InitStateBySeed`,
    ``init_state_offset``: fasteval's env kwarg)."""
    offset, cameras = options.pop(INIT_STATE_OFFSET, 0), options.pop(VIDEO_CAMERAS, "agentview")
    config = env_config(type, task, task_id, **options)
    if is_libero_type(type):
        prepare_assets()
    from fasteval.robot.lerobot.factory_messages import said_once

    with said_once():  # LeRobot's LIBERO factory prints its progress on stdout, once per env: said once, on stderr
        suites = config.create_envs(n_envs=1, use_async_envs=False)
    vec_envs = [vec for tasks in suites.values() for vec in tasks.values()]
    if len(vec_envs) != 1:
        for vec in vec_envs:
            vec.close()
        raise UserInputError(f"--env.type={type} --env.task={task}: LeRobot built {len(vec_envs)} task envs; "
                             f"fasteval builds one task per env (give one task, and task_id for suites).")
    vector = vec_envs[0]
    env: gym.Env = ClosesVector(vector.envs[0], vector)
    _attach_step_limit(env, type)
    if is_libero_type(type):
        from fasteval.robot.env_kinds.model_reuse import keep_compiled_model

        keep_compiled_model(env.unwrapped)  # hard resets reuse the compiled model while its XML is the same
        env = InitStateBySeed(env, int(offset or 0), str(cameras))
    if type == "metaworld":
        env = OwnGLContext(env)
    if isinstance(env.observation_space, gym.spaces.Dict) and any(
            isinstance(sub, gym.spaces.Dict) for sub in env.observation_space.spaces.values()):
        env = FlattenNested(env)
    return env


class ClosesVector(gym.Wrapper):
    """LeRobot's env, whose ``close`` also closes the one-env vector env LeRobot built around it."""

    def __init__(self, env: gym.Env, vector: Any):
        super().__init__(env)
        self.vector = vector

    def close(self) -> None:
        vector, self.vector = self.vector, None
        if vector is not None:
            vector.close()  # closes the env inside it too
        else:
            super().close()


class OwnGLContext(gym.Wrapper):
    """LeRobot's Meta-World env, whose renders run in its own GL context, and whose GL objects die with it.

    gymnasium's MuJoCo renderer makes its viewer's GL context current only when one env holds viewers of several
    render modes, so an env renders in whatever context is current in the thread: another env's (the same
    frame), or none once another env closed its current context (a black frame). Worse, closing an env frees its
    GL context but not its MuJoCo render context, which garbage collection frees later, deleting its GL objects
    by number *in whatever context is current then*: a running env's, whose frames turn black (measured: a run
    after closed runs rendered black frames mid-episode, and its episodes differed). So before each step, reset
    and render this makes the env's own context current (when its viewer exists), and ``close`` frees the render
    context in its own GL context first. The frames are those a lone env renders."""

    def _viewer(self) -> Any:
        inner = self.env.unwrapped._env  # LeRobot's MetaworldEnv: the Meta-World env, built on first reset
        return None if inner is None else inner.mujoco_renderer._viewers.get("rgb_array")

    def _own_context(self) -> None:
        viewer = self._viewer()
        if viewer is not None:
            viewer.make_context_current()

    def close(self) -> None:
        viewer = self._viewer()
        if viewer is not None:
            viewer.make_context_current()
            viewer.con.free()  # its GL objects, freed in its own context (not later, in another's)
        super().close()

    def step(self, action: Any) -> Any:
        self._own_context()
        return self.env.step(action)

    def reset(self, **kwargs: Any) -> Any:
        self._own_context()
        return self.env.reset(**kwargs)

    def render(self) -> Any:
        self._own_context()
        return self.env.render()


def _attach_step_limit(env: gym.Env, type: str) -> None:
    """Give an env without a gymnasium spec LeRobot's step limit (its ``_max_episode_steps``, which LeRobot's
    rollout reads: Meta-World's 500) as ``spec.max_episode_steps``, where fasteval's engine looks for it."""
    # probe: an optional attribute of LeRobot's own env classes (Meta-World's), read as LeRobot's rollout reads it
    limit = getattr(env.unwrapped, "_max_episode_steps", None)
    if env.spec is None and isinstance(limit, int) and limit > 0:
        from gymnasium.envs.registration import EnvSpec

        env.unwrapped.spec = EnvSpec(id=f"lerobot-{type}", entry_point=ENV_REF, max_episode_steps=limit)


# -- suites: one command, many tasks ----------------------------------------------------------------
def suite_tasks(type: str, task: str | list[str] | None = None, task_id: int | None = None,
                **options: Any) -> list[tuple[str, int, dict[str, Any], str]] | None:
    """The tasks LeRobot's factory builds for ``type`` / ``task``, as ``[(task_group, task_id, env_kwargs, name)]``
    in LeRobot's order and with LeRobot's labels; ``None`` when that is a single env (one task, no suite; no
    ``task``: the type's default task).

    ``task`` is LeRobot's string (``"push-v3,reach-v3"``) or its list of comma-separated parts. Each part is
    a task group, expanded the way LeRobot's ``create_*_envs`` expands it, without building an env:

    * ``metaworld``: a difficulty (``easy``, ``medium``, ``hard``, ``very_hard``) is its task list, any other
      name is one task (task id 0);
    * ``libero``: a suite name is its tasks (ids ``0 .. n-1``, or those of ``task_ids=[...]`` / ``task_id``,
      sorted), named as in LIBERO's benchmark table;
    * other types: each part is one task (id 0).

    Each task's ``env_kwargs`` go to :func:`make_env` (``type``, the task, the options), which builds that
    task's single env.
    """
    if task is None:
        return None
    parts = [t.strip() for t in (task.split(",") if isinstance(task, str) else task) for t in t.split(",")]
    parts = [t for t in parts if t]
    options = dict(options)
    ids = [int(task_id)] if task_id is not None else options.pop("task_ids", None)
    out: list[tuple[str, int, dict[str, Any], str]] = []
    for group in parts:
        for tid, name, kwargs in _expand(type, group, ids):
            out.append((group, tid, {"type": type, **options, **kwargs}, name))
    return out if len(out) > 1 else None


def _expand(type: str, group: str, ids: list[int] | None) -> list[tuple[int, str, dict[str, Any]]]:
    """``[(task_id, task name, make_env kwargs)]`` of one task group (see :func:`suite_tasks`)."""
    ensure_headless_gl()  # lerobot.envs.metaworld and LIBERO import MuJoCo
    if type == "metaworld":
        from lerobot.envs.metaworld import DIFFICULTY_TO_TASKS

        return [(i, name, {"task": name}) for i, name in enumerate(DIFFICULTY_TO_TASKS.get(group, [group]))]
    if is_libero_type(type):
        names = libero_task_names(group)
        ids = list(range(len(names))) if ids is None else sorted({int(i) for i in ids})  # as LeRobot selects them
        bad = [i for i in ids if not 0 <= i < len(names)]
        if bad:
            raise UserInputError(f"--env.type={type} --env.task={group}: task ids {bad} out of range; the suite has "
                                 f"{len(names)} tasks (ids 0..{len(names) - 1}).")
        return [(i, names[i], {"task": group, "task_id": i}) for i in ids]
    if ids is not None and len(ids) != 1:
        raise UserInputError(f"--env.type={type}: task_ids={ids}: fasteval builds one env per task; give one id "
                             f"per command for this type.")
    return [(ids[0] if ids else 0, group, {"task": group, **({"task_id": ids[0]} if ids else {})})]


def libero_task_names(suite: str) -> list[str]:
    """The task names of LIBERO suite ``suite`` (``libero_spatial``: 10), from LIBERO's benchmark registry.

    Reads LIBERO's task table only (no scene assets, no env); writes LIBERO's config first
    (:func:`prepare_libero`) so that the import asks nothing."""
    prepare_libero()
    with contextlib.redirect_stdout(sys.stderr):  # LIBERO prints "[info] using task orders" on stdout
        from libero.libero import benchmark

        return _task_names(benchmark, suite)


def libero_task_name(suite: str, task_id: int) -> str:
    """LIBERO's name of task ``task_id`` of ``suite``. Raises :class:`UserInputError` for an id out of range."""
    names = libero_task_names(suite)
    if not 0 <= int(task_id) < len(names):
        raise UserInputError(f"--env.type=libero --env.task={suite}: task id {task_id} out of range; the suite has "
                             f"{len(names)} tasks (ids 0..{len(names) - 1}).")
    return names[int(task_id)]


def _task_names(benchmark: Any, suite: str) -> list[str]:
    suites = benchmark.get_benchmark_dict()
    if suite not in suites:
        raise UserInputError(f"--env.type=libero: unknown --env.task {suite!r}; expected one of "
                             f"{', '.join(sorted(suites))}.")
    return list(suites[suite]().get_task_names())


class FlattenNested(gym.ObservationWrapper):
    """``{"pixels": {cam: img}, "robot_state": {"eef": {...}}, ...}`` -> ``{"pixels/cam": img,
    "robot_state/eef/...": ..., ...}`` (fasteval's buffers are flat; the LeRobot batch nests them again)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict(_flat_spaces(env.observation_space.spaces))

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        from fasteval.robot.lerobot.observations import flatten

        return flatten(observation)


def _flat_spaces(spaces: Any, prefix: str = "") -> dict[str, gym.Space]:
    out: dict[str, gym.Space] = {}
    for key, sub in spaces.items():
        if isinstance(sub, gym.spaces.Dict):
            out.update(_flat_spaces(sub.spaces, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = sub
    return out

