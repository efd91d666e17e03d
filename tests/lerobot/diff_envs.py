"""A LeRobot env type whose episodes end early, for the differential test's done-mask case.

Importing this module registers, in the importing process only:

* the gymnasium id ``fasteval_test/VaryingLength-v0``: :class:`RenderedVaryingEnv`, PushT's observation
  layout (``pixels`` 96x96x3, ``agent_pos`` [2]) with episodes of ``7 + seed % 13`` steps (from
  ``fasteval.robot.lerobot.testing``), plus a ``render()`` (LeRobot's ``eval_main`` always renders);
* the LeRobot env type ``fasteval_varying`` (``--env.type=fasteval_varying``), built by LeRobot's own
  ``EnvConfig.create_envs`` (gymnasium's same-step autoreset, as LeRobot builds PushT's vector envs).

Both ``lerobot-eval`` and ``fasteval`` then take it on the command line, with no other change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from fasteval.robot.lerobot.testing import VaryingLengthEnv

GYM_ID = "fasteval_test/VaryingLength-v0"
ENV_TYPE = "fasteval_varying"


class RenderedVaryingEnv(VaryingLengthEnv):
    """:class:`VaryingLengthEnv` with ``rgb_array`` rendering (the last observation's pixels)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str = "rgb_array", **kwargs) -> None:
        super().__init__(**kwargs)
        self.render_mode = render_mode
        self._frame = np.zeros((96, 96, 3), np.uint8)

    def _obs(self):
        obs = super()._obs()
        self._frame = obs["pixels"]
        return obs

    def render(self) -> np.ndarray:
        return self._frame.copy()


def make_rendered_varying_env(**kwargs) -> RenderedVaryingEnv:
    return RenderedVaryingEnv(**kwargs)


if GYM_ID not in gym.registry:
    gym.register(GYM_ID, entry_point=f"{__name__}:make_rendered_varying_env")


def _register_env_type() -> None:
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.configs import EnvConfig

    if ENV_TYPE in EnvConfig.get_known_choices():
        return

    @EnvConfig.register_subclass(ENV_TYPE)
    @dataclass
    class VaryingEnvConfig(EnvConfig):
        task: str | None = "VaryingLength-v0"
        fps: int = 10
        episode_length: int = 50
        features: dict = field(default_factory=lambda: {
            "action": PolicyFeature(type=FeatureType.ACTION, shape=(2,)),
            "agent_pos": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
            "pixels": PolicyFeature(type=FeatureType.VISUAL, shape=(96, 96, 3)),
        })
        features_map: dict = field(default_factory=lambda: {
            "action": "action", "agent_pos": "observation.state", "pixels": "observation.image"})

        @property
        def package_name(self) -> str:
            return "tests.lerobot.diff_envs"

        @property
        def gym_id(self) -> str:
            return GYM_ID

        @property
        def gym_kwargs(self) -> dict:
            return {"max_episode_steps": self.episode_length}


_register_env_type()
