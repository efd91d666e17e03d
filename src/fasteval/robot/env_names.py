"""The names a run's one task carries in ``eval_info.json``: LeRobot's, for LeRobot's env types.

:func:`task_names` gives ``(task_group, task)``: ``("pusht", "PushT-v0")`` for fasteval's fast PushT as
for gym-pusht's own, ``("aloha", "AlohaInsertion-v0")``, ``("push-v3", "push-v3")`` for Meta-World (LeRobot
names a Meta-World group after its task), LeRobot's env type for a type built by LeRobot's default
factory, the suite and LIBERO's task name for LIBERO; any other env keeps its id (``("CartPole-v1",
"CartPole-v1")``), never a factory's import path where a LeRobot name exists.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fasteval.robot.fast_envs import FAST_PUSHT
from fasteval.robot.lerobot.envs import ENV_REF as LEROBOT_ENV_REF
from fasteval.robot.metaworld import METAWORLD_ENV_REFS

GYM_PREFIXES = {"gym_pusht/": "pusht", "gym_aloha/": "aloha"}
"""gymnasium namespaces of LeRobot's PushT and ALOHA env types."""


def task_names(env: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """``(task_group, task)`` of the one task of ``env`` (see the module docstring)."""
    return lerobot_names(env, env_kwargs) or (env, env)


def task_label(env: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, int, str]:
    """``(task_group, task_id, task)`` of the one task of ``env``: :func:`task_names` and :func:`task_id`."""
    group, task = task_names(env, env_kwargs)
    return group, task_id(env, env_kwargs), task


def task_id(env: str, env_kwargs: Mapping[str, Any] | None = None) -> int:
    """The task id LeRobot gives the one task of a LeRobot env type: the one its kwargs choose (``task_id``, or
    ``task_ids=[k]``: LIBERO's task ``k`` of the suite, as ``--env.task_ids=[3]`` runs it), else 0."""
    kwargs = dict(env_kwargs or {})
    if env != LEROBOT_ENV_REF:
        return 0
    if kwargs.get("task_id") is not None:
        return int(kwargs["task_id"])
    ids = kwargs.get("task_ids")
    if isinstance(ids, (list, tuple)) and len(ids) == 1:
        return int(ids[0])
    return 0


def lerobot_names(env: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """``(task_group, task)`` as LeRobot names the one task of ``env``; ``None`` when ``env`` is no LeRobot env type."""
    kwargs = dict(env_kwargs or {})
    if env == FAST_PUSHT:
        return "pusht", "PushT-v0"
    for prefix, env_type in GYM_PREFIXES.items():
        if env.startswith(prefix):
            return env_type, env[len(prefix):]
    task = kwargs.get("task")
    if env in METAWORLD_ENV_REFS and isinstance(task, str):
        return task, task
    if env != LEROBOT_ENV_REF or not isinstance(kwargs.get("type"), str):
        return None
    env_type = kwargs["type"]
    if not isinstance(task, str) or not task:
        task = _default_task(env_type) or env_type
    from fasteval.robot.lerobot.libero import is_libero_type

    ids = kwargs.get("task_ids")
    if is_libero_type(env_type) and (kwargs.get("task_id") is not None or (isinstance(ids, (list, tuple))
                                                                           and len(ids) == 1)):
        from fasteval.robot.lerobot.envs import libero_task_name

        return task, libero_task_name(task, task_id(env, kwargs))
    return (env_type if _default_factory(env_type) else task), task


def _default_task(env_type: str) -> str | None:
    from lerobot.envs.configs import EnvConfig

    cls = EnvConfig.get_known_choices().get(env_type)
    task = cls.task if cls is not None else None  # EnvConfig's field: every env type has a default (or None)
    return task if isinstance(task, str) else None


def _default_factory(env_type: str) -> bool:
    """Whether LeRobot's config for ``env_type`` keeps ``EnvConfig.create_envs``, which names its one group
    after the type (``{self.type: {0: env}}``)."""
    from lerobot.envs.configs import EnvConfig

    cls = EnvConfig.get_known_choices().get(env_type)
    return cls is not None and cls.create_envs is EnvConfig.create_envs


def summary_name(env: str | None, tasks: Sequence[tuple[Any, Any, Any]], suite: bool = False) -> str | None:
    """The console summary's ``env`` line: LeRobot's names where the run's one task has them
    (``pusht/0 PushT-v0``, ``push-v3/0``, ``libero_spatial/0 <task>``: ``<task_group>/<task_id>`` and the task's
    name, as the per-task lines of a suite print them), else ``env`` (a gymnasium id, or a suite's list)."""
    if suite or len(tasks) != 1:
        return env
    group, task_id, task = tasks[0]
    if (str(group), str(task)) == (str(env), str(env)):
        return env  # no LeRobot name: the env's id
    return f"{group}/{task_id}" + ("" if str(task) == str(group) else f" {task}")
