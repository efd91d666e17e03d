"""MuJoCo rendering on machines without a display: ``MUJOCO_GL=egl`` when nothing else is chosen.

MuJoCo's renderer (gymnasium's ``MujocoRenderer``, used by MuJoCo envs and MetaWorld) picks its
OpenGL backend from ``MUJOCO_GL`` when it creates its first context. Its default (``glfw``) needs
a display; without one, rendering fails. :func:`ensure_headless_gl` sets ``MUJOCO_GL=egl`` (and
``PYOPENGL_PLATFORM=egl``, which MuJoCo's EGL backend needs) when all of these hold:

* ``MUJOCO_GL`` is not set (a user's choice, ``osmesa`` say, is never overridden);
* there is no display: neither ``DISPLAY`` nor ``WAYLAND_DISPLAY`` is set;
* the platform is Linux (macOS and Windows have their own backends).

It says so once per process (a ``logging`` warning on the ``fasteval`` logger). It is called
where an env of a MuJoCo plugin is about to be built (:func:`fasteval.robot.env_kinds.prepare_env`,
:class:`fasteval.robot.metaworld.MetaWorldEnv`, LeRobot's env types), in the main process before any env
worker starts, so the workers inherit the variable. See docs/robot.md ("Headless MuJoCo rendering").

:func:`headless` is also what refuses a ``render_mode="human"`` run that could not open a window
(:func:`fasteval.robot.env_kinds.render_mode_problem`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import MutableMapping

logger = logging.getLogger("fasteval")

_said = False


def headless(environ: MutableMapping[str, str] | None = None, platform: str | None = None) -> bool:
    """True on Linux without ``DISPLAY`` and ``WAYLAND_DISPLAY``."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    return platform.startswith("linux") and not environ.get("DISPLAY") and not environ.get("WAYLAND_DISPLAY")


def ensure_headless_gl(environ: MutableMapping[str, str] | None = None, platform: str | None = None) -> bool:
    """Set ``MUJOCO_GL=egl`` if it is unset and there is no display (see the module docstring).

    Returns whether it set the variable now. ``environ`` / ``platform`` are for tests.
    """
    global _said
    environ = os.environ if environ is None else environ
    if "MUJOCO_GL" in environ or not headless(environ, platform):
        return False
    environ["MUJOCO_GL"] = "egl"
    environ.setdefault("PYOPENGL_PLATFORM", "egl")
    if not _said:
        _said = True
        logger.warning("fasteval: no display and MUJOCO_GL unset: using MUJOCO_GL=egl for MuJoCo rendering "
                       "(set MUJOCO_GL yourself to choose another backend, e.g. osmesa).")
    return True
