"""LeRobot env types of the differential test: episodes that end early, and LIBERO with a dense witness reward.

Importing this module registers, in the importing process only:

* the gymnasium id ``fasteval_test/VaryingLength-v0``: :class:`RenderedVaryingEnv`, PushT's observation
  layout (``pixels`` 96x96x3, ``agent_pos`` [2]) with episodes of ``7 + seed % 13`` steps (from
  ``fasteval.robot.lerobot.testing``), plus a ``render()`` (LeRobot's ``eval_main`` always renders);
* the LeRobot env type ``fasteval_varying`` (``--env.type=fasteval_varying``), built by LeRobot's own
  ``EnvConfig.create_envs`` (gymnasium's same-step autoreset, as LeRobot builds PushT's vector envs).

* the LeRobot env type ``libero_witness`` (``--env.type=libero_witness``): LeRobot's own LIBERO env type (its
  config class, factory, tasks, init states, processors) whose sub-envs add a dense reward, the distance the
  end effector has moved from where the episode started (:class:`EefDistanceReward`). LIBERO's own reward is
  1 on success only, so a random policy's episodes all score 0, and two runs that agree on zeros may still have
  taken different paths; with this reward, equal per-episode sums and maxima mean equal trajectories.

Both ``lerobot-eval`` and ``fasteval`` then take them on the command line, with no other change.
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


# -- LIBERO with a witness reward --------------------------------------------------------------------------
LIBERO_WITNESS = "libero_witness"


class EefDistanceReward(gym.Wrapper):
    """LIBERO's reward plus the distance (metres) of the end effector from its position after the reset."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.start = np.zeros(3)

    @staticmethod
    def _eef(obs) -> np.ndarray:
        return np.asarray(obs["robot_state"]["eef"]["pos"], dtype=np.float64)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.start = self._eef(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward) + float(np.linalg.norm(self._eef(obs) - self.start)), terminated, truncated, info


def _register_libero_witness() -> None:
    try:
        from lerobot.envs.configs import EnvConfig, LiberoEnv
    except Exception:  # LeRobot without its LIBERO config: no such type
        return
    if LIBERO_WITNESS in EnvConfig.get_known_choices():
        return

    @EnvConfig.register_subclass(LIBERO_WITNESS)
    @dataclass
    class LiberoWitnessConfig(LiberoEnv):
        def create_envs(self, n_envs: int, use_async_envs: bool = False):
            suites = super().create_envs(n_envs, use_async_envs)
            for tasks in suites.values():
                for vector in tasks.values():
                    vector.envs = [EefDistanceReward(env) for env in vector.envs]  # SyncVectorEnv steps these
            return suites


_register_libero_witness()
