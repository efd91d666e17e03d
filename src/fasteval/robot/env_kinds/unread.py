"""Which kinds of env can skip the work of an observation nobody reads, and how (:mod:`fasteval.core.unread`).

Declared here per kind of env, by its class and its declared observation settings, never found by trying.
Each entry steps a built slot env exactly as its own ``step`` does, but without computing the observation's
expensive part; rendering does not change the physics, so the episode is the same (``tests/test_unread.py``
and ``tests/lerobot/test_unread_lerobot.py`` compare every episode and every observation read, bit for bit).

* **PushT** (gym-pusht's ``PushTEnv`` and fasteval's :class:`~fasteval.robot.fast_envs.pusht.FastPushTEnv`),
  with a pixel observation (``obs_type`` ``pixels`` or ``pixels_agent_pos``): the step runs without
  ``get_obs`` (the 512 px surface drawn and resized); physics, reward, flags and info are the env's own code.
  Found by the unwrapped env's class, so LeRobot's ``pusht`` env type (``TimeLimit`` and ``OrderEnforcing`` under
  LeRobot's one-env wrapper) skips as the plain env does; every wrapper on the way must hand the observation on
  untouched (:func:`passes_observation_through`), and the step still goes through them all.
* **gymnasium pixel envs**: an :class:`~gymnasium.wrappers.AddRenderObservation` on top (a MuJoCo env with
  ``render_mode="rgb_array"`` whose observation is its frame): the unread step is the inner env's step, without
  the wrapper's ``render()``.
* **LIBERO** through LeRobot's ``LiberoEnv`` (fasteval's wrappers around it): robosuite's camera observables
  keep their last frame instead of rendering on unread steps (their sampling clocks run as before, so the
  next read step renders at the same sub-step), and so do the ``num_steps_wait`` settle steps of each reset
  but the last, and the frames of the reset and of the init state that those settle steps replace.
* **Meta-World through LeRobot's env** (its ``MetaworldEnv``, pixel observation types): its step renders the
  camera for the observation (``self._env.render()`` in ``_format_raw_obs``); the unread step runs the same step
  with that render answered by a blank frame. The render reads MuJoCo's data and writes none of it: with the same
  episodes in the same env instance, the physics (``qpos``, ``qvel``, ``qacc_warmstart``, mocap, controls), the
  rewards, flags and every frame read are bitwise the same with and without the skipped renders
  (``tests/lerobot/test_unread_lerobot.py``).
  An env instance is *not* history-free by itself, with or without skipping: its reset frame (the first observation
  of an episode) depends on the episode that instance ran before. Meta-World's ``reset`` calls ``reset_model``
  twice, the first time on the previous episode's final data (before gymnasium's ``mj_resetData``), and the goal
  site's world position in the reset frame (``data.site_xpos``, computed before the second call moves the site and
  not recomputed until the first step's ``mj_forward``) keeps the height of the previous episode's object (measured:
  3e-6 m, enough to move pixels). A policy that reads the reset frame then acts differently, so an episode's
  numbers depend on which episode its slot ran before (1e-5 in a return between -b 1 and 2): the same at the same batch size
  and vectorization (the ledger gives episodes to slots in a fixed order), not across them
  (:mod:`fasteval.robot.reproducible` declares it; the run's guarantee says so). An equality check of skipping
  must therefore compare runs with the same slot assignment.
  The one failure of the earlier equality test (a return off by 3e-4 in a full LeRobot run) was no effect of
  skipping: the same run repeated in one process with skipping *off* gave that other return too (2 runs of 8).
  Its cause: gymnasium's MuJoCo renderer renders in whatever GL context is current, and a closed env's MuJoCo
  render context, freed later by the garbage collector, deletes its GL objects by number in the context current
  then, a running env's: that env's frames came out black mid-episode. fasteval's LeRobot Meta-World env makes
  its own context current before each step and frees its render context in its own context when closed
  (:class:`fasteval.robot.lerobot.envs.OwnGLContext`; tested, the test fails without either part). Exactness is proven
  step by step in one env instance, and on whole runs with the same slot assignment.

Anything else: ``None`` (every observation is computed).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable

import gymnasium as gym

PIXEL_OBS_TYPES = ("pixels", "pixels_agent_pos")
"""gym-pusht's (and LeRobot's) observation types with an image."""


def unread_step(env: Any) -> Callable[[Any], tuple] | None:
    """The unread step of built slot env ``env`` (see the module docstring), or ``None``."""
    for declared in (_pusht, _render_observation, _libero, _lerobot_metaworld):
        step = declared(env)
        if step is not None:
            return step
    return None


# -- PushT -------------------------------------------------------------------------------------------
def _nothing() -> None:
    return None


def _pusht(env: Any) -> Callable[[Any], tuple] | None:
    module = sys.modules.get("gym_pusht.envs.pusht")  # loaded whenever a PushT env exists
    base = env.unwrapped if isinstance(env, gym.Env) else None
    if module is None or not isinstance(base, module.PushTEnv) or base.obs_type not in PIXEL_OBS_TYPES:
        return None
    if not passes_observation_through(env):
        return None

    def step(action: Any) -> tuple:
        base.get_obs = _nothing  # PushTEnv.step ends with self.get_obs(): the render, skipped for this step
        try:
            return env.step(action)  # through the wrappers: TimeLimit still counts the step
        finally:
            del base.get_obs

    return step


PASS_THROUGH_WRAPPERS = (gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing)
"""gymnasium wrappers whose ``step`` hands the inner step's observation on untouched (whatever it is)."""


def passes_observation_through(env: Any) -> bool:
    """Whether every wrapper of ``env`` hands the inner step's observation on untouched: a wrapper of
    :data:`PASS_THROUGH_WRAPPERS`, or one that does not override ``gym.Wrapper.step`` (LeRobot's one-env
    ``ClosesVector``). Declared by class: an observation wrapper (or gymnasium's ``PassiveEnvChecker``, which checks
    the first step's observation) between the skipping env and the run means no skipping."""
    while isinstance(env, gym.Wrapper):
        if not (isinstance(env, PASS_THROUGH_WRAPPERS) or type(env).step is gym.Wrapper.step):
            return False
        env = env.env
    return True


# -- gymnasium: a frame as the observation ------------------------------------------------------------
def _render_observation(env: Any) -> Callable[[Any], tuple] | None:
    if not isinstance(env, gym.wrappers.AddRenderObservation) or env.render_mode != "rgb_array":
        return None
    if env.unwrapped.render_mode != "rgb_array":  # a "human" env renders inside its own step
        return None
    return env.env.step  # the wrapper's observation() (its render) is what is skipped


# -- LIBERO (LeRobot's LiberoEnv) ----------------------------------------------------------------------
class StaleCameras:
    """robosuite's camera observables of one env, which keep their last frame while :attr:`stale` is True.

    The env's ``_update_observables`` (called at every sub-step, and with ``force`` on resets and init states)
    is shadowed on the instance: while stale, each image observable's sensor returns the observable's current
    value for that call, so its clock (sampling time, delay) advances exactly as with the render.
    """

    def __init__(self, robosuite_env: Any):
        self.env = robosuite_env
        self.stale = False
        self.update = robosuite_env._update_observables
        robosuite_env._update_observables = self._update

    def _update(self, force: bool = False) -> Any:
        if not self.stale:
            return self.update(force=force)
        cameras = [o for o in self.env._observables.values() if o.modality == "image"]
        sensors = [o._sensor for o in cameras]
        for observable in cameras:
            observable._sensor = _last_frame(observable)
        try:
            return self.update(force=force)
        finally:
            for observable, sensor in zip(cameras, sensors):
                observable._sensor = sensor


def _last_frame(observable: Any) -> Callable[[Any], Any]:
    sensor = observable._sensor

    def last(obs_cache: Any) -> Any:
        return observable._current_observed_value

    last.__modality__ = sensor.__modality__  # robosuite reads an observable's modality from its sensor
    return last


_CAMERAS: "weakref.WeakKeyDictionary[Any, StaleCameras]" = weakref.WeakKeyDictionary()


def _libero_env(env: Any) -> Any:
    module = sys.modules.get("lerobot.envs.libero")
    base = env.unwrapped if isinstance(env, gym.Env) else None
    if module is None or not isinstance(base, module.LiberoEnv):
        return None
    return base


def cameras_of(libero: Any) -> StaleCameras:
    """The :class:`StaleCameras` of LeRobot ``LiberoEnv`` ``libero``'s robosuite env (built on first use)."""
    libero._ensure_env()
    robosuite_env = libero._env.env
    cameras = _CAMERAS.get(robosuite_env)
    if cameras is None:
        cameras = _CAMERAS[robosuite_env] = StaleCameras(robosuite_env)
    return cameras


def _libero(env: Any) -> Callable[[Any], tuple] | None:
    libero = _libero_env(env)
    if libero is None:
        return None
    _settle_without_frames(libero)

    def step(action: Any) -> tuple:
        cameras = cameras_of(libero)
        cameras.stale = True
        try:
            return env.step(action)
        finally:
            cameras.stale = False

    return step


def _settle_without_frames(libero: Any) -> None:
    """Shadow ``libero.reset`` (once): the frames of the reset, the init state and the settle steps but the last
    are not rendered (only the last settle step's observation is returned)."""
    if "reset" in vars(libero):
        return
    reset = libero.reset

    def settled_reset(seed: Any = None, **kwargs: Any) -> Any:
        waits = int(libero.num_steps_wait)
        if waits < 1:
            return reset(seed=seed, **kwargs)
        cameras = cameras_of(libero)
        control = libero._env
        step, count = control.step, [0]

        def settle(action: Any) -> Any:
            count[0] += 1
            cameras.stale = count[0] < waits
            return step(action)

        control.step = settle
        cameras.stale = True
        try:
            return reset(seed=seed, **kwargs)
        finally:
            cameras.stale = False
            del control.step

    libero.reset = settled_reset



# -- Meta-World (LeRobot's MetaworldEnv) ---------------------------------------------------------------
def _lerobot_metaworld(env: Any) -> Callable[[Any], tuple] | None:
    module = sys.modules.get("lerobot.envs.metaworld")
    base = env.unwrapped if isinstance(env, gym.Env) else None
    if module is None or not isinstance(base, module.MetaworldEnv) or base.obs_type not in PIXEL_OBS_TYPES:
        return None
    import numpy as np

    blank = np.zeros((base.observation_height, base.observation_width, 3), dtype=np.uint8)

    def no_frame() -> Any:
        return blank

    def step(action: Any) -> tuple:
        base._ensure_env()
        inner = base._env
        inner.render = no_frame  # MetaworldEnv._format_raw_obs renders for the observation: skipped this step
        try:
            return env.step(action)
        finally:
            del inner.render

    return step
