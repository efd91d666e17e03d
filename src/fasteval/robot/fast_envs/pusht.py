"""gym-pusht's PushT with a faster observation image path; every output identical.

In ``gym_pusht.envs.pusht.PushTEnv._get_img`` about half of a step goes into
``np.transpose(np.array(pygame.surfarray.pixels3d(screen)))``: a locked-surface copy into a
column-major array, then a transpose that ``cv2.resize`` must gather from. Here the 512x512
surface is read with ``pygame.image.tobytes(screen, "RGB")``, already row-major ``HxWx3``,
viewed as a NumPy array without a copy. The pixels are the same bytes in the same order, so
the resized image (and everything computed from it) is bit-identical. Nothing else changes:
physics, rewards, flags, infos and the action marker of ``render()`` are the parent's code.

Use :func:`make_pusht` (``--env fasteval.robot.fast_envs.pusht:make_pusht``); ``--env.type=pusht``
picks it only for the gym-pusht versions listed in
:data:`fasteval.robot.fast_envs.PUSHT_CHECKED_VERSIONS`. Importing this module imports gym_pusht.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pygame
from gym_pusht.envs.pusht import PushTEnv


class FastPushTEnv(PushTEnv):
    """:class:`gym_pusht.envs.pusht.PushTEnv` with the image read through ``pygame.image.tobytes``."""

    def _get_img(self, screen: pygame.Surface, width: int, height: int, render_action: bool = False) -> np.ndarray:
        # The parent's body (gym-pusht 0.1.8) with its first line replaced; the rest is unchanged.
        w, h = screen.get_size()
        img = np.frombuffer(pygame.image.tobytes(screen, "RGB"), dtype=np.uint8).reshape(h, w, 3)
        img = cv2.resize(img, (width, height))
        render_size = min(width, height)
        if render_action and self._last_action is not None:
            action = np.array(self._last_action)
            coord = (action / 512 * [height, width]).astype(np.int32)
            marker_size = int(8 / 96 * render_size)
            thickness = int(1 / 96 * render_size)
            cv2.drawMarker(
                img,
                coord,
                color=(255, 0, 0),
                markerType=cv2.MARKER_CROSS,
                markerSize=marker_size,
                thickness=thickness,
            )
        return img


def make_pusht(**kwargs: Any) -> FastPushTEnv:
    """``FastPushTEnv(**kwargs)`` with gym-pusht's registered default ``obs_type="state"``."""
    kwargs.setdefault("obs_type", "state")
    return FastPushTEnv(**kwargs)
