"""LeRobot's names and files for a run: task groups and task names, and the videos' layout.

* :func:`lerobot_names`: the ``(task_group, task)`` LeRobot gives the one task of an env that is a
  LeRobot env type (``("pusht", "PushT-v0")`` for fasteval's fast PushT as for gym-pusht's own,
  ``("push-v3", "push-v3")`` for Meta-World), so that ``eval_info.json``'s groups are LeRobot's, not
  the factory's import path;
* :func:`to_lerobot_videos`: moves a run's videos from fasteval's layout
  (``<videos>/<task>/ep<i>_seed<s>_<outcome>.mp4``, suites ``<videos>/<group>_<id>/<task>/...``) to
  LeRobot's (``<videos>/<group>_<task_id>/eval_episode_<i>.mp4``), and updates ``result.video_paths``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from fasteval.robot.fast_envs import FAST_PUSHT
from fasteval.robot.lerobot.envs import ENV_REF as LEROBOT_ENV_REF
from fasteval.robot.recording import safe_name

GYM_PREFIXES = {"gym_pusht/": "pusht", "gym_aloha/": "aloha"}
"""gymnasium namespaces of LeRobot's PushT and ALOHA env types."""
_EPISODE_FILE = re.compile(r"^ep(\d+)_seed-?\d+_(?:success|failure)\.mp4$")


def lerobot_names(env: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """``(task_group, task)`` as LeRobot names the one task of ``env``; ``None`` when ``env`` is no LeRobot env type.

    LeRobot's env configs build ``{group: {0: env}}`` with group ``type`` (PushT, ALOHA, any type that keeps
    ``EnvConfig.create_envs``), the task name for Meta-World, the suite for LIBERO; the task is ``env.task``.
    """
    kwargs = dict(env_kwargs or {})
    if env == FAST_PUSHT:
        return "pusht", "PushT-v0"
    for prefix, env_type in GYM_PREFIXES.items():
        if env.startswith(prefix):
            return env_type, env[len(prefix):]
    if env != LEROBOT_ENV_REF or not isinstance(kwargs.get("type"), str):
        return None
    env_type, task = kwargs["type"], kwargs.get("task")
    if not isinstance(task, str) or not task:
        task = _default_task(env_type) or env_type
    if env_type in ("libero", "libero_plus") and kwargs.get("task_id") is not None:
        from fasteval.robot.lerobot.envs import libero_task_names

        return task, libero_task_names(task)[int(kwargs["task_id"])]
    return (env_type if _default_factory(env_type) else task), task


def _default_task(env_type: str) -> str | None:
    from lerobot.envs.configs import EnvConfig

    task = getattr(EnvConfig.get_known_choices().get(env_type), "task", None)
    return task if isinstance(task, str) else None


def _default_factory(env_type: str) -> bool:
    """Whether LeRobot's config for ``env_type`` keeps ``EnvConfig.create_envs`` (group: the type)."""
    from lerobot.envs.configs import EnvConfig

    cls = EnvConfig.get_known_choices().get(env_type)
    return cls is not None and getattr(cls, "create_envs", None) is EnvConfig.create_envs


def to_lerobot_videos(result: Any, videos_root: str | os.PathLike) -> None:
    """Move ``result``'s videos into LeRobot's layout, ``<videos_root>/<group>_<task_id>/eval_episode_<i>.mp4``
    (``i``: the episode's index in its task), and point ``result.video_paths`` at them.

    A one-task run's videos (``<videos_root>/<task>/...``) go to its one task's folder; a suite's are
    already in ``<videos_root>/<group>_<task_id>/<task>/``. Emptied folders are removed.
    """
    root = Path(videos_root)
    tasks = result.per_episode.tasks
    moved = []
    for old in map(Path, result.video_paths):
        match = _EPISODE_FILE.match(old.name)
        if match is None:
            moved.append(str(old))
            continue
        folder = old.parent.parent
        if folder == root:  # one task: its folder is named after the task's group and id
            if len(tasks) != 1:
                raise ValueError(f"{old}: a video outside any task's folder, in a run of {len(tasks)} tasks")
            group, task_id, _ = tasks[0]
            folder = root / f"{safe_name(group)}_{safe_name(task_id)}"
        folder.mkdir(parents=True, exist_ok=True)
        new = folder / f"eval_episode_{int(match.group(1))}.mp4"
        os.replace(old, new)
        moved.append(str(new))
        try:
            old.parent.rmdir()
        except OSError:  # more videos left there
            pass
    result.video_paths = moved
