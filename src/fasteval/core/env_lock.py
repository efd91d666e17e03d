"""One lock for every env call of this process: the loop's in-process envs and the video encoder's replays.

Envs of one process are not safe to call from two threads at once. gymnasium's pygame renderers draw filled
polygons through SDL_gfx, which keeps its polygon scratch buffer in a global; MuJoCo's GL contexts are current per
thread. A replay rendering in the encoder's thread while the loop renders a pixel observation changed that
observation (pixel CartPole: one episode in a few runs took another length), so each env call (a step, a reset,
a render, a rebuild) holds :data:`ENV_CALLS`. Calls are short and the lock is re-entrant: the loop and a replay
take turns per step, and a worker process (no replay thread) never waits on it.
"""

from __future__ import annotations

import threading

ENV_CALLS = threading.RLock()
"""Held around every env call of this process (the loop's :class:`~fasteval.core.slot_block.SlotBlock`, the
video replays of :mod:`fasteval.robot.video_encoder`)."""
