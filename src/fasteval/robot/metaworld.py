"""MetaWorld v3 tasks as seeded gymnasium envs (``./scripts/install.sh metaworld``).

:func:`make_metaworld_env` builds one MetaWorld v3 task as a gymnasium env whose reset seed fixes
the task variant (goal and object positions); ``--env.type=metaworld`` and
:func:`fasteval.doors.suites.metaworld_suite` (MT10 / MT50 or a list of tasks) use it.
"""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np

from fasteval.robot.env_kinds.headless import ensure_headless_gl
from fasteval.types.errors import UserInputError

METAWORLD_ENV_REF = f"{__name__}:make_metaworld_env"
"""The ``module:callable`` reference of :func:`make_metaworld_env`."""
METAWORLD_ENV_REFS = (METAWORLD_ENV_REF, "fasteval.doors.suites:make_metaworld_env")
"""Every spelling of that reference (``fasteval.doors.suites`` re-exports it, and older run folders name it there)."""
METAWORLD_BENCHMARKS = ("MT10", "MT25", "MT50")


def import_metaworld() -> Any:
    try:
        import metaworld  # noqa: F401
        from metaworld import env_dict
    except ImportError:
        raise UserInputError("MetaWorld is not installed: ./scripts/install.sh metaworld (or pip install metaworld).") from None
    return env_dict


def metaworld_task_description(task: str) -> str:
    """A plain description from the task name: ``pick-place-v3`` -> ``pick place``."""
    base = task.rsplit("-v", 1)[0]
    return base.replace("-", " ")


class MetaWorldEnv(gym.Wrapper):
    """One MetaWorld v3 task (``reach-v3``, ``pick-place-v3`` ...) as a seeded gymnasium env.

    * ``reset(seed=s)`` seeds the task's own generator, which draws the task variant (goal and
      object positions, MetaWorld's ``rand_vec``): the same seed gives the same episode, and
      episode ``i`` of every task in a suite uses ``seed + i``. MetaWorld itself ignores reset
      seeds; this wrapper makes them count.
    * Observations: the 39-d state (goal visible, as in the MT benchmarks), float64.
    * ``info["is_success"]`` mirrors MetaWorld's ``info["success"]``. Episodes are truncated by
      MetaWorld at ``max_path_length`` (500) steps.
    * ``task_description``: the task name in words (``pick place``), read once per episode.
    * Rendering: ``render_mode="rgb_array"`` with ``camera_name`` / ``width`` / ``height``. On a
      machine without a display, ``MUJOCO_GL=egl`` is set when it is unset (said once).
    """

    def __init__(self, task: str, render_mode: str | None = None, camera_name: str = "corner",
                 width: int = 480, height: int = 480):
        ensure_headless_gl()  # MUJOCO_GL=egl without a display, before MuJoCo renders (docs/robot.md)
        env_dict = import_metaworld()
        from metaworld.types import Task as MWTask

        if task not in env_dict.ALL_V3_ENVIRONMENTS:
            raise UserInputError(f"MetaWorld task {task!r}: unknown; expected one of {sorted(env_dict.ALL_V3_ENVIRONMENTS)}.")
        cls = env_dict.ALL_V3_ENVIRONMENTS[task]
        env = cls(render_mode=render_mode, camera_name=camera_name, width=width, height=height)
        kwargs = dict(env_dict.MT50_V3_ARGS_KWARGS[task]["kwargs"])
        kwargs.pop("task_id", None)
        space = env._random_reset_space
        first = np.random.default_rng(0).uniform(space.low, space.high, size=space.low.size)
        env.set_task(MWTask(env_name=task, data=pickle.dumps(
            {"env_cls": cls, "rand_vec": first, "partially_observable": False, **kwargs})))
        env._freeze_rand_vec = False  # the variant comes from the env's seeded generator at each reset
        env.seeded_rand_vec = True
        super().__init__(env)
        self.task = task
        self.task_description = metaworld_task_description(task)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.env.unwrapped.seed(int(seed))
        return self.env.reset(options=options)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["is_success"] = bool(info.get("success", 0.0))
        return obs, float(reward), bool(terminated), bool(truncated), info


def make_metaworld_env(task: str, **kwargs: Any) -> MetaWorldEnv:
    """``module:callable`` entry point: ``--env fasteval.robot.metaworld:make_metaworld_env --env-kwarg task=reach-v3``."""
    return MetaWorldEnv(task, **kwargs)
