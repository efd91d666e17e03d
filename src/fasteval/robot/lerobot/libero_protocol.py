"""LIBERO's protocol card: the settings that move a LIBERO success rate, recorded with every LIBERO run.

``meta["protocol"]`` in ``eval_info.json`` (per task: ``meta["tasks"][i]["protocol"]`` of a suite), in
``manifest.json`` and on the run page (``report.html``), from :func:`env_meta`: LIBERO's task name and its
language instruction (what the policy is told), ``num_steps_wait``,
``hard_reset``, ``init_states`` and the init-state rule (:mod:`fasteval.robot.lerobot.libero`), the image size,
the cameras, the control frequency and mode, the episode length, the success rule, the render backend
(``MUJOCO_GL``) and its GL renderer string, with the renderer of every process that hosted the run's envs
(``gl_renderers``: the main process, or each env worker; :func:`with_renderers`) (and ``gl_warning`` when a GPU is present but a software renderer
renders: :mod:`fasteval.robot.env_kinds.renderer`), and the versions of the packages the numbers depend on (the asset
packages' included). vla-evaluation-harness's "common pitfalls" lists these as the settings that move a
number by tens of points; two LIBERO numbers are comparable when their cards are equal.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from typing import Any, Mapping

from fasteval.robot.env_kinds.renderer import gl_renderer, gpu_present, renderer_warning, renderers_warning
from fasteval.robot.lerobot.envs import ENV_REF, make_env
from fasteval.robot.lerobot.libero import (INIT_STATE_OFFSET, SUCCESS_RULE, assets_dir, env_field, is_libero_type,
                                           versions)


def env_meta(env: str, env_kwargs: Mapping[str, Any], max_steps: int | None = None) -> dict[str, Any]:
    """Facts about a LeRobot env type for a run's metadata: ``{"protocol": card}`` for LIBERO types
    (:func:`protocol_card`; ``max_steps``: the run's cap, when given), else ``{}``."""
    if env != ENV_REF or not is_libero_type(dict(env_kwargs).get("type")):
        return {}
    return {"protocol": protocol_card(env_kwargs, max_steps)}


def protocol_card(env_kwargs: Mapping[str, Any], max_steps: int | None = None) -> dict[str, Any]:
    """The settings of one LIBERO task's evaluation (see the module docstring), read from the env LeRobot
    builds for ``env_kwargs`` (its GL context is never made here). ``max_steps``: the run's step cap, when it
    overrides the env's."""
    key = json.dumps(dict(env_kwargs), sort_keys=True, default=str)
    card = dict(_card(key))
    if max_steps is not None:
        card["episode_length"] = int(max_steps)
    backend = os.environ.get("MUJOCO_GL") or "default (glfw: needs a display)"
    card["render_backend"] = backend
    card["gl_renderer"] = gl_renderer(os.environ.get("MUJOCO_GL"))
    warning = renderer_warning(card["gl_renderer"], gpu_present(), os.environ.get("MUJOCO_GL"))
    if warning is not None:  # said once per process and task (the card is built once per run)
        card["gl_warning"] = warning
        warnings.warn(warning, RuntimeWarning, stacklevel=2)
    return card


def with_renderers(card: Mapping[str, Any], renderers: Mapping[str, str]) -> dict[str, Any]:
    """``card`` with ``gl_renderers``: the GL renderer of each process that hosted the run's envs (``{"main": ...}``
    or ``{"worker 0": ..., ...}``), and ``gl_warning`` when one of them is a software renderer on a machine with a
    GPU (unless the card has a warning already)."""
    out = {**card, "gl_renderers": dict(renderers)}
    if "gl_warning" not in out:
        warning = renderers_warning(renderers, gpu_present(), os.environ.get("MUJOCO_GL"))
        if warning is not None:
            out["gl_warning"] = warning
    return out


@functools.lru_cache(maxsize=32)
def _card(key: str) -> dict[str, Any]:
    kwargs = json.loads(key)
    env = make_env(**kwargs)
    try:
        inner = env.unwrapped
        states = env_field(inner, "_init_states", None)
        n_states = None if states is None else len(states)
        offset = int(kwargs.get(INIT_STATE_OFFSET, 0) or 0)
        cameras = list(env_field(inner, "camera_name", []) or [])
        mapping = dict(env_field(inner, "camera_name_mapping", {}) or {})
        card = {
            "benchmark": "LIBERO-plus" if env_field(inner, "is_libero_plus", False) else "LIBERO",
            "task": env_field(inner, "task", None),
            "language_instruction": env_field(inner, "task_description", None),
            "num_steps_wait": env_field(inner, "num_steps_wait", None),
            "hard_reset": env_field(inner, "hard_reset", None),
            "init_states": bool(env_field(inner, "init_states", False)),
            "n_init_states": n_states,
            "init_state_offset": offset,
            "init_state_rule": (f"the episode reset with seed s starts from init state (s - {offset}) mod {n_states}"
                                if n_states else "none: LIBERO's own random placement at each reset"),
            "observation_height": env_field(inner, "observation_height", None),
            "observation_width": env_field(inner, "observation_width", None),
            "cameras": [f"{cam} -> observation.images.{mapping.get(cam, cam)}" for cam in cameras],
            "control_freq_hz": env_field(inner, "control_freq", None),
            "control_mode": env_field(inner, "control_mode", None),
            "obs_type": env_field(inner, "obs_type", None),
            "episode_length": env_field(inner, "_max_episode_steps", None),
            "success_rule": SUCCESS_RULE,
            "assets": str(assets_dir()),
            "versions": versions(),
        }
    finally:
        env.close()
    return card
